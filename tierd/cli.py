"""The ``tierd`` command line.

The daemon's own commands (``run``, ``db``, ``config``) are here; the commands that talk to a
running daemon over its API are in :mod:`tierd.commands`. Each of those takes ``--json`` (the
API's JSON as it came) and otherwise prints a short aligned table or line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tierd import __version__, commands
from tierd.config import Config, default_config_path, load_config
from tierd.display import format_bytes, printable, table
from tierd.errors import ApiError, ConfigError, TierdError
from tierd.keyring import Keyring

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_CONFIG = 78  # EX_CONFIG from sysexits.h: systemd will not restart-loop on it


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` and run the command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    try:
        result: int = args.func(args)
    except ConfigError as exc:
        print(f"tierd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ApiError as exc:
        _report_api_error(args, exc)
        return 1
    except TierdError as exc:
        print(printable(f"tierd: {exc}"), file=sys.stderr)
        return 1
    except OSError as exc:
        print(printable(f"tierd: {exc}"), file=sys.stderr)
        return 1
    except Exception as exc:
        if type(exc).__module__.startswith("httpx"):
            print(printable(f"tierd: cannot reach the daemon: {exc}"), file=sys.stderr)
            return 1
        raise
    return result


def _report_api_error(args: argparse.Namespace, exc: ApiError) -> None:
    """The problem's detail on stderr (and what blocks a reservation); its JSON too with ``--json``."""
    if getattr(args, "json", False) and exc.problem is not None:
        print(json.dumps(exc.problem, indent=2))
    print(printable(f"tierd: {exc}"), file=sys.stderr)
    blocked = (exc.problem or {}).get("blocked") or []
    if blocked:
        rows = [(b["checkpoints"], format_bytes(b["bytes"]), b["blocker"], b["reason"]) for b in blocked]
        for line in table(("CHECKPOINTS", "SIZE", "BLOCKER", "REASON"), rows, right=(0, 1)):
            print(f"  {line}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=None,
        help="config file (default: $TIERD_CONFIG, else /etc/tierd/config.yaml)",
    )
    parser = argparse.ArgumentParser(prog="tierd", description="Checkpoint tiering daemon.")
    parser.add_argument("--version", action="version", version=f"tierd {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    _add(sub, common, "run", "run the daemon in the foreground", _cmd_run)
    commands.add_commands(sub, common)

    db = sub.add_parser("db", help="catalog schema").add_subparsers(metavar="COMMAND")
    _add(db, common, "upgrade", "migrate the catalog to this version's schema", _cmd_db_upgrade)
    _add(db, common, "check", "exit 0 when the catalog schema is current", _cmd_db_check)

    cfg = sub.add_parser("config", help="configuration").add_subparsers(metavar="COMMAND")
    validate = _add(cfg, common, "validate", "check a config file and exit", _cmd_config_validate)
    validate.add_argument("file", type=Path, nargs="?", help="the file (default: --config)")
    return parser


def _add(
    sub: Any, common: argparse.ArgumentParser, name: str, help_: str, func: Callable[..., int]
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_, parents=[common])
    parser.set_defaults(func=func)
    return parser


def _config(args: argparse.Namespace) -> Config:
    from tierd.logs import configure_logging

    config = load_config(args.config or default_config_path())
    configure_logging(config.log.level, config.log.format)
    return config


def _cmd_run(args: argparse.Namespace) -> int:
    from tierd.daemon.runtime import run

    run(_config(args))
    return 0


def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from tierd.daemon.catalog.db import Database
    from tierd.daemon.catalog.migrate import head_revision, upgrade

    config = _config(args)
    db = Database(config.catalog.url)
    upgrade(db)
    print(f"catalog at revision {head_revision(db)}")
    return 0


def _cmd_db_check(args: argparse.Namespace) -> int:
    from tierd.daemon.catalog.db import Database
    from tierd.daemon.catalog.migrate import check_schema

    check_schema(Database(_config(args).catalog.url))
    print("catalog schema is current")
    return 0


def _cmd_config_validate(args: argparse.Namespace) -> int:
    path = args.file or args.config or default_config_path()
    config = load_config(path)
    Keyring(config.api.tokens)  # a token file that cannot be read is an error here too
    print(f"{path}: valid ({len(config.tiers)} tiers, {len(config.watch)} watched roots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

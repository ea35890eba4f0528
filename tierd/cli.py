"""The ``tierd`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tierd import __version__
from tierd.config import Config, default_config_path, load_config
from tierd.errors import ApiError, ConfigError, TierdError

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
    except TierdError as exc:
        print(f"tierd: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"tierd: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if type(exc).__module__.startswith("httpx"):
            print(f"tierd: cannot reach the daemon: {exc}", file=sys.stderr)
            return 1
        raise
    return result


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
    status = _add(sub, common, "status", "ask the running daemon whether it is ready", _cmd_status)
    _add_client_args(status)
    ls = _add(sub, common, "ls", "list checkpoints, newest first", _cmd_ls)
    _add_client_args(ls)
    ls.add_argument("--run", help="only this run")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--json", action="store_true", help="print the API's JSON")
    show = _add(sub, common, "show", "show one checkpoint with its files", _cmd_show)
    _add_client_args(show)
    show.add_argument("id", type=int)

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


def _add_client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="the daemon's API (default: from the config's api.listen)")
    parser.add_argument("--token", default=os.environ.get("TIERD_TOKEN"), help="bearer token ($TIERD_TOKEN)")


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
    print(f"{path}: valid ({len(config.tiers)} tiers, {len(config.watch)} watched roots)")
    return 0


def _client(args: argparse.Namespace) -> Any:
    from tierd.api.client import Client

    url = args.url
    if url is None:
        config = load_config(args.config or default_config_path())
        host = config.api.host
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
        url = f"http://{'[' + host + ']' if ':' in host else host}:{config.api.port}"
    return Client(url, token=args.token)


def _cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        try:
            body = client.ready()
        except ApiError as exc:
            print(f"not ready: {exc.detail}")
            return 1
    print(f"ready (node {body['node']})")
    return 0


def _cmd_ls(args: argparse.Namespace) -> int:
    with _client(args) as client:
        page = client.checkpoints(run=args.run, limit=args.limit)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    print(f"{'ID':>6}  {'RUN':<20} {'STEP':>10}  {'STATE':<9} REPLICAS")
    for item in page["items"]:
        replicas = " ".join(f"{r['tier']}={r['state']}" for r in item["replicas"])
        print(f"{item['id']:>6}  {item['run']:<20} {item['step']:>10}  {item['state']:<9} {replicas}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(json.dumps(client.checkpoint(args.id), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

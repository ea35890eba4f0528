"""The ``tierd`` command line: the parser of every command, and errors as exit codes.

The daemon's own commands (``run``, ``db``, ``config``) are in :mod:`tierd.cli.daemon`; the
commands that talk to a running daemon over its API are in the other modules of
:mod:`tierd.cli`, one per group. Each of those takes ``--json`` (the API's JSON as it came) and
otherwise prints a short aligned table or line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tierd import __version__
from tierd import logs as _logs  # noqa: F401  first: httpx and structlog load without rich (tierd.logs)
from tierd.cli import checkpoints, daemon, fleet, protection, restores, systemd, tiers, usage
from tierd.cli.completion import add_completion, files
from tierd.cli.display import format_bytes, printable, table
from tierd.errors import ApiError, ConfigError, TierdError

__all__ = ["main", "parser"]

EXIT_USAGE = 2
EXIT_CONFIG = 78  # EX_CONFIG from sysexits.h: systemd will not restart-loop on it

#: What adds each command to the parser, in the order ``tierd --help`` lists them.
_COMMANDS: tuple[Callable[[Any, argparse.ArgumentParser], None], ...] = (
    daemon.add_run,
    fleet.add_status,
    checkpoints.add_listing,
    protection.add_commands,
    tiers.add_tiers,
    checkpoints.add_verify,
    tiers.add_reserve,
    restores.add_commands,
    checkpoints.add_audit,
    fleet.add_fleet,
    checkpoints.add_runs,
    tiers.add_retention,
    usage.add_usage,
    daemon.add_catalog_and_config,
    systemd.add_systemd,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` and run the command; returns the exit code."""
    root = parser()
    args = root.parse_args(argv)
    if not hasattr(args, "func"):
        root.print_help()
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


def parser() -> argparse.ArgumentParser:
    """The parser of ``tierd`` and every command (``completion`` prints a script made from it)."""
    common = argparse.ArgumentParser(add_help=False)
    files(
        common.add_argument(
            "--config",
            type=Path,
            default=None,
            help="config file (default: $TIERD_CONFIG, else /etc/tierd/config.yaml)",
        )
    )
    common.add_argument(
        "--no-color", action="store_true", help="no colour, even on a terminal (as $NO_COLOR does)"
    )
    root = argparse.ArgumentParser(prog="tierd", description="Checkpoint tiering daemon.")
    root.add_argument("--version", action="version", version=f"tierd {__version__}")
    sub = root.add_subparsers(metavar="COMMAND")
    for add in _COMMANDS:
        add(sub, common)
    add_completion(sub, root)
    return root


if __name__ == "__main__":
    sys.exit(main())

"""The daemon's own commands, run on its node without its API: ``run``, ``db`` and ``config``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierd.cli.completion import files
from tierd.cli.terminal import colour
from tierd.config import Config, default_config_path, load_config
from tierd.daemon.hangups import HangUps
from tierd.keyring import Keyring

__all__ = ["add_catalog_and_config", "add_run"]


def add_run(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``run`` to ``sub`` (an argparse subparsers action)."""
    _add(sub, common, "run", "run the daemon in the foreground", _cmd_run)


def add_catalog_and_config(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``db upgrade``, ``db check`` and ``config validate``."""
    db = sub.add_parser("db", help="catalog schema").add_subparsers(metavar="COMMAND")
    _add(db, common, "upgrade", "migrate the catalog to this version's schema", _cmd_db_upgrade)
    _add(db, common, "check", "exit 0 when the catalog schema is current", _cmd_db_check)

    cfg = sub.add_parser("config", help="configuration").add_subparsers(metavar="COMMAND")
    validate = _add(cfg, common, "validate", "check a config file and exit", _cmd_config_validate)
    files(validate.add_argument("file", type=Path, nargs="?", help="the file (default: --config)"))


def _add(
    sub: Any, common: argparse.ArgumentParser, name: str, help_: str, func: Callable[..., int]
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_, parents=[common])
    parser.set_defaults(func=func)
    return parser


def _config(args: argparse.Namespace) -> Config:
    from tierd.logs import configure_logging

    config = load_config(args.config or default_config_path())
    configure_logging(config.log.level, config.log.format, colors=colour(args.no_color, sys.stderr))
    return config


def _cmd_run(args: argparse.Namespace) -> int:
    hangups = HangUps()  # first: a SIGHUP while tierd starts must not end it
    config = _config(args)
    from tierd.daemon.runtime import run

    run(config, args.config or default_config_path(), hangups=hangups)
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
    if config.api.tls is not None:
        from tierd.api.tls import server_context

        server_context(config.api.tls)  # and a certificate or key that cannot be used
    print(f"{path}: valid ({len(config.tiers)} tiers, {len(config.watch)} watched roots)")
    return 0

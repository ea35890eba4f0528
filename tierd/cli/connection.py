"""The daemon's URL and the bearer token: flags first, then the environment, then the config.

The URL: ``--url``, else ``$TIERD_URL`` (as :mod:`tierd.client` reads it), else the config
file's ``api.listen``. The token: ``--token`` (others see it in ``ps``), else ``--token-file``,
else ``$TIERD_TOKEN``. A token file is read whole when the arguments are parsed, stripped of
surrounding whitespace, and refused (exit 2, naming the file, never showing its content) when
every user may read it, when it is empty, larger than :data:`tierd.keyring.MAX_TOKEN_FILE_BYTES`, or holds a
character a bearer token cannot carry (:func:`tierd.keyring.read_token_file`, as the daemon
reads its own).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tierd.config import Config, default_config_path, load_config
from tierd.errors import ConfigError
from tierd.keyring import read_token_file

__all__ = ["daemon_endpoint", "daemon_url", "token", "token_file"]


def token_file(text: str) -> str:
    """``--token-file``'s argparse type: the token in file ``text``; ArgumentTypeError says why not."""
    try:
        return read_token_file(Path(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc}") from None


def token(args: argparse.Namespace) -> str | None:
    """The bearer token: ``--token``, else ``--token-file``'s, else ``$TIERD_TOKEN`` (None: no token)."""
    return args.token or args.token_file or os.environ.get("TIERD_TOKEN") or None


def daemon_url(args: argparse.Namespace) -> str:
    """``--url``, else ``$TIERD_URL``, else the config's ``api.listen`` (a wildcard host as loopback).

    Raises ConfigError when it comes to the config and the config cannot be read or is invalid.
    """
    return daemon_endpoint(args)[0]


def daemon_endpoint(args: argparse.Namespace) -> tuple[str, Config | None]:
    """The daemon's URL as :func:`daemon_url` finds it, and the config when it came from one.

    The scheme is https when the config's API has ``api.tls``.
    """
    url: str | None = args.url or os.environ.get("TIERD_URL")
    if url:
        return url, None
    try:
        config = load_config(args.config or default_config_path())
    except ConfigError as exc:
        raise ConfigError([*exc.problems, "(or name the daemon's API with --url or $TIERD_URL)"]) from None
    host = config.api.host
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104
    scheme = "http" if config.api.tls is None else "https"
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{config.api.port}", config

"""What every command that talks to a running daemon shares.

Each takes ``--url`` (``$TIERD_URL``), ``--token`` or ``--token-file`` (``$TIERD_TOKEN``), as
:mod:`tierd.cli.connection` resolves them, ``--ca-file`` (``$TIERD_CA_FILE``, see
:mod:`tierd.cli.tls`) and ``--json``, which prints the API's JSON as it came (control characters
escaped by JSON); otherwise it prints a short line or an aligned table, every line through
``display.printable``. A checkpoint is named by its id or by ``RUN:STEP`` (split on the last
``:``, so a run name may hold one).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierd.cli.completion import files
from tierd.cli.connection import daemon_endpoint, token, token_file
from tierd.cli.display import printable
from tierd.cli.http import DaemonApi
from tierd.cli.tls import verification
from tierd.errors import NotFound

__all__ = [
    "DIGITS",
    "MAX_ID",
    "CheckpointRef",
    "Command",
    "checkpoint_ref",
    "command",
    "connect",
    "emit",
    "resolve",
    "with_ref",
]

MAX_ID = 2**63 - 1
DIGITS = re.compile(r"[0-9]+")
Command = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint as the user named it: an id, or a run and a step."""

    text: str
    id: int | None = None
    run: str = ""
    step: int = 0


def checkpoint_ref(text: str) -> CheckpointRef:
    """Parse ``7`` (an id) or ``RUN:STEP``; raises argparse.ArgumentTypeError for anything else."""
    if DIGITS.fullmatch(text) and int(text) <= MAX_ID:
        return CheckpointRef(text, id=int(text))
    run, colon, step = text.rpartition(":")
    if not colon or not run or not DIGITS.fullmatch(step) or int(step) > MAX_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a checkpoint id nor RUN:STEP")
    return CheckpointRef(text, run=run, step=int(step))


def command(
    sub: Any, common: argparse.ArgumentParser, name: str, help_: str, func: Command
) -> argparse.ArgumentParser:
    """Add command ``name`` to ``sub`` (argparse subparsers) with ``--url``, a token and ``--json``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_, parents=[common])
    parser.set_defaults(func=func)
    parser.add_argument(
        "--url", help="the daemon's API (default: $TIERD_URL, else from the config's api.listen)"
    )
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument(
        "--token", help="bearer token (others see it in ps: prefer --token-file or $TIERD_TOKEN)"
    )
    files(
        secret.add_argument(
            "--token-file",
            type=token_file,
            metavar="PATH",
            help="read the bearer token from this file (not readable by every user)",
        )
    )
    parser.add_argument(
        "--ca-file",
        type=Path,
        default=None,
        help="CA certificates (PEM) an https daemon's certificate must be signed by ($TIERD_CA_FILE; "
        "default: the system's, or with no --url the config's own api.tls.cert_file)",
    )
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
    return parser


def with_ref(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give ``parser`` the positional ``ID|RUN:STEP`` (``args.ref``, a CheckpointRef)."""
    parser.add_argument(
        "ref", type=checkpoint_ref, metavar="ID|RUN:STEP", help="a checkpoint id, or RUN:STEP"
    )
    return parser


def connect(args: argparse.Namespace) -> DaemonApi:
    """The API at ``--url``, ``$TIERD_URL`` or the config's ``api.listen``, with the token given.

    An https daemon's certificate is checked as :func:`tierd.cli.tls.verification` says.
    """
    url, config = daemon_endpoint(args)
    return DaemonApi(url, token=token(args), verify=verification(args.ca_file, config))


def resolve(client: DaemonApi, ref: CheckpointRef) -> int:
    """The id of the checkpoint ``ref`` names; raises NotFound for a run and step not recorded."""
    if ref.id is not None:
        return ref.id
    page = client.checkpoints(run=ref.run, step=ref.step, limit=1)
    if not page["items"]:
        raise NotFound(f"run {ref.run!r} has no checkpoint at step {ref.step}")
    return int(page["items"][0]["id"])


def emit(args: argparse.Namespace, body: object, lines: list[str] | Callable[[], list[str]]) -> int:
    """Print ``body`` as JSON with ``--json``, else the human ``lines`` (escaped); returns exit code 0."""
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print("\n".join(printable(line) for line in (lines() if callable(lines) else lines)))
    return 0

"""``tierd completion bash|zsh``: the shell's completion script for every command and option.

The script is generated from the parser itself by shtab (pinned in pyproject.toml), so it
completes what this version of ``tierd`` takes: commands, options, choices such as
``--action keep|delete|blocked``, and file or directory names where an option takes a path.
"""

from __future__ import annotations

import argparse
from typing import Any

import shtab

__all__ = ["SHELLS", "add_completion", "directories", "files"]

SHELLS = ("bash", "zsh")

_INSTALL = {
    "bash": 'eval "$(tierd completion bash)" in ~/.bashrc, or the output saved as '
    "/etc/bash_completion.d/tierd",
    "zsh": "the output saved as _tierd in a directory of $fpath (before compinit runs)",
}


def files(action: argparse.Action) -> argparse.Action:
    """Mark ``action`` as taking a file name (the shell completes file names there)."""
    action.complete = shtab.FILE  # type: ignore[attr-defined]
    return action


def directories(action: argparse.Action) -> argparse.Action:
    """Mark ``action`` as taking a directory name."""
    action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    return action


def add_completion(sub: Any, root: argparse.ArgumentParser) -> None:
    """Add ``completion SHELL`` to ``sub``; it prints the script for ``root`` (the whole parser)."""
    install = "; ".join(f"{shell}: {how}" for shell, how in _INSTALL.items())
    parser: argparse.ArgumentParser = sub.add_parser(
        "completion",
        help="print the shell completion script",
        description=f"Print the completion script for SHELL. Install it: {install}.",
    )
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help="bash or zsh")
    parser.set_defaults(func=lambda args: _print(root, args.shell))


def _print(root: argparse.ArgumentParser, shell: str) -> int:
    print(shtab.complete(root, shell=shell), end="")
    return 0

"""``tierd completion bash|zsh``: the shell's completion script for every command and option.

The script is generated from the parser itself by shtab (pinned in pyproject.toml), so it
completes what this version of ``tierd`` takes: commands, options, choices such as
``--action keep|delete|blocked``, and file or directory names where an option takes a path.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["SHELLS", "add_completion", "directories", "files"]

SHELLS = ("bash", "zsh")

_INSTALL = {
    "bash": 'eval "$(tierd completion bash)" in ~/.bashrc, or the output saved as '
    "/etc/bash_completion.d/tierd",
    "zsh": "the output saved as _tierd in a directory of $fpath (before compinit runs)",
}


#: What an option marked by ``files`` or ``directories`` takes, until shtab is told (``_print``).
_TAKES = "tierd_completes"


def files(action: argparse.Action) -> argparse.Action:
    """Mark ``action`` as taking a file name (the shell completes file names there)."""
    setattr(action, _TAKES, "FILE")
    return action


def directories(action: argparse.Action) -> argparse.Action:
    """Mark ``action`` as taking a directory name."""
    setattr(action, _TAKES, "DIRECTORY")
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
    """Print the script; shtab is imported here only (a daemon, which never completes, loads none of it)."""
    import shtab

    for action in _actions(root):
        if (takes := getattr(action, _TAKES, None)) is not None:
            action.complete = getattr(shtab, takes)  # type: ignore[attr-defined]
    print(shtab.complete(root, shell=shell), end="")
    return 0


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of ``parser`` and of its subcommands' parsers, at any depth."""
    found: list[argparse.Action] = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases share a parser
                found.extend(_actions(sub))
    return found

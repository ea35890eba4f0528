"""Every option and argument of every command says what it is for in ``tierd COMMAND --help``."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from tierd.cli.main import parser


def _parsers(
    root: argparse.ArgumentParser, path: str = "tierd"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``root`` and every parser below it, each with the command line that reaches it."""
    yield path, root
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _unhelped(root: argparse.ArgumentParser) -> list[str]:
    missing = []
    for path, each in _parsers(root):
        for action in each._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{path} {c.dest}" for c in action._choices_actions if not c.help]
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_command_has_help() -> None:
    assert _unhelped(parser()) == []


def test_the_walk_reaches_every_command_and_sees_a_missing_help() -> None:
    root = parser()
    paths = [path for path, _ in _parsers(root)]
    assert {"tierd ls", "tierd db upgrade", "tierd retention plan", "tierd completion"} <= set(paths)
    ls = dict(_parsers(root))["tierd ls"]
    ls.add_argument("--undocumented")
    assert _unhelped(root) == ["tierd ls --undocumented"]

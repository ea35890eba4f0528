"""Colour only where it is wanted: on a terminal (a pty here), not with ``--no-color``, a
non-empty ``$NO_COLOR`` or ``TERM=dumb``, never into a pipe or a file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from tierd.cli.terminal import colour, redraws


@pytest.fixture
def terminal() -> Iterator[TextIO]:
    """The writing end of a pseudo-terminal, as a text stream."""
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as stream:
        yield stream
    os.close(leader)


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


def test_a_terminal_gets_colour(terminal: TextIO) -> None:
    assert colour(False, terminal)


@pytest.mark.parametrize("value", ["1", "0", "false", "yes"])
def test_no_color_with_any_value_turns_it_off(
    terminal: TextIO, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("NO_COLOR", value)
    assert not colour(False, terminal)


def test_an_empty_no_color_is_not_set(terminal: TextIO, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "")
    assert colour(False, terminal)


def test_the_flag_and_a_dumb_terminal_turn_it_off(terminal: TextIO, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not colour(True, terminal)
    monkeypatch.setenv("TERM", "dumb")
    assert not colour(False, terminal)


def test_a_pipe_or_a_file_gets_none(tmp_path: Path) -> None:
    read, write = os.pipe()
    with os.fdopen(write, "w") as pipe, (tmp_path / "log").open("w") as file:
        assert not colour(False, pipe)
        assert not colour(False, file)
    os.close(read)


def test_a_progress_line_is_redrawn_only_on_a_terminal_that_is_not_dumb(
    terminal: TextIO, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``tierd restore --wait`` on TERM=dumb printed ``ESC [K`` raw before every progress line."""
    monkeypatch.setenv("NO_COLOR", "1")  # colour is not the question: an erase is not a colour
    assert redraws(terminal)
    monkeypatch.setenv("TERM", "dumb")
    assert not redraws(terminal)
    with (tmp_path / "log").open("w") as file:
        assert not redraws(file)

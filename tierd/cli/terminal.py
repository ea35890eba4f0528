"""What the CLI sends a terminal: colour only where it is wanted (https://no-color.org, clig.dev).

Colour is off with ``--no-color``, with ``$NO_COLOR`` set to anything but the empty string,
with ``TERM=dumb``, and wherever the stream is not a terminal (a pipe, a file, the journal).
A progress line is redrawn in place (carriage return and erase-to-end ``ESC [K``) only on a terminal
that is not ``TERM=dumb``, which has no erase sequence and would show it raw.
"""

from __future__ import annotations

import os
from typing import TextIO

__all__ = ["colour", "redraws"]


def colour(no_color: bool, stream: TextIO) -> bool:
    """Whether to colour what goes to ``stream``; ``no_color`` is the ``--no-color`` flag."""
    if no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return stream.isatty()


def redraws(stream: TextIO) -> bool:
    """Whether a progress line may be rewritten in place on ``stream`` (a terminal, not dumb)."""
    return os.environ.get("TERM") != "dumb" and stream.isatty()

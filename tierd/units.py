"""Sizes as people read them, shared by the daemon's messages and the CLI's tables."""

from __future__ import annotations

import math

__all__ = ["format_bytes"]

_UNITS = ("kB", "MB", "GB", "TB", "PB", "EB")


def format_bytes(size: int) -> str:
    """``size`` in decimal units with one decimal, as disks are sold: ``1.1 TB``."""
    if size < 1000:
        return f"{size} bytes"
    exponent = min(len(_UNITS), int(math.log10(size) // 3))
    return f"{size / 1000**exponent:.1f} {_UNITS[exponent - 1]}"

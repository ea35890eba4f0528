"""Sizes as people read them (``tierd.units``)."""

from __future__ import annotations

import pytest

from tierd.units import format_bytes

GB = 10**9


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 bytes"), (999, "999 bytes"), (1000, "1.0 kB"), (1_500_000, "1.5 MB"), (1_100 * GB, "1.1 TB")],
)
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text

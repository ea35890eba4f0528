"""A streamed request body read as a RangeReader: chunks asked for at once are served in order;
the buffers a peer store receives into."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierd.config import PeerTier
from tierd.daemon.backends.base import read_full
from tierd.daemon.backends.budget import ByteBudget, default_budget
from tierd.daemon.backends.peer import PeerStore, StreamReader
from tierd.daemon.backends.peer.store import RECEIVE_BUDGET
from tierd.errors import IntegrityError

DATA = os.urandom(1024 * 1024)
HALF = len(DATA) // 2


async def _body(data: bytes, piece: int = 65536) -> AsyncIterator[bytes]:
    for at in range(0, len(data), piece):
        await asyncio.sleep(0)
        yield data[at : at + piece]


async def test_the_second_half_asked_first_waits_for_the_first() -> None:
    reader = StreamReader(_body(DATA), len(DATA), "f")
    first, second = bytearray(HALF), bytearray(HALF)
    later = asyncio.create_task(read_full(reader, HALF, memoryview(second), where="f"))
    await asyncio.sleep(0)
    await read_full(reader, 0, memoryview(first), where="f")
    await later
    assert bytes(first + second) == DATA


async def test_a_body_cut_short_ends_a_waiting_read_short() -> None:
    reader = StreamReader(_body(DATA[:1000]), len(DATA), "f")
    later = asyncio.create_task(reader.read_into(HALF, memoryview(bytearray(HALF))))
    with pytest.raises(IntegrityError):
        await read_full(reader, 0, memoryview(bytearray(HALF)), where="f")
    assert await later == 0


async def test_bytes_read_already_are_not_read_again() -> None:
    reader = StreamReader(_body(DATA), len(DATA), "f")
    await read_full(reader, 0, memoryview(bytearray(HALF)), where="f")
    with pytest.raises(IntegrityError, match="read once, in order"):
        await reader.read_into(0, memoryview(bytearray(10)))


def test_receiving_takes_its_buffers_from_a_budget_of_its_own(tmp_path: Path) -> None:
    """Not the process-wide default (64 MiB), which came on top of the daemon's own budget."""
    tier = PeerTier(name="peers", kind="peer", path=tmp_path / "peer")
    store = PeerStore(tier)
    assert store.backend.budget is not default_budget()
    assert store.backend.budget.limit == RECEIVE_BUDGET == 16 * 1024 * 1024
    mine = ByteBudget(1 << 20)
    assert PeerStore(tier, budget=mine).backend.budget is mine

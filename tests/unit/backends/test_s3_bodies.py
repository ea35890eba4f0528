"""Upload bodies: re-iterable for botocore retries, budgeted, hashed on the way."""

from __future__ import annotations

import os

from tests.conformance.harness import crc
from tierd.daemon.backends import ByteBudget, BytesReader
from tierd.daemon.backends.s3multipart import BufferBody, StreamBody, TransferSettings

MIB = 1024 * 1024


def settings(budget: ByteBudget) -> TransferSettings:
    return TransferSettings(
        part_size=5 * MIB,
        concurrency=1,
        budget=budget,
        buffered_part_limit=0,
        chunk_size=2 * MIB,
        copy_part_size=5 * MIB,
    )


async def collect(body: BufferBody) -> bytes:
    return b"".join([bytes(piece) async for piece in body])


async def test_buffer_body_replays_the_same_bytes() -> None:
    data = os.urandom(3 * MIB + 5)
    body = BufferBody(memoryview(data))
    assert len(body) == len(data)
    assert await collect(body) == data
    body.seek(0)
    assert await collect(body) == data


async def test_stream_body_hashes_what_it_sends_and_frees_its_budget() -> None:
    budget = ByteBudget(4 * MIB)
    data = os.urandom(7 * MIB + 3)
    body = StreamBody(BytesReader(data), MIB, 5 * MIB, settings(budget), "t")
    assert len(body) == 5 * MIB
    assert await collect(body) == data[MIB : 6 * MIB]
    assert body.checksum() == crc(data[MIB : 6 * MIB])
    assert budget.used == 0


async def test_an_abandoned_pass_gives_its_chunk_back_at_once() -> None:
    budget = ByteBudget(2 * MIB)  # room for exactly one chunk
    data = os.urandom(5 * MIB)
    body = StreamBody(BytesReader(data), 0, len(data), settings(budget), "t")
    first = body.__aiter__()
    await anext(first)  # a retry interrupts this pass mid-chunk
    assert budget.used == 2 * MIB
    body.seek(0)
    assert await collect(body) == data  # would wait forever if the old chunk were still held
    assert body.checksum() == crc(data)
    assert budget.used == 0
    await first.aclose()
    assert budget.used == 0

"""Upload bodies: sent whole on every attempt, hashed on the way, and never outside the budget."""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from collections.abc import Iterator

import pytest
from aiohttp.payload import PAYLOAD_REGISTRY, Payload

from tests.conformance.harness import crc
from tierd.daemon.backends import ByteBudget, BytesReader
from tierd.daemon.backends.posix.directread import takes_direct
from tierd.daemon.backends.s3.bodies import SEND_SLICE, BufferBody, StreamBody, TransferSettings
from tierd.daemon.checksum import Crc64

MIB = 1024 * 1024
CHUNK = 2 * MIB


def settings(budget: ByteBudget) -> TransferSettings:
    return TransferSettings(
        part_size=5 * MIB,
        concurrency=1,
        budget=budget,
        buffered_part_limit=0,
        chunk_size=CHUNK,
        copy_part_size=5 * MIB,
    )


class Writer:
    """An aiohttp stream writer that yields to the loop on every write.

    ``keep_last`` makes it hold on to what it was last given, as a transport that queues
    views instead of copies does with the tail it could not send yet.
    """

    def __init__(self, *, keep_last: bool = False) -> None:
        self.received = Crc64()
        self.keep_last = keep_last
        self.queued: object = None

    async def write(self, chunk: bytes | memoryview) -> None:
        self.received.update(chunk)
        if self.keep_last:
            self.queued = chunk
        await asyncio.sleep(0)


async def send(body: BufferBody | StreamBody, writer: Writer) -> str:
    """What aiohttp does with a request body: find its payload, write it with its length.

    Returns the CRC64NVME of what the writer received.
    """
    payload: Payload = PAYLOAD_REGISTRY.get(body, disposition=None)
    await payload.write_with_length(writer, len(body))  # type: ignore[arg-type]
    assert writer.received.length == len(body)
    return writer.received.hexdigest()


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def test_buffer_body_sends_the_same_bytes_on_every_attempt() -> None:
    data = os.urandom(3 * MIB + 5)
    body = BufferBody(memoryview(data))
    assert len(body) == len(data)
    assert await send(body, Writer()) == crc(data)
    body.seek(0)
    assert await send(body, Writer()) == crc(data)


async def test_stream_body_hashes_what_it_sends_and_frees_its_budget() -> None:
    budget = ByteBudget(4 * MIB)
    data = os.urandom(7 * MIB + 3)
    body = StreamBody(BytesReader(data), MIB, 5 * MIB, settings(budget), "t")
    assert len(body) == 5 * MIB
    assert await send(body, Writer()) == crc(data[MIB : 6 * MIB])
    assert body.checksum() == crc(data[MIB : 6 * MIB])
    assert budget.used == 0


async def test_a_streamed_part_is_read_into_aligned_buffers() -> None:
    """Every chunk lands in a page-aligned buffer, which a POSIX reader fills by ``O_DIRECT``."""
    data = os.urandom(5 * MIB + 4096)
    direct: list[bool] = []

    class Recording(BytesReader):
        async def read_into(self, offset: int, buf: memoryview) -> int:
            direct.append(takes_direct(buf, offset))
            return await super().read_into(offset, buf)

    body = StreamBody(Recording(data), 0, len(data), settings(ByteBudget(8 * MIB)), "s3://b/k part 1")
    assert await send(body, Writer()) == crc(data)
    assert direct == [True, True, True]


async def test_a_retry_supersedes_the_pass_it_interrupted() -> None:
    budget = ByteBudget(CHUNK)  # room for exactly one chunk
    data = os.urandom(5 * MIB)
    body = StreamBody(BytesReader(data), 0, len(data), settings(budget), "t")
    first = asyncio.create_task(send(body, Writer()))
    while budget.used == 0:  # the first attempt is sending its first chunk
        await asyncio.sleep(0)
    body.seek(0)
    assert await send(body, Writer()) == crc(data)
    with pytest.raises(ConnectionAbortedError):
        await first
    assert body.checksum() == crc(data)
    assert budget.used == 0


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize("transport", ["copying", "zero-copy"])
async def test_parts_waiting_for_the_budget_hold_no_chunk(transport: str) -> None:
    budget = ByteBudget(2 * CHUNK)
    data = os.urandom(4 * CHUNK)
    bodies = [StreamBody(BytesReader(data), 0, len(data), settings(budget), f"part {n}") for n in range(6)]
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    sent = await asyncio.gather(*(send(b, Writer(keep_last=transport == "zero-copy")) for b in bodies))
    peak = tracemalloc.get_traced_memory()[1] - before
    assert sent == [crc(data)] * len(bodies)
    # The budget, plus the copy of one slice per chunk in the budget, plus what each
    # writer last kept (a copy of at most one slice).
    assert peak < budget.limit + (2 + len(bodies)) * SEND_SLICE + MIB, f"{peak / MIB:.1f} MiB"

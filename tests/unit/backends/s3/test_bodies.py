"""Upload bodies: sent whole on every attempt, hashed on the way, and never outside the budget."""

from __future__ import annotations

import asyncio
import os
import socket
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


class _Sink(asyncio.Protocol):
    """The store's end of a connection: counts what arrives."""

    def __init__(self, done: asyncio.Future[int], expected: int) -> None:
        self.done, self.expected, self.received = done, expected, 0

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received >= self.expected and not self.done.done():
            self.done.set_result(self.received)


#: What asyncio's transport of one part's connection may hold: what the socket did not take of
#: one slice (copied into its own buffer on Python 3.11), on top of its high-water mark (64
#: KiB). With 1 MiB slices it held up to 1 MiB, and sixteen parts' connections as much each.
TRANSPORT_HOLDS_AT_MOST = 256 * 1024 + 64 * 1024


async def test_a_transport_holds_at_most_one_slice_of_a_part() -> None:
    """Through aiohttp's writer and asyncio's transport, over a socket that takes 128 KiB at a time."""
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.http_writer import StreamWriter

    loop = asyncio.get_running_loop()
    data = os.urandom(CHUNK + 5)
    done: asyncio.Future[int] = loop.create_future()
    server = await loop.create_server(lambda: _Sink(done, len(data)), "127.0.0.1", 0)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # the kernel doubles it
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, server.sockets[0].getsockname())
        transport, protocol = await loop.create_connection(lambda: BaseProtocol(loop), sock=sock)
        held: list[int] = []
        write = transport.write

        def recording(chunk: bytes | memoryview) -> None:
            write(chunk)
            held.append(transport.get_write_buffer_size())

        transport.write = recording  # type: ignore[method-assign,assignment]
        body = StreamBody(BytesReader(data), 0, len(data), settings(ByteBudget(2 * CHUNK)), "part 1")
        await body.write_with_length(StreamWriter(protocol, loop), len(data))
        assert await done == len(data)
        transport.close()
    finally:
        server.close()
        sock.close()
    assert body.checksum() == crc(data)
    assert 0 < max(held) <= TRANSPORT_HOLDS_AT_MOST, held

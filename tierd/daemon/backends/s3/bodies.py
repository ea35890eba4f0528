"""Request bodies for S3 uploads: aiohttp payloads whose buffers live only inside the budget.

botocore accepts a body for its ``read`` attribute (never called here) and rewinds it with
``seek`` before a retry; aiohttp, which aiobotocore sends requests through, takes a
``Payload`` as it is and calls its ``write_with_length`` once per attempt. Both bodies are
payloads rather than async iterables on purpose: aiohttp's ``AsyncIterablePayload`` keeps
the last item it got from an iterator until the next one arrives, so a streamed part held
its previous chunk (through a slice) while waiting for the budget to grant the next one:
with 16 parts in flight, 80 MiB of chunks were alive under a 32 MiB budget. Here each
chunk lives in one coroutine frame, which ends before the next chunk is asked for.

A body goes to the HTTP writer ``SEND_SLICE`` bytes at a time. Before Python 3.12, asyncio's
selector transport copies what the socket did not take of each write into a buffer of its
own, until it is sent: with 1 MiB slices, each part's connection held up to 1 MiB of such
copies, from the C heap, which kept the high-water mark of all of them; a 4 GiB upload to
``rclone serve s3`` grew the daemon's heap by 6.8 MB during the hop, and by 1.3 MB with 256
KiB slices (its peak 168.2 MB, then 162.7, one run each; with ``s3.leanjson`` too,
``python -m bench --against 8210385 --rounds 2 s3``, load 1.4-5.6: 162.4 MB against 169.1
MB, the daemon's CPU 4.9 and 5.3 s against 5.8 and 5.8 s).
Since 3.12 a transport may instead queue views of what it is given (GH-91166). So the last
slice of each streamed chunk goes out as a copy: flow control leaves at most the high-water
mark (64 KiB) queued after a write, all of it from that copy, and no transport is left
holding a chunk whose budget was given back. A buffered part's buffer is released only
after the store answered, when everything was sent. That is what lets both take the
budget's reused, page-aligned buffers (``ByteBudget.aligned``): a POSIX source fills them
by ``O_DIRECT`` (``posix.directread``), and no chunk costs a fresh mapping's page faults (a
1 GiB upload to ``rclone serve s3``: 1.6-1.9 CPU-s instead of 2.9-3.2 with the direct
read-back of ``s3.reads``, load 18-26).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from tierd.daemon import checksum
from tierd.daemon.backends.base import RangeReader, read_full
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.hashing import crc64
from tierd.errors import PermanentBackendError

__all__ = ["SEND_SLICE", "BufferBody", "StreamBody", "TransferSettings"]

SEND_SLICE = MIB // 4  # what the HTTP writer gets at a time (it drains between slices)


@dataclass(frozen=True)
class TransferSettings:
    """How an S3 backend moves bytes."""

    part_size: int
    concurrency: int  # requests of one object in flight (parts, read-back ranges)
    budget: ByteBudget
    buffered_part_limit: int
    chunk_size: int
    copy_part_size: int


class _Body(Payload):
    """What botocore needs of a body; every ``write_with_length`` call sends it whole again."""

    _autoclose = True  # holds no file or connection: nothing for aiohttp to close

    def __init__(self, length: int) -> None:
        super().__init__(None, content_type="application/octet-stream")
        self._size = length

    def __len__(self) -> int:
        return self._length

    @property
    def _length(self) -> int:
        assert self._size is not None
        return self._size

    def read(self, *_: object) -> bytes:
        """Never called: botocore only checks that a body has ``read``; aiohttp writes it."""
        raise TypeError("async-only body")

    def seek(self, *_: object) -> None:
        """Called by botocore before a retry; each write starts at byte 0 anyway."""

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """Not text: refused."""
        raise TypeError("binary upload body")

    async def write(self, writer: AbstractStreamWriter) -> None:
        """Send every byte (aiohttp before 3.12 calls this)."""
        await self.write_with_length(writer, None)

    def _end(self, content_length: int | None) -> int:
        return self._length if content_length is None else min(self._length, content_length)


class BufferBody(_Body):
    """A body over a filled buffer that stays charged to the budget until the store answers."""

    def __init__(self, view: memoryview) -> None:
        super().__init__(len(view))
        self._view = view

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        """Send the buffer in slices, up to ``content_length`` bytes."""
        end = self._end(content_length)
        for start in range(0, end, SEND_SLICE):
            await writer.write(self._view[start : min(start + SEND_SLICE, end)])


class StreamBody(_Body):
    """A body read from the source one budgeted chunk at a time, hashed on the way.

    Each write is a pass over the part; a retry starts a new pass, which makes an older
    one still running (its request abandoned) fail at its next chunk.
    """

    def __init__(
        self, reader: RangeReader, offset: int, length: int, settings: TransferSettings, where: str
    ) -> None:
        super().__init__(length)
        self._reader, self._offset = reader, offset
        self._settings, self._where = settings, where
        self._crc: int | None = None
        self._pass = 0

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        """Read, hash and send the part chunk by chunk, up to ``content_length`` bytes."""
        self._pass += 1
        this_pass, self._crc = self._pass, None
        end = self._end(content_length)
        crc = pos = 0
        while pos < end:
            if this_pass != self._pass:
                raise ConnectionAbortedError(f"{self._where}: a retry superseded this attempt")
            length = min(self._settings.chunk_size, end - pos)
            crc = await self._send_chunk(writer, pos, length, crc)
            pos += length
        if this_pass == self._pass and end == self._length:
            self._crc = crc

    async def _send_chunk(self, writer: AbstractStreamWriter, pos: int, length: int, crc: int) -> int:
        """One chunk; its buffer is referenced from this frame only, so it dies on return."""
        async with self._settings.budget.aligned(length) as view:
            await read_full(self._reader, self._offset + pos, view, where=self._where)
            crc = await crc64(view, crc)
            last = max(0, length - SEND_SLICE)  # the last slice goes out as a copy
            for start in range(0, last, SEND_SLICE):
                await writer.write(view[start : min(start + SEND_SLICE, last)])
            await writer.write(bytes(view[last:]))
        return crc

    def checksum(self) -> str:
        """The CRC64NVME of the bytes sent by the last complete pass."""
        if self._crc is None:
            raise PermanentBackendError(f"{self._where}: the store answered before the part was sent")
        return checksum.encode(self._crc)

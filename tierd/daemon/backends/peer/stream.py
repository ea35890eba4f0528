"""An HTTP request body as a RangeReader: read once, front to back, never more than declared.

``StreamReader`` takes the body as the ASGI server hands it over (pieces of bytes, each
copied on its way through the server: four copies of every byte before this one).
``SocketReader`` reads it off the connection's socket with ``recv_into``, straight into the
write path's buffers: the kernel's copy is the only one.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

from tierd.errors import IntegrityError

__all__ = ["RECV_TIMEOUT", "SocketReader", "StreamReader"]

#: Seconds a sender may leave its body without a byte before the file is refused.
RECV_TIMEOUT = 60.0


class StreamReader:
    """The RangeReader a POSIX write reads a streamed body from, in order.

    ``size`` is what the sender declared; the stream may end early (the write then fails with
    IntegrityError: ``read_full`` sees a short read) and is never read past ``size``. Reads
    of later chunks may be asked for at once: each waits for its turn (the bytes before it
    taken), so one chunk is hashed and written while the next arrives.
    """

    def __init__(self, chunks: AsyncIterator[bytes], size: int, where: str) -> None:
        self.size = size
        self._chunks = chunks
        self._where = where
        self._position = 0
        self._pending = memoryview(b"")
        self._ended = False
        self._turn = asyncio.Condition()

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` with the bytes at ``offset``, once every byte before it was read.

        Returns 0 when the stream ended before ``offset`` (or at ``size``). Raises
        IntegrityError for an offset already read past (a write path reading twice).
        """
        async with self._turn:
            if offset < self._position:
                raise IntegrityError(
                    f"{self._where}: a streamed body is read once, in order "
                    f"(byte {offset} asked at {self._position})"
                )
            await self._turn.wait_for(lambda: self._position == offset or self._ended)
            if self._position != offset:
                return 0
            n = await self._take(buf, min(len(buf), self.size - offset))
            self._turn.notify_all()
            return n

    async def _take(self, buf: memoryview, wanted: int) -> int:
        while not self._pending and wanted > 0:
            chunk = await anext(self._chunks, None)
            if chunk is None:
                self._ended = True
                return 0
            self._pending = memoryview(chunk)
        n = min(wanted, len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self._position += n
        return n

    async def close(self) -> None:
        """Nothing to release: the request owns its stream."""


class SocketReader(StreamReader):
    """A body read off a non-blocking socket (the sender's connection) in order, no more than ``size``.

    A sender that closes early, or sends nothing for ``RECV_TIMEOUT`` seconds, ends the body
    short (the write refuses it: nothing is kept). The caller owns the socket.
    """

    def __init__(self, sock: socket.socket, size: int, where: str, timeout: float = RECV_TIMEOUT) -> None:
        super().__init__(_nothing(), size, where)
        self._sock = sock
        self._timeout = timeout

    async def _take(self, buf: memoryview, wanted: int) -> int:
        loop = asyncio.get_running_loop()
        got = 0
        while got < wanted:
            try:
                async with asyncio.timeout(self._timeout):
                    n = await loop.sock_recv_into(self._sock, buf[got:wanted])
            except (OSError, TimeoutError):
                n = 0
            if n == 0:
                self._ended = True
                break
            got += n
        self._position += got
        return got


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing

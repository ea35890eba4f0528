"""An HTTP request body as a RangeReader: read once, front to back, never more than declared."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tierd.errors import IntegrityError

__all__ = ["StreamReader"]


class StreamReader:
    """The RangeReader a POSIX write reads a streamed body from, in order (one chunk at a time).

    ``size`` is what the sender declared; the stream may end early (the write then fails with
    IntegrityError: ``read_full`` sees a short read) and is never read past ``size``.
    """

    def __init__(self, chunks: AsyncIterator[bytes], size: int, where: str) -> None:
        self.size = size
        self._chunks = chunks
        self._where = where
        self._position = 0
        self._pending = memoryview(b"")

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` with the next bytes; ``offset`` must be where the last read ended.

        Raises IntegrityError for any other offset (a write path reading out of order) or
        when the stream holds more than ``size`` bytes.
        """
        if offset != self._position:
            raise IntegrityError(
                f"{self._where}: a streamed body is read in order (byte {offset} asked at {self._position})"
            )
        wanted = min(len(buf), self.size - offset)
        while not self._pending and wanted > 0:
            chunk = await anext(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(wanted, len(self._pending))
        buf[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self._position += n
        return n

    async def close(self) -> None:
        """Nothing to release: the request owns its stream."""

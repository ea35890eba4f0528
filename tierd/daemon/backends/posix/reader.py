"""Reading a file of a POSIX tier: ``PosixReader``, a RangeReader over an open file."""

from __future__ import annotations

import os

from tierd.daemon.backends.concurrency import blocking_on, uninterrupted
from tierd.daemon.backends.posix import directread
from tierd.daemon.backends.posix.errors import os_errors

__all__ = ["PosixReader"]


class PosixReader:
    """A RangeReader over a file (``os.preadv`` on the I/O pool).

    A file of up to ``WHOLE_READ_LIMIT`` bytes is read whole, and closed, in the trip to the
    I/O pool that opened it (``contents``): reads of it need no further trip, and nothing
    is left to close. A bigger one may come with ``direct_fd``, an ``O_DIRECT`` descriptor on
    the same file: its big aligned reads go around the page cache (``posix.directread``).
    """

    def __init__(
        self,
        fd: int,
        size: int,
        location: str,
        device: int = -1,
        contents: bytes | None = None,
        direct_fd: int = -1,
    ) -> None:
        self._fd = fd
        self.size = size
        self._location = location
        self.device = device  # st_dev of the file system it is on
        self._contents = contents
        self._direct_fd = direct_fd
        self._direct = direct_fd >= 0  # until the file system refuses an O_DIRECT read

    def fileno(self) -> int:
        """The open file, for a kernel-side copy (-1 once closed, or read whole at open)."""
        return self._fd

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Fill ``buf`` from ``offset``. Raises Transient/PermanentBackendError."""
        if self._contents is not None:
            piece = self._contents[offset : offset + len(buf)]
            buf[: len(piece)] = piece
            return len(piece)
        with os_errors("read", self._location):
            if self._direct:
                try:
                    return await uninterrupted(
                        blocking_on(buf, directread.read, self._fd, self._direct_fd, offset)
                    )
                except directread.DirectRefused:
                    self._direct = False  # its descriptor stays open until close: reads may be using it
            return await uninterrupted(blocking_on(buf, _pread, self._fd, offset))

    async def close(self) -> None:
        """Close the file (idempotent); a read-only descriptor closes without blocking."""
        fds = (self._fd, self._direct_fd)
        self._fd, self._direct_fd, self._direct, self._contents = -1, -1, False, None
        for fd in fds:
            if fd >= 0:
                os.close(fd)


def _pread(buf: memoryview, fd: int, offset: int) -> int:
    return os.preadv(fd, [buf], offset)

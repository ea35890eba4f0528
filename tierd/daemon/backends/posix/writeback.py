"""Start writing dirty pages to disk early, so a file's fsync has little left to do.

``cp`` followed by ``sync`` overlaps reading and writing because the kernel flushes dirty
pages in the background while ``cp`` reads. A writer that hashes each chunk and then
fsyncs each file would otherwise read everything, then wait for every byte to reach the
disk. ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` queues a written range for writeback
without waiting for it (it gives no durability: the fsync that follows does). Linux
only; elsewhere, or when the call fails, it is a no-op. ``sync_filesystem`` is the other
end: one ``syncfs`` for a whole batch of small files, as ``sync`` after ``cp`` does.
"""

from __future__ import annotations

import ctypes
import os

from tierd.daemon import libc

__all__ = ["start_writeback", "sync_filesystem"]

_SYNC_FILE_RANGE_WRITE = 2

_sync_file_range = libc.function(
    "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
)
_syncfs = libc.function("syncfs", [ctypes.c_int])


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Queue ``length`` bytes from ``offset`` of ``fd`` for writeback; never raises, never waits."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def sync_filesystem(fd: int, where: str) -> bool:
    """``syncfs``: make everything written to the file system holding the open file ``fd`` durable.

    Returns False where there is no ``syncfs`` (the caller fsyncs file by file); raises
    OSError (naming ``where``) when the file system reports a write error.
    """
    if _syncfs is None:
        return False
    if _syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), where)
    return True

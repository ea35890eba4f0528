"""Start writing dirty pages to disk early, so a file's fsync has little left to do.

``cp`` followed by ``sync`` overlaps reading and writing because the kernel flushes dirty
pages in the background while ``cp`` reads. A writer that hashes each chunk and then
fsyncs each file would otherwise read everything, then wait for every byte to reach the
disk. ``sync_file_range(SYNC_FILE_RANGE_WRITE)`` queues a written range for writeback
without waiting for it (it gives no durability: the fsync that follows does). Linux
only; elsewhere, or when the call fails, it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

__all__ = ["start_writeback"]

_SYNC_FILE_RANGE_WRITE = 2


def _load() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Queue ``length`` bytes from ``offset`` of ``fd`` for writeback; never raises, never waits."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)

"""Give freed transfer buffers back to the operating system.

Transfer buffers are large, short-lived and allocated from several threads; glibc keeps
much of what is freed in its arenas, so the resident size creeps well above what is in
use. ``malloc_trim(0)`` returns that free memory, keeping the daemon's peak RSS close to
its baseline plus the transfer budget. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["bound_heap_growth", "trim_freed_memory"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return None
    return trim


def trim_freed_memory() -> bool:
    """Return free heap memory to the OS; False where that is not possible. Blocking (cheap)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def bound_heap_growth(mmap_threshold: int = 1 << 20, arenas: int = 2) -> bool:
    """Serve every allocation of ``mmap_threshold`` bytes or more from its own mapping.

    glibc raises its mmap threshold as big blocks are freed, after which 8 MiB transfer
    buffers come from the heap and their pages stay resident when freed; pinning the
    threshold returns them at once, and few arenas keep the worker threads from each
    holding a heap of their own. Call once at start-up; False where not glibc.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_ARENA_MAX, arenas))

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

__all__ = ["trim_freed_memory"]


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

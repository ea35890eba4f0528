"""The C library, loaded once through ctypes, for the few calls Python's ``os`` lacks.

``function(name, argtypes)`` is how every module reaches libc (``posix.writeback``'s
``sync_file_range`` and ``syncfs``, and ``trim_freed_memory`` and ``limit_malloc_arenas`` here);
it answers None where
the C library or the call does not exist (musl lacks ``malloc_trim``, macOS ``syncfs``),
and the caller falls back.

``trim_freed_memory``: transfer buffers are large, short-lived and allocated from several
threads; glibc keeps much of what is freed in its arenas, so the resident size creeps well
above what is in use. ``malloc_trim(0)`` returns that free memory, keeping the daemon's
peak RSS close to its baseline plus the transfer budget.

``limit_malloc_arenas``: glibc gives threads up to 8 malloc arenas per core, and memory freed
in one arena cannot serve another thread's allocation; the daemon's I/O threads each grew
their own. The daemon caps them at two when it starts (``mallopt(M_ARENA_MAX)``), as
``MALLOC_ARENA_MAX=2`` in its environment would, unless that variable is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from typing import Any

__all__ = ["MALLOC_ARENAS", "function", "limit_malloc_arenas", "trim_freed_memory"]

#: The daemon's malloc arenas (``limit_malloc_arenas``); glibc's own default is 8 per core.
MALLOC_ARENAS = 2
#: glibc's ``mallopt`` parameter number for the most arenas (malloc.h).
_M_ARENA_MAX = -8


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The C library (errno kept for ``ctypes.get_errno``); None where it cannot be found."""
    name = ctypes.util.find_library("c") or ("libc.so.6" if sys.platform.startswith("linux") else None)
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


def function(name: str, argtypes: list[Any], restype: Any = ctypes.c_int) -> Any | None:
    """Libc's ``name`` with those argument and result types; None where there is none."""
    library = _library()
    try:
        fn = getattr(library, name) if library is not None else None
    except AttributeError:
        return None
    if fn is not None:
        fn.argtypes, fn.restype = argtypes, restype
    return fn


@functools.cache
def _malloc_trim() -> Any | None:
    return function("malloc_trim", [ctypes.c_size_t])


def trim_freed_memory() -> bool:
    """Return free heap memory to the OS; False where that is not possible. Blocking (cheap)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas``, before threads start; False where not done.

    Not done when ``MALLOC_ARENA_MAX`` is set (the operator's choice stands) or where the C
    library has no ``mallopt`` (musl, macOS).
    """
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    mallopt = function("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, arenas))

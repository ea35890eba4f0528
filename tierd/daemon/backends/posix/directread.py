"""Reading a big file's chunks around the page cache (``O_DIRECT``), unless the cache holds them.

A chunk read through the page cache costs the kernel a page-cache fill and a copy into the
buffer, and leaves the pages to compete with the destination's writeback and the training
job. Read by ``O_DIRECT`` into the budget's page-aligned huge-page buffers the device
writes the bytes straight into the buffer: copying 4 x 1 GiB between two directories of
this project's virtio disk took 0.2 s of system time instead of 3.3 s, and 13 s instead of
24 s (the write side ``O_DIRECT`` in both; load 18, docs/data-path.md).

So a ``PosixReader`` of a file bigger than a chunk also holds a second descriptor on the
same open file, opened ``O_DIRECT`` (``open_direct_reader``: reopened through
``/proc/self/fd``, which names the open file itself, never a path, and checked to be the
same inode), and ``read`` sends through it every read of ``DIRECT_READ_FROM`` bytes or more
into a page-aligned buffer at a page-aligned offset, the unaligned tail of the file through
the ordinary descriptor. Where the range is mostly in the page cache already (a checkpoint
the job just wrote: ``cachestat``, Linux 6.5 and later) it is read from there instead: a
copy from memory beats reading the disk again. A file system that refuses ``O_DIRECT``
(at the open or at the first read) is read through the page cache, as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from tierd.daemon import libc
from tierd.daemon.backends.budget import MIB

__all__ = ["ALIGN", "DIRECT_READ_FROM", "DirectRefused", "cached_bytes", "open_direct_reader", "read"]

#: Reads of at least this many bytes go by ``O_DIRECT`` (a big file's chunks, not small reads).
DIRECT_READ_FROM = MIB
#: What ``O_DIRECT`` needs aligned (buffer address, file offset): a page covers 512 B and 4 KiB blocks.
ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)
#: errno values saying a file system takes no ``O_DIRECT`` read.
_NO_DIRECT = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP})
#: ``cachestat(2)``'s number in the generic and x86-64 system call tables (Linux 6.5).
_CACHESTAT = 451
_PAGE = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096


class DirectRefused(Exception):
    """The file system refused an ``O_DIRECT`` read: read through the page cache instead."""


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recent")]


_syscall = (
    libc.function("syscall", [ctypes.c_long, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint])
    if sys.platform.startswith("linux")
    else None
)
_has_cachestat = _syscall is not None


def open_direct_reader(fd: int) -> int:
    """A read-only ``O_DIRECT`` descriptor on the file open as ``fd``; -1 where there is none.

    Never raises: no ``O_DIRECT``, no ``/proc``, a file system that refuses it, or anything
    but the same inode answers -1 (the reader then reads through ``fd`` only).
    """
    if not _O_DIRECT:
        return -1
    try:
        direct = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | _O_DIRECT)
    except OSError:
        return -1
    try:
        first, second = os.fstat(fd), os.fstat(direct)
    except OSError:
        os.close(direct)
        return -1
    if (first.st_dev, first.st_ino) != (second.st_dev, second.st_ino):
        os.close(direct)
        return -1
    return direct


def cached_bytes(fd: int, offset: int, length: int) -> int | None:
    """How many of those bytes of ``fd`` the page cache holds (``cachestat``); None where unknown."""
    global _has_cachestat
    if not _has_cachestat or _syscall is None:
        return None
    span, stat = _Range(offset, length), _Stat()
    if _syscall(_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat), 0) != 0:
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):  # an older kernel, or a seccomp filter
            _has_cachestat = False
        return None
    return int(stat.cache) * _PAGE


def _aligned(buf: memoryview) -> bool:
    """Whether ``buf`` starts on an ``ALIGN`` boundary (it must be writable, as a read's target is)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(buf)) % ALIGN == 0


def takes_direct(buf: memoryview, offset: int) -> bool:
    """Whether a read of ``buf`` at ``offset`` is one ``O_DIRECT`` can do: big, aligned, writable."""
    return len(buf) >= DIRECT_READ_FROM and offset % ALIGN == 0 and not buf.readonly and _aligned(buf)


def read(buf: memoryview, fd: int, direct_fd: int, offset: int) -> int:
    """Fill ``buf`` from ``offset`` (``os.preadv``'s answer: how many bytes, short at the file's end).

    By ``direct_fd`` (``O_DIRECT``) where ``takes_direct`` and the page cache holds less than
    half the range, its unaligned tail by ``fd``; else by ``fd``. Raises DirectRefused when the
    file system refuses the ``O_DIRECT`` read (nothing was read), OSError otherwise.
    """
    if direct_fd < 0 or not takes_direct(buf, offset):
        return os.preadv(fd, [buf], offset)
    cached = cached_bytes(fd, offset, len(buf))
    if cached is not None and 2 * cached >= len(buf):
        return os.preadv(fd, [buf], offset)
    head = len(buf) - len(buf) % ALIGN
    try:
        got = os.preadv(direct_fd, [buf[:head]], offset)
    except OSError as exc:
        if exc.errno in _NO_DIRECT:
            raise DirectRefused from exc
        raise
    if got < head or head == len(buf):
        return got
    return got + os.preadv(fd, [buf[head:]], offset + head)

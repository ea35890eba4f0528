"""Resuming a killed write of a big file from the verified prefix of its temporary file.

A killed write leaves its temporary file with some chunks written and some not; chunks go
4 at a time, so a later one may be there while an earlier one is not. What may be kept is
the data before the file's first hole (``SEEK_HOLE``), rounded down to a whole chunk. The
write re-reads and hashes it (``hash_span``, chunk by chunk, alongside copying the rest and
hashing that as it goes), and keeps the file only when the CRCs of all the chunks combine
to the first-sight checksum (else it starts over). Nothing is resumed where the file
system does not report holes, or where anything is in doubt: the file is then discarded
and the write starts from byte 0.

Every function here blocks: call them through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os

from awscrt import checksums

from tierd.daemon.backends.posix.temp import TempFile
from tierd.daemon.beneath import Dir

__all__ = ["hash_span", "kept_prefix", "open_resumable"]

_BLOCK = 512  # the unit of st_blocks


def kept_prefix(fd: int, size: int, chunk: int) -> int:
    """How many leading bytes of a killed write's file to keep: whole chunks before its first hole.

    0 when the file is longer than ``size`` (another version of the file), starts with a
    hole, or the file system does not report holes (``SEEK_HOLE`` refused, or more data
    claimed than blocks allocated). Raises OSError when the file cannot be stat-ed.
    """
    st = os.fstat(fd)
    if st.st_size > size or not hasattr(os, "SEEK_HOLE"):
        return 0
    try:
        if os.lseek(fd, 0, os.SEEK_DATA) != 0:
            return 0
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError:  # ENXIO: no data at all; EINVAL: no hole reporting
        return 0
    if st.st_blocks * _BLOCK < hole:  # holes are not reported: all of the file claims to be data
        return 0
    return min(hole, size) // chunk * chunk


def hash_span(view: memoryview, fd: int, offset: int) -> int | None:
    """CRC64NVME of ``len(view)`` bytes of ``fd`` from ``offset``; None if the file ends first.

    Raises OSError when the file cannot be read.
    """
    pos = 0
    while pos < len(view):
        n = os.preadv(fd, [view[pos:]], offset + pos)
        if n == 0:
            return None
        pos += n
    return int(checksums.crc64nvme(view, 0))


def open_resumable(directory: Dir, name: str, size: int, chunk: int) -> tuple[TempFile, int] | None:
    """Adopt a killed write's temporary file; ``(temp, bytes to keep)``, or None.

    The kept bytes are still to be re-hashed (``hash_span``). None when the file cannot be
    adopted (gone, or live), or keeps less than one chunk: then it is removed (if adopted)
    and the write starts over. Never raises: any failure means None.
    """
    try:
        temp = TempFile.adopt(directory, name)
    except OSError:
        return None
    if temp is None:
        return None
    try:
        kept = kept_prefix(temp.fd, size, chunk)
    except OSError:
        kept = 0
    if not kept:
        temp.discard()
        return None
    return temp, kept

"""File checksums: CRC64-NVME, taken once at first sight and carried through every hop.

CRC64-NVME runs near 10 GB/s on one core here (awscrt, GIL released), is an S3-native
full-object checksum, and CRCs combine, so parts hashed in parallel still yield the
whole file's value. Values are stored the way S3 spells them: base64 of 8 big-endian bytes.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from awscrt import checksums

from tierd.daemon.nofollow import open_regular

__all__ = ["ALGORITHM", "BLOCK_SIZE", "Crc64", "combine", "decode", "encode", "hash_fd", "hash_file"]

ALGORITHM = "crc64nvme"
BLOCK_SIZE = 8 * 1024 * 1024


class Crc64:
    """A running CRC64-NVME over bytes fed in order."""

    __slots__ = ("length", "value")

    def __init__(self) -> None:
        self.value = 0
        self.length = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Feed the next bytes."""
        self.value = int(checksums.crc64nvme(data, self.value))
        self.length += len(data)

    def hexdigest(self) -> str:
        """The value in the catalog's text form (base64, as S3 spells it)."""
        return encode(self.value)


def encode(value: int) -> str:
    """A CRC64 integer as S3's base64 text."""
    return base64.b64encode(value.to_bytes(8, "big")).decode("ascii")


def decode(text: str) -> int:
    """S3's base64 text as a CRC64 integer."""
    return int.from_bytes(base64.b64decode(text), "big")


def combine(first: int, second: int, second_length: int) -> int:
    """The CRC of A+B from the CRCs of A and B and the length of B."""
    return int(checksums.combine_crc64nvme(first, second, second_length))


def hash_file(
    path: Path, *, block_size: int = BLOCK_SIZE, root: Path | None = None, single_link: bool = False
) -> tuple[int, str]:
    """Stream ``path`` through CRC64-NVME with bounded memory; returns (size, checksum).

    The file is opened by ``nofollow.open_regular`` from ``root``: no symlink below it is
    followed, no FIFO waited on. Blocking: call it off the event loop. Raises OSError when
    the file cannot be read (ELOOP: a symlink; ENOENT: missing or not a regular file;
    EMLINK: hard-linked, with ``single_link``).
    """
    fd = open_regular(path, root, single_link=single_link)
    try:
        return hash_fd(fd, block_size=block_size)
    finally:
        os.close(fd)


def hash_fd(fd: int, *, block_size: int = BLOCK_SIZE, buffer: memoryview | None = None) -> tuple[int, str]:
    """``hash_file`` of an open file, read from its current offset to its end (blocking).

    Read through ``buffer`` when given (``block_size`` is then its length), else a fresh one.
    """
    crc = Crc64()
    view = memoryview(bytearray(block_size)) if buffer is None else buffer
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    while n := os.readv(fd, [view]):
        crc.update(view[:n])
    return crc.length, crc.hexdigest()

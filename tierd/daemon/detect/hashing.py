"""First sight of a step's files: each hashed through one descriptor, refused if it moves meanwhile."""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tierd.daemon import checksum
from tierd.daemon.aio import blocking
from tierd.daemon.detect.detector import FileStat
from tierd.daemon.detect.hostile import printable
from tierd.daemon.nofollow import open_regular
from tierd.errors import Refused, Unstable

__all__ = ["HashedFile", "hash_stable"]


@dataclass(frozen=True)
class HashedFile:
    """A file's catalog fields: path relative to the tier-0 root, size, mtime, checksum, owner, mode."""

    relpath: str
    size: int
    mtime_ns: int
    checksum: str
    uid: int | None = None
    gid: int | None = None
    mode: int | None = None  # permission bits, ``stat.S_IMODE``


def _block_size(size: int) -> int:
    """A read buffer no larger than the file needs (small files are common: skip 8 MiB)."""
    return min(checksum.BLOCK_SIZE, max(64 * 1024, size + 1))


def _hash_one(f: FileStat, tier0: Path) -> HashedFile:
    """Hash the file through one descriptor (``nofollow.open_regular``), so what is checked is what is read.

    Raises Unstable when it moved, Refused when it became a hard link, OSError when it
    became a symlink (ELOOP, ENOTDIR) or is missing or no longer regular (ENOENT).
    """
    fd = open_regular(f.path, tier0)
    try:
        before = os.fstat(fd)
        if before.st_nlink > 1:
            shown = printable(f.path.relative_to(tier0).as_posix())
            kind = f"hard link ({before.st_nlink} links)"
            raise Refused(f"refused: {shown} ({kind})", [{"path": shown, "kind": kind}], 1)
        if (before.st_size, before.st_mtime_ns) != (f.size, f.mtime_ns):
            raise Unstable(f"{f.path} changed since it was seen")
        size, value = checksum.hash_fd(fd, block_size=_block_size(f.size))
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or size != before.st_size:
        raise Unstable(f"{f.path} changed while it was hashed")
    relpath = f.path.relative_to(tier0).as_posix()
    mode = stat.S_IMODE(before.st_mode)
    return HashedFile(relpath, size, before.st_mtime_ns, value, before.st_uid, before.st_gid, mode)


async def hash_stable(files: tuple[FileStat, ...], tier0: Path) -> tuple[HashedFile, ...]:
    """Hash every file in parallel off the event loop.

    Raises Unstable if any moved or vanished, Refused if one became a hard link, OSError
    if one became a symlink or something other than a regular file.
    """
    try:
        hashed = await asyncio.gather(*(blocking(_hash_one, f, tier0) for f in files))
    except FileNotFoundError as exc:
        raise Unstable(f"{exc.filename} vanished while it was hashed") from None
    return tuple(hashed)

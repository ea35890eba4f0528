"""First sight of a step's files: each hashed through one descriptor, refused if it moves meanwhile.

A file read through a buffer of ``MAPPED_FROM`` bytes or more (8 MiB for every file from
8 MiB on) reads into a mapping of the ``hash_stable`` call (``_Blocks``), reused by its files
and unmapped once the last is hashed, not into a heap bytearray. Such a bytearray outlived its
hash: glibc served it from an I/O thread's malloc arena once the first 8 MiB one freed had
raised its mmap threshold, and returns no arena's top to the OS below its trim threshold
(risen to 16 MiB with it), not even at ``malloc_trim``. Each node's recording left 8 MiB
resident, 16 on the node that recorded twice, all beside the hop's 32 MiB budget at a peer
daemon's peak (bench_peer, quick: 150-159 MiB per node, 8-16 MiB of it these). A fresh mapping
costs its page faults (8 MiB: 3 ms of CPU against 0.7 for a reused heap one), once per call
and I/O thread, not per file.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from tierd.daemon import checksum
from tierd.daemon.aio import blocking
from tierd.daemon.backends.budget import MIB, map_aligned
from tierd.daemon.detect.detector import FileStat
from tierd.daemon.detect.hostile import printable
from tierd.daemon.nofollow import open_regular
from tierd.errors import Refused, Unstable

__all__ = ["MAPPED_FROM", "HashedFile", "hash_stable"]

#: Read buffers from this size on are a ``hash_stable`` call's mappings (see the module docstring).
MAPPED_FROM = 1 * MIB


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


class _Blocks:
    """The read buffers of one ``hash_stable`` call: ``checksum.BLOCK_SIZE`` mappings its files reuse.

    Thread-safe. ``release`` drops the idle ones; each is unmapped when the last view of it goes.
    """

    def __init__(self) -> None:
        self._idle: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self._released = False

    def take(self) -> mmap.mmap:
        """An idle mapping, or a new one."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return map_aligned(checksum.BLOCK_SIZE)

    def give(self, block: mmap.mmap) -> None:
        """Return ``block`` for the next file (dropped once the call released them)."""
        with self._lock:
            if not self._released:
                self._idle.append(block)

    def release(self) -> None:
        """Drop the idle mappings, and those given back later."""
        with self._lock:
            self._released = True
            self._idle.clear()


def _hash_fd(fd: int, size: int, blocks: _Blocks) -> tuple[int, str]:
    """``checksum.hash_fd`` through a buffer no larger than the file needs (one of ``blocks`` if big)."""
    length = _block_size(size)
    if length < MAPPED_FROM:
        return checksum.hash_fd(fd, block_size=length)
    block = blocks.take()
    try:
        with memoryview(block) as whole, whole[:length] as view:
            return checksum.hash_fd(fd, buffer=view)
    finally:
        blocks.give(block)


def _hash_one(f: FileStat, tier0: Path, blocks: _Blocks) -> HashedFile:
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
        size, value = _hash_fd(fd, f.size, blocks)
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
    blocks = _Blocks()
    try:
        hashed = await asyncio.gather(*(blocking(_hash_one, f, tier0, blocks) for f in files))
    except FileNotFoundError as exc:
        raise Unstable(f"{exc.filename} vanished while it was hashed") from None
    finally:
        blocks.release()  # a file still being hashed (one failed first) gives its block back to nobody
    return tuple(hashed)

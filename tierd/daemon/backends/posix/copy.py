"""The blocking halves of a POSIX write: one chunk at a time, hashed, writeback started.

Two ways to fill a chunk of the temporary file:

- ``hash_and_pwrite``: the bytes are already in a buffer (read from any source); hash
  them, ``pwrite`` them: through an ``O_DIRECT`` descriptor (``open_direct``) where the
  file system takes one, so the bytes go from the buffer to the disk without a copy into
  the page cache; the unaligned tail of a file through the ordinary descriptor.
- ``kernel_copy``: the source is a local file; ``copy_file_range`` moves the bytes inside
  the kernel (no trip through this process; a reflink or a server-side copy where the
  file system offers one), then the chunk is read back from the destination and hashed,
  so the checksum covers what the destination file holds, not what was meant to go in.

Both queue what went through the page cache for writeback at once
(``writeback.start_writeback``), so the fsync that ends the write has little left to
flush. Every function here blocks: call them through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from awscrt import checksums

from tierd.daemon import checksum
from tierd.daemon.backends.base import Ownership
from tierd.daemon.backends.posix.dirsync import sync_directory
from tierd.daemon.backends.posix.temp import TempFile
from tierd.daemon.backends.posix.unnamed import UnnamedFile
from tierd.daemon.backends.posix.writeback import start_writeback, sync_filesystem
from tierd.daemon.beneath import Dir, Place, Root
from tierd.daemon.nofollow import Opener, open_regular

__all__ = [
    "DIRECT_ALIGN",
    "NO_KERNEL_COPY",
    "DirectRefused",
    "Mismatch",
    "SourceEnded",
    "commit_staged",
    "create_temp",
    "fill_whole",
    "fsync_and_hash",
    "hash_and_pwrite",
    "hash_path",
    "kernel_copy",
    "open_direct",
    "place_whole",
    "read_ahead",
    "read_files",
    "stage_files",
    "stage_whole",
]

#: errno values saying ``copy_file_range`` cannot copy between these two files at all
#: (different file systems, an old kernel, a file system without it): use buffers instead.
_REFUSALS = ("EXDEV", "EINVAL", "ENOSYS", "EOPNOTSUPP", "ENOTSUP")
NO_KERNEL_COPY = frozenset(getattr(errno, name) for name in _REFUSALS if hasattr(errno, name))
#: What ``O_DIRECT`` needs aligned (buffer address, file offset, length): a page covers the
#: logical block sizes in use (512 B, 4 KiB).
DIRECT_ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)
#: errno values saying a file system takes no ``O_DIRECT`` (tmpfs, some FUSE file systems).
_NO_DIRECT = frozenset({errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP})


class DirectRefused(Exception):
    """The file system refused an ``O_DIRECT`` write: write through the page cache instead."""


class SourceEnded(Exception):
    """The source file ended before the chunk did (it shrank since detection)."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class Mismatch(Exception):
    """The bytes hashed to ``actual``, not the expected checksum (``how``: source or read-back)."""

    def __init__(self, actual: str, how: str) -> None:
        super().__init__(actual, how)
        self.actual = actual
        self.how = how


def create_temp(
    final: Place, owner: Ownership | None = None, *, lock: bool = True, unnamed: bool = False
) -> TempFile | None:
    """A fresh temporary file for ``final``, to get ``owner``; None when the tier root is missing.

    ``lock``: as for ``TempFile.create``. ``unnamed``: with no name at all where the file
    system allows (``posix.unnamed``), else under a temporary name.
    """
    try:
        if unnamed and (made := UnnamedFile.open_in(final, owner)) is not None:
            return made
        return TempFile.create(final, owner, lock=lock)
    except FileNotFoundError:
        if not final.root.exists():
            return None
        raise


def fill_whole(
    view: memoryview,
    source: int | None,
    final: Place,
    expected: str,
    owner: Ownership | None = None,
    *,
    lock: bool = True,
    unnamed: bool = False,
) -> TempFile | None:
    """A temp file for ``final`` holding ``view`` (filled from the file ``source`` first, if given).

    Hashes before anything is created, so a mismatch writes nothing. ``lock`` and
    ``unnamed``: as for ``create_temp``. Returns None when the tier root is missing. Raises
    SourceEnded, Mismatch, or OSError (nothing left behind).
    """
    if source is not None:
        _pread_full(source, view)
    actual = checksum.encode(int(checksums.crc64nvme(view, 0)))
    if actual != expected:
        raise Mismatch(actual, "source")
    temp = create_temp(final, owner, lock=lock, unnamed=unnamed)
    if temp is None:
        return None
    try:
        _pwrite_all(temp.fd, view, 0)
    except BaseException:
        temp.discard()
        raise
    return temp


def place_whole(
    view: memoryview,
    source: int | None,
    final: Place,
    expected: str,
    readback: bool,
    owner: Ownership | None = None,
) -> float | None:
    """``fill_whole``, then fsync (for ``readback`` a re-read from the disk), rename, directory fsync.

    Returns the final mtime, or None when the tier root is missing. Raises SourceEnded,
    Mismatch, or OSError (the temp file removed).
    """
    temp = fill_whole(view, source, final, expected, owner)
    if temp is None:
        return None
    try:
        if readback:
            stored = fsync_and_hash(view, temp) if len(view) else expected
            if stored != expected:
                raise Mismatch(stored, "read-back")
        else:
            os.fsync(temp.fd)
        return temp.commit(final)
    except BaseException:
        temp.discard()
        raise


def stage_whole(
    view: memoryview, source: int | None, final: Place, expected: str, owner: Ownership | None = None
) -> TempFile | None:
    """``fill_whole`` into a file with no name (``posix.unnamed``), else under a temporary name.

    Left for ``commit_staged``: an unnamed file open, a named one closed. No ``flock`` is
    taken: ``park`` would drop it at once (``TempFile.park`` says what keeps a parked file),
    and it was one system call of the dozen a small file costs.
    """
    temp = fill_whole(view, source, final, expected, owner, lock=False, unnamed=True)
    if temp is not None:
        temp.park()
    return temp


def stage_files(
    files: Sequence[tuple[Place, bytes | bytearray | memoryview, str, Ownership | None]],
) -> list[TempFile | Mismatch | OSError | None]:
    """``stage_whole`` for each ``(final, bytes, expected, owner)``, in order; each file's result or error.

    None where the tier root is missing. A file that fails leaves nothing behind.
    """
    results: list[TempFile | Mismatch | OSError | None] = []
    for final, data, expected, owner in files:
        try:
            results.append(stage_whole(memoryview(data), None, final, expected, owner))
        except (Mismatch, OSError) as exc:
            results.append(exc)
    return results


def read_files(
    root: Path | Root, paths: Sequence[str | Path], views: Sequence[memoryview], *, single_link: bool = False
) -> list[int | OSError]:
    """Read each regular file under ``root`` into its view; each file's size, or its OSError, in order.

    Every file is opened first and its read announced (``POSIX_FADV_WILLNEED``), then each
    is read: from a cold page cache the reads of a group queue up on the disk together
    instead of one wait per file, and with no open of its own for the announcement (the
    separate read-ahead of every file, ``read_ahead``, cost five system calls a file).

    A file is read only when its size is its view's (and a size that differs is returned);
    one that ends before its view is full returns how far it got. Files are opened by
    ``nofollow.open_regular``: a symlink on the way is ELOOP or ENOTDIR, a file that is not
    regular reads as missing (ENOENT); with ``single_link`` a hard-linked one is EMLINK.
    """
    results: list[int | OSError] = [0] * len(paths)
    opened: list[tuple[int, int, memoryview]] = []  # (index, fd, view) of the files to read
    try:
        with Opener(root, single_link=single_link) as opener:
            for index, (path, view) in enumerate(zip(paths, views, strict=True)):
                try:
                    fd, st = opener.open_stat(path)
                except OSError as exc:
                    results[index] = exc
                    continue
                if st.st_size != len(view):
                    os.close(fd)
                    results[index] = st.st_size
                    continue
                opened.append((index, fd, view))
                _announce(fd)
        for index, fd, view in opened:
            results[index] = _read_open(fd, view)
    finally:
        for _, fd, _ in opened:
            os.close(fd)
    return results


def _announce(fd: int) -> None:
    """Ask the kernel to start reading the whole file (best effort)."""
    if hasattr(os, "posix_fadvise"):
        with suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)


def _read_open(fd: int, view: memoryview) -> int | OSError:
    """Fill ``view`` from ``fd``: its length, how far the file got if it ended first, or the OSError."""
    try:
        _pread_full(fd, view)
    except SourceEnded as exc:
        return exc.offset
    except OSError as exc:
        return exc
    return len(view)


def commit_staged(staged: Sequence[tuple[TempFile, Place]]) -> None:
    """Make staged temp files durable, rename (or link) each to its final name, fsync each directory once.

    One ``syncfs`` of each file system they are on (where there is none, an fsync per file)
    stands for the fsyncs of every file. Raises OSError; what was not renamed stays staged.
    """
    directories: dict[Path, Dir] = {temp.dir.path: temp.dir for temp, _ in staged}
    devices = {os.fstat(d.fd).st_dev: d for d in directories.values()}
    if not all(sync_filesystem(d.fd, str(d.path)) for d in devices.values()):
        for temp, _ in staged:
            temp.fsync_parked()
    for temp, final in staged:
        temp.rename_into(final)
    for directory in directories.values():
        sync_directory(directory)


def read_ahead(root: Path | Root, paths: Sequence[str | Path], *, single_link: bool = False) -> None:
    """Ask the kernel to read these files under ``root`` into the page cache (best effort)."""
    if not hasattr(os, "posix_fadvise"):
        return
    with Opener(root, single_link=single_link) as opener:
        for path in paths:
            try:
                fd = opener.open(path)
            except OSError:
                continue  # the copy itself will report it
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def _pread_full(fd: int, view: memoryview) -> None:
    filled = 0
    while filled < len(view):
        n = os.preadv(fd, [view[filled:]], filled)
        if n == 0:
            raise SourceEnded(filled)
        filled += n


def open_direct(temp: TempFile) -> int:
    """A write-only ``O_DIRECT`` descriptor on ``temp``; -1 where the file system takes none."""
    if not _O_DIRECT:
        return -1
    try:
        return temp.open_direct(_O_DIRECT)
    except OSError as exc:
        if exc.errno in _NO_DIRECT:
            return -1
        raise


def hash_and_pwrite(view: memoryview, fd: int, offset: int, direct_fd: int = -1) -> int:
    """CRC64NVME of ``view``, written at ``offset``.

    With ``direct_fd`` (from ``open_direct``; ``view`` page-aligned) the aligned part goes
    through it and only the tail through ``fd``, queued for writeback. Raises DirectRefused
    when the file system refuses the direct write (nothing was written through the cache).
    """
    crc = int(checksums.crc64nvme(view, 0))
    head = 0
    if direct_fd >= 0 and offset % DIRECT_ALIGN == 0:
        head = len(view) - len(view) % DIRECT_ALIGN
        try:
            _pwrite_all(direct_fd, view[:head], offset)
        except OSError as exc:
            if exc.errno in _NO_DIRECT:
                raise DirectRefused from exc
            raise
    if head < len(view):
        _pwrite_all(fd, view[head:], offset + head)
        start_writeback(fd, offset + head, len(view) - head)
    return crc


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], offset + written)


def kernel_copy(view: memoryview, src_fd: int, dst_fd: int, offset: int, length: int) -> int:
    """Copy ``length`` bytes at ``offset`` in the kernel; CRC64NVME of the destination's bytes.

    ``view`` is the buffer the destination is read back through. Raises SourceEnded when
    the source is shorter than ``offset + length``, OSError otherwise (an errno in
    NO_KERNEL_COPY from the first call means this pair of files cannot be copied so).
    """
    end = offset + length
    pos = offset
    while pos < end:
        n = os.copy_file_range(src_fd, dst_fd, end - pos, pos, pos)
        if n == 0:
            raise SourceEnded(pos)
        pos += n
    start_writeback(dst_fd, offset, length)
    crc = 0
    pos = offset
    while pos < end:
        n = os.preadv(dst_fd, [view[: min(len(view), end - pos)]], pos)
        if n == 0:
            raise OSError(errno.EIO, f"destination ended at byte {pos} of {end} just copied")
        crc = checksums.crc64nvme(view[:n], crc)
        pos += n
    return int(crc)


def hash_path(
    view: memoryview, path: Path, root: Path | Root | None = None, *, single_link: bool = False
) -> str:
    """CRC64NVME of a whole regular file under ``root`` (``nofollow.open_regular``), read through ``view``."""
    fd = open_regular(path, root, single_link=single_link)
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        crc = 0
        while n := os.readv(fd, [view]):
            crc = checksums.crc64nvme(view[:n], crc)
    finally:
        os.close(fd)
    return checksum.encode(crc)


def fsync_and_hash(view: memoryview, temp: TempFile) -> str:
    """Make the bytes durable, drop them from the page cache, hash what is stored."""
    os.fsync(temp.fd)
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(temp.fd, 0, 0, os.POSIX_FADV_DONTNEED)
    crc, offset = 0, 0
    while n := os.preadv(temp.fd, [view], offset):
        crc = checksums.crc64nvme(view[:n], crc)
        offset += n
    return checksum.encode(crc)

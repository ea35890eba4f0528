"""A POSIX tier: a directory on local NVMe or a parallel file system mount.

Writes go to a hidden temporary name in the destination directory
(``.<name>.tierd-tmp-<random>``), then are fsynced (for ``verify: readback`` also dropped
from the page cache, read back and hashed again), renamed into place and the directory
fsynced. So the final name only ever holds complete, verified bytes (``posix.writes``, the
write path this class inherits). ``list`` hides temporary names. How the temporary file is
filled (``posix.copy``):

- a file of one chunk or less: read, hashed and placed in one trip to the I/O pool, and
  nothing is created when its bytes do not match;
- where the tier's file system takes ``O_DIRECT`` (most do: ext4, XFS, Lustre, GPFS, NFS):
  parallel chunks read into reused page-aligned buffers, hashed, and written to the disk
  directly, never copied into the page cache (the unaligned tail of a file goes through
  it). On this project's VMs that halved the CPU of a 4 GiB hop and beat ``cp`` + ``sync``.
  From a POSIX source the chunks are read by ``O_DIRECT`` too, unless the page cache
  holds them (``posix.directread``): a third of the CPU again;
- otherwise, from a local file (a ``PosixReader``): ``copy_file_range`` per chunk, in
  parallel, each chunk read back from the destination and hashed; where the kernel refuses
  (different file systems) the backend remembers it for that source device;
- otherwise: parallel chunks read into buffers, hashed and ``pwrite``-n through the cache.

What goes through the page cache is queued for writeback as soon as it is written, so the
final fsync has little left to do.

``write`` first removes what killed writes of the same name left behind (a restarted
daemon rewriting the file it was killed in), and ``abort_stale_uploads`` sweeps old
leftovers everywhere. A hop starting (``remove_leftovers``) keeps the newest temporary
file of each big file instead, and that file's write resumes from its verified prefix
(``posix.resume``); ``posix.temp`` tells them from temporary files still being written.
A write lists its directory only the first time this backend writes there.

``OSError`` is translated in ``posix.errors``: ENOENT is NotFound; ENOSPC and EDQUOT are
TransientBackendError (retention or an operator can free space, so a later retry may
succeed), as are EIO, ESTALE, timeouts and other network file system blips; EACCES,
EROFS, ENOTDIR and the rest are PermanentBackendError. A missing tier root (an
unmounted file system) is TransientBackendError, and is never created by tierd.
Every blocking call runs through ``tierd.daemon.aio.blocking``.
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path

from tierd.config import PosixTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import (
    Backend,
    Features,
    ObjectInfo,
    Ownership,
    RangeReader,
    Space,
    WriteBatch,
    check_prefix,
    check_relpath,
    mismatch,
)
from tierd.daemon.backends.budget import MIB, ByteBudget, default_budget
from tierd.daemon.backends.concurrency import blocking_on, uninterrupted
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import directread, fstype
from tierd.daemon.backends.posix.batch import PosixBatch
from tierd.daemon.backends.posix.errors import os_errors, translate_oserror
from tierd.daemon.backends.posix.owner import apply_to_dir
from tierd.daemon.backends.posix.reader import PosixReader
from tierd.daemon.backends.posix.remove import remove_checkpoint_tree, unlink_and_prune
from tierd.daemon.backends.posix.temp import (
    TEMP_MARK,
    is_temp_name,
    remove_leftovers_of,
    remove_stale_temps,
)
from tierd.daemon.backends.posix.writes import CHUNKS_PER_FILE, HASH_BUFFER, LISTED_DIRECTORIES, PosixWrites
from tierd.daemon.beneath import Place, Root, lstat_in
from tierd.daemon.nofollow import open_regular
from tierd.errors import (
    IntegrityError,
    NotFound,
    TierdError,
)
from tierd.logs import get_logger

__all__ = ["CHUNK_SIZE", "TEMP_MARK", "PosixBackend", "is_temp_name"]

CHUNK_SIZE = 8 * MIB
#: Files up to this size are read whole when opened (one trip to the I/O pool for open,
#: read and close; a small file's cost is trips, not bytes).
WHOLE_READ_LIMIT = 256 * 1024
_REMEMBERED_DIRECTORIES = 65536  # how many directories' recorded owners a backend keeps

log = get_logger(__name__)


class PosixBackend(PosixWrites, Backend):
    """A tier rooted at a directory (its write path: ``posix.writes``)."""

    features = Features(
        native_checksum=False, server_side_copy=False, multipart=False, announced_whole_reads=True
    )

    def __init__(
        self,
        tier: PosixTier,
        *,
        budget: ByteBudget | None = None,
        chunk_size: int = CHUNK_SIZE,
        single_links: bool = False,
        tree: Root | None = None,
    ) -> None:
        """``single_links``: refuse to read hard-linked files (tier 0, which training jobs write).

        ``tree``: how the root is reached (a restore target's, anchored at its allowed root);
        by default the tier's path, opened as configured.
        """
        self.name = tier.name
        self.single_links = single_links
        self.tree = tree or Root(Path(tier.path))
        self.tree.made = self._directory_made
        self.root = self.tree.top
        self._root_text = os.fspath(self.root).rstrip("/")
        #: Directories' recorded owners (``expect_directories``), by path under the root.
        self._dir_owners: OrderedDict[str, Ownership] = OrderedDict()
        self.concurrency = tier.concurrency
        self.chunks_per_file = min(tier.concurrency, CHUNKS_PER_FILE)
        self.chunk_size = chunk_size
        self.budget = budget or default_budget()
        self.readback = tier.verify == "readback"
        self._init_writes(tier.io_mode)

    def _path(self, relpath: str) -> Path:
        return self.root / check_relpath(relpath)

    def _text(self, relpath: str) -> str:
        """``_path`` as a string, no ``Path`` made (a join, its parse and its ``str`` took ~10 us a file)."""
        return f"{self._root_text}/{check_relpath(relpath)}"

    def expect_directories(self, owners: Mapping[str, Ownership]) -> None:
        """Give each directory a write makes here the owner and mode recorded for it (by path).

        ``""`` is the root itself (a restore's target it makes). Others get the tier's
        default mode. The most recent ``_REMEMBERED_DIRECTORIES`` are kept.
        """
        for relpath, owner in owners.items():
            self._dir_owners[relpath] = owner
            self._dir_owners.move_to_end(relpath)
        while len(self._dir_owners) > _REMEMBERED_DIRECTORIES:
            self._dir_owners.popitem(last=False)

    def _directory_made(self, below: tuple[str, ...] | None, fd: int) -> None:
        """Give a directory just made (0700) its recorded owner and mode, or the default mode."""
        owner = None if below is None else self._dir_owners.get("/".join(below))
        if owner is None:
            os.fchmod(fd, self.tree.dir_mode)
        else:
            apply_to_dir(fd, owner)

    def location(self, relpath: str) -> str:
        """The file's absolute path."""
        return str(self._path(relpath))

    async def _require_root(self) -> None:
        if not await blocking(self.tree.exists):
            raise self._root_missing()

    async def stat(self, relpath: str) -> ObjectInfo:
        """Size and mtime (checksum None). Raises NotFound when missing or not a regular file (a symlink)."""
        place = self._place(relpath)
        path = place.path
        with os_errors("stat", str(path)):
            st = await blocking(_lstat, place)
        if st is None or not stat_mod.S_ISREG(st.st_mode):
            raise NotFound(f"stat {path}: not a regular file")
        return ObjectInfo(relpath, st.st_size, None, st.st_mtime)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Regular files under ``prefix`` (temporary names hidden, symlinks skipped).

        Raises TransientBackendError when the tier root is missing; a missing prefix
        lists nothing.
        """
        pending = [check_prefix(prefix)]
        await self._require_root()
        while pending:
            rel_dir = pending.pop()
            with os_errors("list", str(self.root / rel_dir)):
                files, subdirs = await blocking(_scan_dir, self.tree, rel_dir)
            for name, size, mtime in files:
                yield ObjectInfo(rel_dir + name, size, None, mtime)
            pending.extend(f"{rel_dir}{name}/" for name in subdirs)

    async def open_reader(self, relpath: str) -> RangeReader:
        """A PosixReader. Raises NotFound when missing, PermanentBackendError if unreadable.

        A file of more than a chunk is also opened ``O_DIRECT`` for its chunks' reads
        (``posix.directread``).
        """
        path = self._path(relpath)
        with os_errors("open", str(path)):
            fd, size, device, contents, direct = await blocking(
                _open_regular, self.tree, path, self.single_links, self.chunk_size
            )
        return PosixReader(fd, size, str(path), device, contents, direct)

    async def read_whole(
        self, relpaths: Sequence[str], views: Sequence[memoryview]
    ) -> Sequence[TierdError | None]:
        """Each file whole into its view, all in one trip to the I/O pool (see ``Backend``)."""
        paths = [self._text(relpath) for relpath in relpaths]
        sizes = await uninterrupted(
            blocking(posixcopy.read_files, self.tree, paths, views, single_link=self.single_links)
        )
        return [
            _read_error(path, size, len(view)) for path, size, view in zip(paths, sizes, views, strict=True)
        ]

    def batch(self) -> WriteBatch:
        """Files of one chunk are staged and made durable together (``PosixBatch``)."""
        return PosixBatch(self, self)

    async def prefetch(self, relpaths: Sequence[str]) -> None:
        """Start reading these files into the page cache (``POSIX_FADV_WILLNEED``); never raises.

        Small files are read one after another by a few lanes: with their reads already
        queued, a cold cache costs one deep disk queue instead of a wait per file.
        """
        paths = [self._text(relpath) for relpath in relpaths]
        await blocking(posixcopy.read_ahead, self.tree, paths, single_link=self.single_links)

    async def local_disk(self) -> bool:
        """Whether the root is on one of this node's own file systems (``fstype``).

        Looked up each time (a stat and ``/proc/self/mountinfo``): a root that is not mounted
        yet shows the file system beneath it.
        """
        return await blocking(fstype.is_local, self.root)

    async def delete(self, relpath: str) -> None:
        """Unlink (missing is fine) and prune emptied directories up to the root.

        Raises PermanentBackendError (EACCES, a directory at that name, ...) or
        TransientBackendError.
        """
        place = self._place(relpath)
        with os_errors("delete", str(place.path)):
            await blocking(unlink_and_prune, self.tree, place)

    async def remove_checkpoint(self, path: str, markers: Sequence[str], rest: Sequence[str]) -> None:
        """Rename the checkpoint's directory out of sight, then remove it (see ``posix.remove``).

        Raises PermanentBackendError (EACCES, ...) or TransientBackendError.
        """
        top = self._place(path)
        ordered = [self._place(p) for p in [*markers, *rest]]
        with os_errors("delete", str(top.path)):
            await blocking(remove_checkpoint_tree, self.tree, (*top.parts, top.name), ordered)

    async def space(self) -> Space:
        """Size and free bytes (for an unprivileged writer) of the root's file system.

        Raises TransientBackendError when the root is missing.
        """
        await self._require_root()
        with os_errors("statvfs", str(self.root)):
            st = await blocking(os.statvfs, self.root)
        return Space(total=st.f_blocks * st.f_frsize, free=st.f_bavail * st.f_frsize)

    async def hash(self, relpath: str) -> str:
        """Read back and hash the whole file. Raises NotFound when missing.

        Through a reused aligned buffer: a fresh zero-filled 4 MiB one per file made
        re-checking 600 files of 8 KiB take 1.1 s instead of 0.04 s.
        """
        path = self._path(relpath)
        async with self.budget.aligned(HASH_BUFFER) as view:
            with os_errors("hash", str(path)):
                return await uninterrupted(
                    blocking_on(view, posixcopy.hash_path, path, self.tree, single_link=self.single_links)
                )

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """Read-back verification (POSIX has no native checksum).

        Raises NotFound when missing, IntegrityError on a mismatch.
        """
        info = await self.stat(relpath)
        actual = await self.hash(relpath)
        if actual != expected_checksum:
            raise mismatch(self.location(relpath), expected_checksum, actual, "read-back")
        return ObjectInfo(relpath, info.size, actual, info.mtime, "readback")

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Remove abandoned temporary files older than that; returns how many were removed.

        A temporary file still being written (by this process, or locked by another) is
        never removed; ``keep`` (UploadIds) does not apply to a POSIX tier. Raises
        TransientBackendError when the root is missing, PermanentBackendError when a
        directory cannot be read.
        """
        await self._require_root()
        with os_errors("clean up temporary files under", str(self.root)):
            return await blocking(remove_stale_temps, self.tree, older_than_seconds)

    async def remove_own_temps(self) -> int:
        """Remove every temporary file no write holds, whatever its age; how many.

        Only for a directory no other process writes (a peer tier's): at start, what a crash
        left. Raises TransientBackendError when the root is missing, PermanentBackendError
        when a directory cannot be read.
        """
        await self._require_root()
        with os_errors("clean up temporary files under", str(self.root)):
            return await blocking(remove_stale_temps, self.tree, 0.0, owned=True)

    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """Remove the temporary files killed writes of exactly these files left; returns how many.

        Only these names' leftovers, whatever their age (``temp.remove_leftovers_of`` says
        why), but the newest one of a name holding over a chunk is kept for that file's
        write to resume from (``write``); ``keep`` (UploadIds) does not apply to a POSIX
        tier. The directories listed are remembered, so the writes that follow need not
        list them again. Raises TransientBackendError when the root is missing,
        PermanentBackendError when a directory cannot be read or a file removed.
        """
        await self._require_root()
        finals = [self._place(relpath) for relpath in relpaths]
        with os_errors("remove leftovers under", str(self.root)):
            removed, left, kept = await blocking(remove_leftovers_of, finals, self.chunk_size + 1)
        for final, found in kept.items():
            self._resumable[final] = found
            self._resumable.move_to_end(final)
        while len(self._resumable) > LISTED_DIRECTORIES:
            self._resumable.popitem(last=False)
        for directory, names in left.items():
            self._leftovers[directory] = names
            self._leftovers.move_to_end(directory)
        while len(self._leftovers) > LISTED_DIRECTORIES:
            self._leftovers.popitem(last=False)
        return removed

    async def close(self) -> None:
        """Nothing to release."""


# Blocking helpers: each runs on the I/O pool via ``blocking``.


def _lstat(place: Place) -> os.stat_result | None:
    """``lstat`` of ``place``, reached without a symlink; None when missing or behind a symlink."""
    try:
        directory = place.root.open(place.parts)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with directory:
        return lstat_in(directory, place.name)


def _scan_dir(tree: Root, rel_dir: str) -> tuple[list[tuple[str, int, float]], list[str]]:
    """The regular files (name, size, mtime) and subdirectories of ``rel_dir``, walked by descriptors."""
    files: list[tuple[str, int, float]] = []
    subdirs: list[str] = []
    parts = tuple(rel_dir.rstrip("/").split("/")) if rel_dir else ()
    try:
        directory = tree.open(parts)
    except (FileNotFoundError, NotADirectoryError):  # missing, or behind a symlink
        return files, subdirs
    with directory, os.scandir(directory.fd) as listing:  # entries stat through the open directory
        for entry in sorted(listing, key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            elif entry.is_file(follow_symlinks=False) and not is_temp_name(entry.name):
                st = entry.stat(follow_symlinks=False)
                files.append((entry.name, st.st_size, st.st_mtime))
    subdirs.reverse()  # popped from the end: visit in name order
    return files, subdirs


def _open_regular(
    root: Root, path: Path, single_link: bool, direct_above: int
) -> tuple[int, int, int, bytes | None, int]:
    """(fd, size, device, None, direct fd); for a file up to WHOLE_READ_LIMIT (-1, size, device, bytes, -1).

    The direct fd (``directread.open_direct_reader``) only for a file of more than
    ``direct_above`` bytes, else -1.

    Opened by ``nofollow.open_regular`` from ``root``: raises OSError (ELOOP, ENOTDIR) for a
    symlink on the way, ENOENT for a file that is missing or not regular, EMLINK with
    ``single_link`` for a hard-linked one.
    """
    fd = open_regular(path, root, single_link=single_link)
    try:
        st = os.fstat(fd)
        if st.st_size > WHOLE_READ_LIMIT:
            direct = directread.open_direct_reader(fd) if st.st_size > direct_above else -1
            return fd, st.st_size, st.st_dev, None, direct
        contents = os.pread(fd, st.st_size, 0)  # shorter if it shrank: the copy will say so
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return -1, st.st_size, st.st_dev, contents, -1


def _read_error(where: str, size: int | OSError, expected: int) -> TierdError | None:
    """What ``posixcopy.read_files`` said of one file, as the error ``read_whole`` reports."""
    if isinstance(size, OSError):
        return translate_oserror(size, "read", where)
    if size != expected:
        return IntegrityError(f"{where}: holds {size} bytes, expected {expected}")
    return None

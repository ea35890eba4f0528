"""How a file gets onto a POSIX tier: the write path of ``PosixBackend`` (mixed into it).

A write goes to a hidden temporary name in the destination directory, is filled (one trip
to the I/O pool for a file of one chunk; else chunks in parallel, by ``O_DIRECT``, by
``copy_file_range`` from a local file, or through the page cache: ``posix.copy``), made
durable (for ``verify: readback`` also read back and hashed), and renamed into place. A
killed write's temporary file that a hop kept is resumed from its verified prefix
(``posix.resume``). ``stage`` and ``stage_many`` fill small files for ``PosixBatch``,
which makes them durable and visible together. The backend's module docstring says why.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import TypeVar

from tierd.daemon import checksum
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import (
    ObjectInfo,
    Ownership,
    Progress,
    RangeReader,
    SmallFile,
    Verification,
    WriteRequest,
    check_relpath,
    mismatch,
    read_full,
)
from tierd.daemon.backends.budget import MIB, ByteBudget
from tierd.daemon.backends.concurrency import blocking_on, for_each, uninterrupted
from tierd.daemon.backends.hashing import combine_all
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import resume as posixresume
from tierd.daemon.backends.posix.errors import os_errors, translate_oserror
from tierd.daemon.backends.posix.iomode import IoChooser
from tierd.daemon.backends.posix.reader import PosixReader
from tierd.daemon.backends.posix.temp import (
    TempFile,
    discard_all,
    remove_abandoned,
    remove_owned_leftover,
    temp_names_in,
    temp_stem,
)
from tierd.daemon.beneath import Dir, Place, Root
from tierd.errors import IntegrityError, TierdError, TransientBackendError
from tierd.logs import get_logger

__all__ = ["CHUNKS_PER_FILE", "HASH_BUFFER", "LISTED_DIRECTORIES", "RESUME_MIN_SIZE", "PosixWrites"]

KERNEL_CHUNK_SIZE = 32 * MIB  # copy_file_range moves no bytes through our buffers
HASH_BUFFER = 4 * MIB
#: Chunks of one file in flight: more only scatters one file's I/O (files in flight come
#: from the tier's ``concurrency``). Measured on one disk: 4 beat 16 by about 15%.
CHUNKS_PER_FILE = 4
#: Files from this size on resume a killed write from its kept prefix (``posix.resume``).
#: ``python -m bench resume`` (half of the file kept): 0.78x the time of a full copy at
#: 16 MiB, 0.77x at 64 MiB, 0.63x at 1 GiB; a file of one chunk is written whole anyway.
RESUME_MIN_SIZE = 16 * MIB
LISTED_DIRECTORIES = 4096  # how many directories' leftovers a backend remembers

log = get_logger(__name__)
T = TypeVar("T")
ChunkFn = Callable[[int, int], Awaitable[int]]  # (offset, length) -> the CRC64NVME of those bytes
Span = tuple[int, int, ChunkFn]  # offset, length, what fills or re-hashes it


class PosixWrites:
    """The write path ``PosixBackend`` inherits: ``write``, ``stage``, ``stage_many``.

    Its settings are the backend's (a test may change them after construction); its own
    state is made by ``_init_writes``.
    """

    name: str
    root: Path
    tree: Root
    budget: ByteBudget
    chunk_size: int
    chunks_per_file: int
    readback: bool

    def _init_writes(self, io_mode: str = "auto") -> None:
        """The write path's state: leftovers found, how big files go, what was refused, kept files."""
        # Temporary names found at a directory's first write: the leftovers a write may remove.
        self._leftovers: OrderedDict[tuple[str, ...], set[str]] = OrderedDict()
        # Devices of sources whose files copy_file_range could not copy here.
        self._no_kernel_copy: set[int] = set()
        self._direct = True  # until the tier's file system refuses O_DIRECT
        self.io_mode = IoChooser(
            self.name, io_mode, self.root
        )  # O_DIRECT or the page cache (``posix.iomode``)
        self.resume_min_size = RESUME_MIN_SIZE
        # Killed writes' temporary files a hop starting kept for their writes to resume.
        self._resumable: OrderedDict[Place, tuple[Dir, str]] = OrderedDict()

    def _place(self, relpath: str) -> Place:
        """Where ``relpath`` lives, reached by directory descriptors (never a whole path)."""
        return self.tree.place(check_relpath(relpath))

    def _root_missing(self) -> TransientBackendError:
        return TransientBackendError(f"tier {self.name}: root {self.root} is missing (not mounted?)")

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Temp file, parallel hashed pwrite, fsync, read back, rename, fsync the directory.

        The request's ``owner``: given to the temporary file before its rename (``posix.owner``).

        The read-back (after dropping the page cache) runs only for ``verify: readback``;
        with ``verify: native`` the in-flight hash of every byte written is the check.
        ``resume`` is ignored: a file of ``resume_min_size`` or more whose killed write's
        temporary file a hop kept (``remove_leftovers``) resumes from its verified prefix
        (``posix.resume``; logged ``copy_resumed``), starting over if the whole does not
        match (``copy_resume_mismatch``); other leftovers of the same name whose writer is
        gone are removed first. Raises IntegrityError when the bytes read or read back
        differ from ``expected_checksum`` (the temp file is removed and the final name
        untouched), TransientBackendError (ENOSPC, EIO, missing root, ...) or
        PermanentBackendError (EACCES, EROFS, ...).
        """
        relpath, reader, expected_checksum = request.relpath, request.reader, request.expected_checksum
        progress, owner = request.progress, request.owner
        final = self._place(relpath)
        where = str(final.path)
        resumable = await self._resumable_temp(final, reader.size)
        await self._remove_leftovers(final)
        if reader.size <= self.chunk_size:
            return await self._write_whole(relpath, final, reader, expected_checksum, progress, owner)
        temp, kept = resumable or (await self._create_temp(final, owner), 0)
        temp.owner = owner  # an adopted file gets this write's owner too
        try:
            try:
                await self._fill(temp, reader, where, expected_checksum, progress, kept)
            except IntegrityError:
                if not kept:
                    raise
                log.warning("copy_resume_mismatch", tier=self.name, path=where, bytes_kept=kept)
                await asyncio.shield(blocking(temp.discard))
                temp = await self._create_temp(final, owner)
                await self._fill(temp, reader, where, expected_checksum, progress)
            await self._make_durable(temp, where, expected_checksum)
            with os_errors("rename into", where):
                mtime = await blocking(temp.commit, final)
        except BaseException:
            await asyncio.shield(blocking(temp.discard))
            raise
        by: Verification = "readback" if self.readback else "stream"
        return ObjectInfo(relpath, reader.size, expected_checksum, mtime, by)

    async def _create_temp(self, final: Place, owner: Ownership | None = None) -> TempFile:
        """A fresh temporary file for ``final``, to get ``owner``. TransientBackendError: no root.

        Cancelled meanwhile (a sibling file failed the hop), it removes what the thread made.
        """
        made = blocking(posixcopy.create_temp, final, owner)
        with os_errors("create temporary file for", str(final.path)):
            temp = await uninterrupted(made, undo=_discard_made)
        if temp is None:
            raise self._root_missing()
        return temp

    async def _resumable_temp(self, final: Place, size: int) -> tuple[TempFile, int] | None:
        """The temporary file kept for ``final`` and how many of its first bytes to keep, or None.

        Only for a file of ``resume_min_size`` or more; never raises (None: start over).
        """
        kept = self._resumable.pop(final, None)
        if kept is None:
            return None
        directory, name = kept
        if size < max(self.resume_min_size, self.chunk_size + 1):
            await blocking(remove_owned_leftover, directory, name)  # a hop kept it: its lease covers it
            return None
        found = await uninterrupted(
            blocking(posixresume.open_resumable, directory, name, size, self.chunk_size),
            undo=_discard_made,
        )
        if found is not None:
            log.info("copy_resumed", tier=self.name, path=str(final.path), bytes_kept=found[1], size=size)
        return found

    async def _write_whole(
        self,
        relpath: str,
        final: Place,
        reader: RangeReader,
        expected: str,
        progress: Progress | None,
        owner: Ownership | None = None,
    ) -> ObjectInfo:
        """A file of one chunk in one trip to the I/O pool: read, hash, place (see ``place_whole``)."""
        place = functools.partial(
            posixcopy.place_whole, final=final, expected=expected, readback=self.readback, owner=owner
        )
        mtime = await self._whole(final, reader, expected, progress, place)
        by: Verification = "readback" if self.readback else "stream"
        return ObjectInfo(relpath, reader.size, expected, mtime, by)

    async def stage(self, request: WriteRequest) -> tuple[TempFile, Place]:
        """A file of one chunk, hashed and written under its temporary name, neither durable nor visible.

        For ``PosixBatch``: ``posixcopy.commit_staged`` finishes it. The request's ``owner``
        as for ``write``. Raises like ``write``.
        """
        final = self._place(request.relpath)
        expected = request.expected_checksum
        await self._remove_leftovers(final)
        fill = functools.partial(posixcopy.stage_whole, final=final, expected=expected, owner=request.owner)
        return await self._whole(final, request.reader, expected, request.progress, fill), final

    async def stage_many(self, files: Sequence[SmallFile]) -> Sequence[tuple[TempFile, Place] | TierdError]:
        """``stage`` for each file, all in one trip to the I/O pool; each file's staging or error.

        Each file gets its ``SmallFile.owner``. A file whose bytes do not match is
        IntegrityError (nothing created for it).
        """
        finals = [self._place(file.relpath) for file in files]
        for final in finals:
            if self._may_have_leftovers(final):  # no coroutine per file where there are none
                await self._remove_leftovers(final)
        items = [
            (final, file.data, file.checksum, file.owner) for final, file in zip(finals, files, strict=True)
        ]
        results = await uninterrupted(blocking(posixcopy.stage_files, items), undo=_discard_made)
        return [
            self._staged_or_error(file, final, result)
            for file, final, result in zip(files, finals, results, strict=True)
        ]

    def _staged_or_error(
        self, file: SmallFile, final: Place, result: TempFile | posixcopy.Mismatch | OSError | None
    ) -> tuple[TempFile, Place] | TierdError:
        if isinstance(result, TempFile):
            return result, final
        if result is None:
            return self._root_missing()
        if isinstance(result, posixcopy.Mismatch):
            return mismatch(str(final.path), file.checksum, result.actual, result.how)
        return translate_oserror(result, "write", str(final.path))

    async def _whole(
        self,
        final: Place,
        reader: RangeReader,
        expected: str,
        progress: Progress | None,
        fn: Callable[[memoryview, int | None], T | None],
    ) -> T:
        """``fn(buffer, source fd or None)`` on the I/O pool, with the bytes in a budgeted buffer.

        ``fn`` returns None when the tier root is missing (TransientBackendError here).
        """
        where = str(final.path)
        fd = reader.fileno() if isinstance(reader, PosixReader) else -1
        source = fd if fd >= 0 else None  # a file read whole at open is read from memory
        async with self.budget.buffer(reader.size) as view:
            if source is None:
                await read_full(reader, 0, view, where=where)
            with os_errors("write", where):
                try:
                    result = await uninterrupted(blocking_on(view, fn, source), undo=_discard_made)
                except posixcopy.SourceEnded as exc:
                    raise _source_ended(where, exc.offset, reader.size) from None
                except posixcopy.Mismatch as exc:
                    raise mismatch(where, expected, exc.actual, exc.how) from None
        if result is None:
            raise self._root_missing()
        if progress is not None:
            progress(reader.size)
        return result

    def _may_have_leftovers(self, final: Place) -> bool:
        """Whether ``final``'s directory is not listed yet, or holds temporary names; never blocks."""
        names = self._leftovers.get(final.parts)
        return names is None or bool(names)

    async def _remove_leftovers(self, final: Place) -> None:
        """Remove abandoned temporary files of ``final``'s name (best effort, never raises)."""
        if (names := self._leftovers.get(final.parts)) is None:
            names = await blocking(_temp_names, final)
            self._leftovers[final.parts] = names
            while len(self._leftovers) > LISTED_DIRECTORIES:
                self._leftovers.popitem(last=False)
        stem = temp_stem(final.name)
        mine = {name for name in names if name.startswith(stem)}
        if not mine:
            return
        names -= mine
        removed = await blocking(_remove_abandoned, final, mine)
        if removed:
            log.info("abandoned_temp_files_removed", path=str(final.path), count=removed)

    async def _make_durable(self, temp: TempFile, where: str, expected: str) -> None:
        """Make the temp file durable; for ``verify: readback`` also re-read it and compare."""
        if not self.readback:
            with os_errors("write", str(temp.path)):
                await uninterrupted(blocking(os.fsync, temp.fd))
            return
        async with self.budget.buffer(HASH_BUFFER) as view:
            with os_errors("write", str(temp.path)):
                readback = await uninterrupted(blocking_on(view, posixcopy.fsync_and_hash, temp))
        if readback != expected:
            raise mismatch(where, expected, readback, "read-back")

    async def _fill(
        self,
        temp: TempFile,
        reader: RangeReader,
        where: str,
        expected: str,
        progress: Progress | None,
        kept: int = 0,
    ) -> None:
        """Fill the temp file but its first ``kept`` bytes (re-hashed instead), check the checksum.

        Raises IntegrityError on a mismatch. With ``O_DIRECT`` where ``io_mode`` says so, else
        through the page cache; where the tier refuses ``O_DIRECT``, in the kernel from a local
        file where it can.
        """
        wanted = self._direct and await self.io_mode.direct(self.tree, self.budget, self.chunk_size)
        if self.io_mode.refuses_direct:  # found by the probe
            self._refused()
        with os_errors("write", where):
            direct = await blocking(posixcopy.open_direct, temp) if wanted else -1
        if wanted and direct < 0:
            self._refused()
        try:
            refused = not self._direct  # O_DIRECT refused: copy in the kernel where it can
            if refused and isinstance(reader, PosixReader) and reader.device not in self._no_kernel_copy:
                try:
                    await self._fill_in_kernel(temp, reader, where, expected, progress, kept)
                    return
                except _KernelCopyRefused:
                    self._no_kernel_copy.add(reader.device)
                    log.info("kernel_copy_unavailable", tier=self.name, path=where)
            await self._fill_buffered(temp, reader, where, expected, progress, direct, kept)
        finally:
            if direct >= 0:
                await asyncio.shield(blocking(os.close, direct))

    async def _fill_in_kernel(
        self,
        temp: TempFile,
        reader: PosixReader,
        where: str,
        expected: str,
        progress: Progress | None,
        kept: int,
    ) -> None:
        """copy_file_range chunks in parallel, each read back and hashed; IntegrityError on a mismatch.

        Raises _KernelCopyRefused when the first chunk finds the files cannot be copied so.
        """
        first = True

        async def copy_chunk(offset: int, length: int) -> int:
            nonlocal first
            async with self.budget.buffer(HASH_BUFFER) as view:
                try:
                    crc = await uninterrupted(
                        blocking_on(view, posixcopy.kernel_copy, reader.fileno(), temp.fd, offset, length)
                    )
                except posixcopy.SourceEnded as exc:
                    raise _source_ended(where, exc.offset, reader.size) from None
                except OSError as exc:
                    if first and exc.errno in posixcopy.NO_KERNEL_COPY:
                        raise _KernelCopyRefused from exc
                    raise translate_oserror(exc, "write", where) from exc
            first = False
            return crc

        spans = self._spans(temp, reader.size, KERNEL_CHUNK_SIZE, kept, copy_chunk)
        await self._by_chunks(reader.size, spans, where, expected, progress)

    async def _fill_buffered(
        self,
        temp: TempFile,
        reader: RangeReader,
        where: str,
        expected: str,
        progress: Progress | None,
        direct: int,
        kept: int,
    ) -> None:
        """Read every chunk into a buffer, hash and pwrite it (through ``direct`` if >= 0), in parallel.

        Raises IntegrityError on a mismatch.
        """

        async def copy_chunk(offset: int, length: int) -> int:
            async with self.budget.aligned(self.chunk_size) as whole:
                with whole[:length] as view:
                    await read_full(reader, offset, view, where=where)
                    with os_errors("write", where):
                        return await self._write_chunk(view, temp.fd, direct, offset)

        spans = self._spans(temp, reader.size, self.chunk_size, kept, copy_chunk)
        await self._by_chunks(reader.size, spans, where, expected, progress)

    async def _write_chunk(self, view: memoryview, fd: int, direct: int, offset: int) -> int:
        """``hash_and_pwrite`` on the I/O pool, through the page cache once ``O_DIRECT`` was refused."""
        if direct >= 0 and self._direct:
            try:
                return await uninterrupted(blocking_on(view, posixcopy.hash_and_pwrite, fd, offset, direct))
            except posixcopy.DirectRefused:
                self._refused()
        return await uninterrupted(blocking_on(view, posixcopy.hash_and_pwrite, fd, offset))

    def _refused(self) -> None:
        """The tier's file system refused ``O_DIRECT``: the kernel's copy or the page cache from now on."""
        if self._direct:
            self._direct = False
            self.io_mode.refused()
            log.info("direct_io_unavailable", tier=self.name)

    def _spans(self, temp: TempFile, size: int, chunk: int, kept: int, copy_chunk: ChunkFn) -> Sequence[Span]:
        """The file's spans: chunks to copy from ``kept`` on, and the first ``kept`` bytes to re-hash.

        Interleaved, so re-reading the kept part from ``temp`` overlaps copying the rest. A
        kept chunk ending early is IntegrityError (the write starts over).
        """

        async def hash_chunk(offset: int, length: int) -> int:
            async with self.budget.aligned(self.chunk_size) as whole:
                with whole[:length] as view, os_errors("read back", str(temp.path)):
                    crc = await uninterrupted(blocking_on(view, posixresume.hash_span, temp.fd, offset))
            if crc is None:
                raise IntegrityError(f"{temp.path}: ended before byte {offset + length} it was to keep")
            return crc

        spans: list[Span] = [(off, min(chunk, size - off), copy_chunk) for off in range(kept, size, chunk)]
        step = self.chunk_size
        rehash: list[Span] = [(off, min(step, kept - off), hash_chunk) for off in range(0, kept, step)]
        return [span for pair in zip_longest(spans, rehash) for span in pair if span is not None]

    async def _by_chunks(
        self, size: int, spans: Sequence[Span], where: str, expected: str, progress: Progress | None
    ) -> None:
        """``fn(offset, length) -> CRC`` over every span, ``chunks_per_file`` at a time.

        Raises IntegrityError unless the spans' CRCs, in file order, combine to ``expected``.
        """
        crcs: dict[int, tuple[int, int]] = {}

        async def one(span: Span) -> None:
            offset, length, fn = span
            crcs[offset] = (await fn(offset, length), length)
            if progress is not None:
                progress(length)

        await for_each(spans, one, self.chunks_per_file)
        actual = checksum.encode(combine_all([crcs[offset] for offset in sorted(crcs)]))
        if actual != expected:
            raise mismatch(where, expected, actual, "source")


# Blocking helpers: each runs on the I/O pool via ``blocking``.


def _temp_names(final: Place) -> set[str]:
    """The temporary names in ``final``'s directory; none when it is missing or unreadable."""
    try:
        return temp_names_in(final.dir())
    except OSError:
        return set()


def _remove_abandoned(final: Place, names: set[str]) -> int:
    try:
        return remove_abandoned(final.dir(), names)
    except OSError:
        return 0


async def _discard_made(results: object) -> None:
    """Remove the temporary files (one, or in a sequence) made for a caller cancelled meanwhile."""
    staged = results if isinstance(results, Sequence) else [results]
    await blocking(discard_all, [result for result in staged if isinstance(result, TempFile)])


class _KernelCopyRefused(Exception):
    """copy_file_range cannot copy between these files: use buffers."""


def _source_ended(where: str, offset: int, size: int) -> IntegrityError:
    return IntegrityError(
        f"{where}: source ended at byte {offset}, expected {size} bytes (did the file shrink?)"
    )

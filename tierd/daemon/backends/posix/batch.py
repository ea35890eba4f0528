"""A hop's small files into a POSIX tier, made durable together as ``cp`` then ``sync`` would.

An fsync per file costs a journal commit each, and a checkpoint of thousands of small
files spends most of its hop waiting for them. A PosixBatch stages every file of one
chunk or less (hashed and written into a file with no name, ``posix.unnamed``, else under
its temporary name, so nothing partial is ever visible) and commits them together: one
``syncfs`` of the tier's file system, then the links or renames into place, then one fsync
per directory. ``write_whole`` stages a group of small files in one
trip to the I/O pool. Bigger files are written at once, as by
``PosixBackend.write``. A batch is ``full`` at ``MAX_FILES`` files or ``MAX_BYTES``
bytes, so a crash never loses more than that much copying.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import Backend, ObjectInfo, SmallFile, WriteBatch, WriteRequest
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix.errors import os_errors
from tierd.daemon.backends.posix.temp import TempFile, discard_all
from tierd.daemon.beneath import Place
from tierd.errors import TierdError

__all__ = ["MAX_BYTES", "MAX_FILES", "PosixBatch", "Stager"]

MAX_FILES = 1024
MAX_BYTES = 256 * 1024 * 1024


class Stager(Protocol):
    """What a batch asks of its ``PosixBackend`` beyond ``Backend`` (named here, not imported)."""

    @property
    def root(self) -> Path:
        """The tier's root directory."""

    @property
    def chunk_size(self) -> int:
        """Files up to this size are staged; bigger ones are written at once."""

    @property
    def readback(self) -> bool:
        """Whether the tier reads every file back (``verify: readback``): nothing is staged."""

    async def stage(self, request: WriteRequest) -> tuple[TempFile, Place]:
        """A file hashed and written under its temporary name, neither durable nor visible."""

    async def stage_many(self, files: Sequence[SmallFile]) -> Sequence[tuple[TempFile, Place] | TierdError]:
        """``stage`` for each file, in one trip to the I/O pool; each file's staging or error."""


class PosixBatch(WriteBatch):
    """Stages a hop's small files and commits them with one file-system sync."""

    def __init__(self, backend: Backend, stager: Stager) -> None:
        """``backend`` and ``stager`` are the same ``PosixBackend``, seen through its two roles."""
        super().__init__(backend)
        self.stager = stager
        self._staged: dict[str, tuple[TempFile, Place]] = {}
        self._committing: dict[str, tuple[TempFile, Place]] = {}  # taken by the commit under way
        self._bytes = 0
        self._commit_lock = asyncio.Lock()

    @property
    def full(self) -> bool:
        """At ``MAX_FILES`` staged files or ``MAX_BYTES`` staged bytes."""
        return len(self._staged) >= MAX_FILES or self._bytes >= MAX_BYTES

    def holds(self, relpath: str) -> bool:
        """Whether ``relpath`` is staged, or in the commit under way (not yet durable)."""
        return relpath in self._staged or relpath in self._committing

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Stage a file of one chunk; write anything bigger (or on a ``readback`` tier) at once."""
        tier, relpath, size = self.stager, request.relpath, request.reader.size
        if tier.readback or size > tier.chunk_size or relpath in self._staged:
            return await self.backend.write(request)
        self._staged[relpath] = await tier.stage(request)
        self._bytes += size
        return ObjectInfo(relpath, size, request.expected_checksum, None, "stream")

    async def write_whole(self, files: Sequence[SmallFile]) -> Sequence[ObjectInfo | TierdError]:
        """Stage every file of one chunk in one trip (``PosixBackend.stage_many``).

        On a ``readback`` tier, a file bigger than a chunk, or one staged already, goes
        through ``write`` on its own, which takes buffers from the budget: the pipeline's
        groups never send those (no groups into ``readback`` tiers; grouped files are at
        most 1 MiB, a chunk 8 MiB).
        """
        tier = self.stager
        if tier.readback:
            return await super().write_whole(files)
        together: list[SmallFile] = []
        alone: list[SmallFile] = []
        for file in files:
            big = len(file.data) > tier.chunk_size
            (alone if big or file.relpath in self._staged else together).append(file)
        results: dict[str, ObjectInfo | TierdError] = {}
        for file, staged in zip(together, await tier.stage_many(together), strict=True):
            if isinstance(staged, TierdError):
                results[file.relpath] = staged
                continue
            self._staged[file.relpath] = staged
            self._bytes += len(file.data)
            results[file.relpath] = ObjectInfo(file.relpath, len(file.data), file.checksum, None, "stream")
        for file, result in zip(alone, await super().write_whole(alone), strict=True):
            results[file.relpath] = result
        return [results[file.relpath] for file in files]

    async def commit(self) -> list[str]:
        """syncfs, link or rename, fsync each directory; on failure the files are dropped and it raises."""
        async with self._commit_lock:
            staged, self._staged, self._bytes = self._staged, {}, 0
            if not staged:
                return []
            self._committing = staged
            try:
                with os_errors("commit staged files under", str(self.stager.root)):
                    await blocking(posixcopy.commit_staged, list(staged.values()))
            except BaseException:
                await asyncio.shield(blocking(discard_all, [temp for temp, _ in staged.values()]))
                raise
            finally:
                self._committing = {}
            return list(staged)

    async def discard(self) -> None:
        """Remove every staged temporary file."""
        staged, self._staged, self._bytes = self._staged, {}, 0
        if staged:
            await blocking(discard_all, [temp for temp, _ in staged.values()])

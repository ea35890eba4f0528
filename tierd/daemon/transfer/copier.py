"""Copy one file between tiers: throttled, verified against the first-sight checksum, retried.

The destination backend's ``write`` streams the bytes with bounded memory, hashes them
while reading and refuses (IntegrityError, nothing under the final name) when they do
not match. On top of that this module adds the tier's bandwidth cap, a read-back hash
for ``verify: readback`` tiers whose write did not already read back, and retries with
backoff for retryable errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tierd.daemon.backends.base import (
    Backend,
    ObjectInfo,
    Progress,
    RangeReader,
    ResumeStore,
    SmallFile,
    WriteBatch,
    WriteRequest,
    copies_server_side,
)
from tierd.daemon.transfer.retry import Backoff, should_retry
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import PriorityPool, TokenBucket
from tierd.errors import IntegrityError, NotFound, TierdError
from tierd.logs import get_logger

__all__ = ["FileCopier", "ThrottledReader", "already_there", "confirm", "copy_file"]

log = get_logger(__name__)


class ThrottledReader:
    """A RangeReader that pays a token bucket for every byte it hands out."""

    def __init__(self, inner: RangeReader, bucket: TokenBucket | None, priority: int = 0) -> None:
        self._inner = inner
        self._bucket = bucket
        self._priority = priority
        self.size = inner.size

    async def read_into(self, offset: int, buf: memoryview) -> int:
        """Read from the source, then wait as long as the bandwidth cap requires."""
        n = await self._inner.read_into(offset, buf)
        if self._bucket is not None and n > 0:
            await self._bucket.take(n, self._priority)
        return n

    async def close(self) -> None:
        """Close the source."""
        await self._inner.close()


async def copy_file(
    src: Backend,
    dst: Backend,
    spec: FileSpec,
    *,
    resume: ResumeStore | None,
    bucket: TokenBucket | None,
    readback: bool,
    progress: Progress,
    priority: int = 0,
    batch: WriteBatch | None = None,
) -> ObjectInfo:
    """Copy ``spec`` from ``src`` to ``dst`` (server-side when the stores allow), verified, with its owner.

    With ``batch`` the write goes through it, and may be staged until ``batch.commit()``.

    Raises IntegrityError when the bytes differ from ``spec.checksum`` (the source
    changed or a store corrupted them), NotFound when the source is missing, and the
    backends' Transient/PermanentBackendError.
    """
    if copies_server_side(src, dst):
        method = "server-side"
        info = await dst.copy_from(src, spec.relpath, spec.relpath, spec.checksum, owner=spec.owner)
        progress(info.size)
    else:
        method = "streamed"
        reader = await src.open_reader(spec.relpath)
        try:
            if reader.size != spec.size:
                raise IntegrityError(
                    f"{src.location(spec.relpath)}: size {reader.size} != {spec.size} recorded at first sight"
                )
            # Unwrapped without a cap, so a backend can see its own reader (a kernel-side copy).
            source = reader if bucket is None else ThrottledReader(reader, bucket, priority)
            writer = dst if batch is None else batch
            info = await writer.write(
                WriteRequest(
                    spec.relpath, source, spec.checksum, resume=resume, progress=progress, owner=spec.owner
                )
            )
        finally:
            await asyncio.shield(reader.close())
    info = await confirm(dst, spec, info, readback)
    log.debug(
        "file_copied", tier=dst.name, relpath=spec.relpath, size=spec.size, method=method, by=info.verified_by
    )
    return info


def _settled(spec: FileSpec, info: ObjectInfo, readback: bool) -> bool:
    """Whether ``confirm`` has nothing to do: checked as the tier asks, against the first-sight checksum."""
    checked = info.verified_by == "readback" if readback else info.verified_by is not None
    return checked and info.checksum == spec.checksum


async def confirm(dst: Backend, spec: FileSpec, info: ObjectInfo, readback: bool) -> ObjectInfo:
    """Make sure the stored bytes were checked; read back when the tier asks for it."""
    if _settled(spec, info, readback):
        return info
    if readback and info.verified_by != "readback":
        actual = await dst.hash(spec.relpath)
        if actual != spec.checksum:
            await dst.delete(spec.relpath)  # a corrupt copy must not stay under the final name
            raise IntegrityError(
                f"{dst.location(spec.relpath)}: read-back CRC64NVME {actual} != expected {spec.checksum}"
            )
        return ObjectInfo(info.relpath, info.size, actual, info.mtime, "readback")
    if info.verified_by is None:
        info = await dst.verify(spec.relpath, spec.checksum)
    if info.checksum != spec.checksum:
        raise IntegrityError(
            f"{dst.location(spec.relpath)}: stored checksum {info.checksum} != {spec.checksum}"
        )
    return info


async def already_there(dst: Backend, spec: FileSpec, recorded_done: bool) -> bool:
    """Whether ``dst`` already holds this file from an earlier, interrupted run of the hop.

    A file the job recorded as finished needs only its size checked. Any other (one an
    earlier run finished while the catalog could not record it) must prove its bytes: by
    the checksum the store validated on upload, else read back and hashed (a POSIX tier;
    reading costs less than writing and syncing it again). Raises what ``stat`` and
    ``hash`` raise but NotFound.
    """
    try:
        info = await dst.stat(spec.relpath)
    except NotFound:
        return False
    if info.size != spec.size:
        return False
    if recorded_done or info.checksum == spec.checksum:
        return True
    if info.checksum is not None:  # the store vouches for other bytes
        return False
    try:
        return await dst.hash(spec.relpath) == spec.checksum
    except NotFound:
        return False


@dataclass
class FileCopier:
    """Copies the files of one hop with retries, holding a tier slot only while copying."""

    src: Backend
    dst: Backend
    slots: PriorityPool
    priority: int
    resume: ResumeStore | None
    bucket: TokenBucket | None
    readback: bool
    backoff: Backoff
    attempts: int
    integrity_attempts: int
    batch: WriteBatch | None = None

    async def copy(
        self, spec: FileSpec, progress: Callable[[int | None], None], *, failed: TierdError | None = None
    ) -> ObjectInfo:
        """Copy ``spec``; ``progress(n)`` counts bytes, ``progress(None)`` restarts the count.

        ``failed`` is the error of the attempt a group made at this file: it counts as the
        first try. Returns the verified write (staged until ``batch.commit()`` where
        ``batch.holds`` it). Raises the last error once retries are exhausted or the error
        is not retryable.
        """
        tries = integrity = 0
        if failed is not None:
            tries, integrity = 1, int(isinstance(failed, IntegrityError))
            await self._retry_after(spec, failed, tries, integrity)
        while True:
            tries += 1
            progress(None)
            try:
                async with self.slots.hold(1, self.priority):
                    return await copy_file(
                        self.src,
                        self.dst,
                        spec,
                        resume=self.resume,
                        bucket=self.bucket,
                        readback=self.readback,
                        progress=progress,
                        priority=self.priority,
                        batch=self.batch,
                    )
            except Exception as exc:
                integrity += isinstance(exc, IntegrityError)
                await self._retry_after(spec, exc, tries, integrity)

    async def _retry_after(self, spec: FileSpec, exc: Exception, tries: int, integrity: int) -> None:
        """Wait out the backoff before the next try; raises ``exc`` when there is none."""
        if not should_retry(exc, tries, integrity, attempts=self.attempts, integrity=self.integrity_attempts):
            raise exc
        delay = self.backoff.delay(tries - 1)
        log.warning("file_retry", tier=self.dst.name, relpath=spec.relpath, error=str(exc), delay=delay)
        await asyncio.sleep(delay)

    @property
    def groups_small_files(self) -> bool:
        """Whether ``copy_group`` applies: not into a ``readback`` tier, nor server-side."""
        return not self.readback and not copies_server_side(self.src, self.dst)

    async def copy_group(self, specs: Sequence[FileSpec]) -> list[ObjectInfo | TierdError]:
        """One attempt at copying small files together; each file's verified write or error.

        Holds one tier slot, and a budgeted buffer with the files' bytes, from the read to
        the write. Returns in the order of ``specs``; a write may be staged as by ``copy``.
        """
        size = _group_buffer_size(sum(spec.size for spec in specs))
        async with self.slots.hold(1, self.priority), self.dst.budget.aligned(size) as buffer:
            results = await self._read_and_write(specs, buffer)
        for index, (spec, result) in enumerate(zip(specs, results, strict=True)):
            # a file settled as it was written takes no ``confirm`` coroutine
            if isinstance(result, ObjectInfo) and not _settled(spec, result, self.readback):
                try:
                    results[index] = await confirm(self.dst, spec, result, self.readback)
                except TierdError as exc:
                    results[index] = exc
        log.debug("files_copied", tier=self.dst.name, files=len(specs), method="group")
        return results

    async def _read_and_write(
        self, specs: Sequence[FileSpec], buffer: memoryview
    ) -> list[ObjectInfo | TierdError]:
        """Read ``specs`` whole into ``buffer``, one after another, and write them through the batch."""
        views: list[memoryview] = []
        offset = 0
        for spec in specs:
            views.append(buffer[offset : offset + spec.size])
            offset += spec.size
        read = await self.src.read_whole([spec.relpath for spec in specs], views)
        results: list[ObjectInfo | TierdError | None] = list(read)  # None: to be written
        files = [
            SmallFile(spec.relpath, view, spec.checksum, spec.owner)
            for spec, view, error in zip(specs, views, read, strict=True)
            if error is None
        ]
        if self.bucket is not None and files:
            await self.bucket.take(sum(len(file.data) for file in files), self.priority)
        writer = self.batch if self.batch is not None else WriteBatch(self.dst)
        written = iter(await writer.write_whole(files))
        return [next(written) if result is None else result for result in results]


def _group_buffer_size(nbytes: int) -> int:
    """A power of two of at least 64 KiB, so that groups' buffers are reused."""
    return max(64 * 1024, 1 << max(0, nbytes - 1).bit_length())

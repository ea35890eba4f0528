"""S3 multipart uploads: parallel parts, bounded memory, resumable, full-object CRC64NVME.

Part size is ``max(configured, ceil(size / 9000) rounded up to a MiB)`` so no object needs
more than 9,000 of S3's 10,000 parts. A part no bigger than ``buffered_part_limit`` is
read into a budgeted buffer and hashed before it is sent, with its CRC64NVME in the
request so the store validates it. A bigger part (huge objects grow the part size past
what memory allows) is streamed from the reader in budgeted chunks and hashed on the
way; the store then validates it through the full-object CRC64NVME sent with
CompleteMultipartUpload (``ChecksumType=FULL_OBJECT``). Part CRCs are combined, never
recomputed, so a resumed upload reads only its missing parts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierd.daemon import checksum
from tierd.daemon.backends.base import (
    PartState,
    Progress,
    RangeReader,
    ResumeStore,
    UploadState,
    mismatch,
)
from tierd.daemon.backends.s3errors import s3_errors
from tierd.daemon.backends.transfer import (
    MIB,
    ByteBudget,
    combine_all,
    crc64,
    for_each,
    read_full,
)
from tierd.errors import (
    IntegrityError,
    NotFound,
    PermanentBackendError,
    TierdError,
    TransientBackendError,
)
from tierd.logs import get_logger

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import CopySourceTypeDef

__all__ = [
    "MAX_PARTS",
    "TARGET_PARTS",
    "BufferBody",
    "Multipart",
    "StreamBody",
    "TransferSettings",
    "UploadVanished",
    "part_count",
    "part_size_for",
]

log = get_logger(__name__)

MIN_PART = 5 * MIB
MAX_PART = 5 * 1024 * MIB
MAX_PARTS = 10_000
TARGET_PARTS = 9_000
SEND_SLICE = 1 * MIB  # what the HTTP writer gets at a time (it drains between slices)


def part_size_for(size: int, configured: int) -> int:
    """The part size for an object of ``size`` bytes: never more than 9,000 parts."""
    needed = -(-size // TARGET_PARTS)
    needed = -(-needed // MIB) * MIB
    return min(MAX_PART, max(configured, MIN_PART, needed))


def part_count(size: int, part_size: int) -> int:
    """How many parts ``size`` bytes take (at least one)."""
    return max(1, -(-size // part_size))


@dataclass(frozen=True)
class TransferSettings:
    """How an S3 backend moves bytes."""

    part_size: int
    concurrency: int
    budget: ByteBudget
    buffered_part_limit: int
    chunk_size: int
    copy_part_size: int


class UploadVanished(TransientBackendError):
    """The multipart upload is gone; the next attempt starts over.

    A lifecycle rule or a cleanup aborted it, or an earlier attempt completed it and its
    answer was lost.
    """


@contextmanager
def _upload_must_exist() -> Iterator[None]:
    try:
        yield
    except NotFound as exc:  # NoSuchUpload
        raise UploadVanished(str(exc)) from exc


class BufferBody:
    """An upload body over a filled buffer, handed out in slices (re-iterable on retry)."""

    def __init__(self, view: memoryview) -> None:
        self._view = view

    def __len__(self) -> int:
        return len(self._view)

    def read(self, *_: object) -> bytes:
        """Never called: botocore only checks that a body has ``read``; aiohttp iterates."""
        raise TypeError("async-only body")

    def seek(self, *_: object) -> None:
        """Called by botocore before a retry; each iteration starts at byte 0 anyway."""

    def __aiter__(self) -> AsyncIterator[memoryview]:
        return self._slices()

    async def _slices(self) -> AsyncIterator[memoryview]:
        for start in range(0, len(self._view), SEND_SLICE):
            yield self._view[start : start + SEND_SLICE]


class StreamBody(BufferBody):
    """An upload body read from the source chunk by chunk and hashed on the way.

    Each pass holds one chunk of the budget at a time. A retry starts a new pass; the
    abandoned pass's chunk is handed back to the budget at once rather than when the
    garbage collector finalises its generator, so retries can never exhaust the budget.
    """

    def __init__(
        self, reader: RangeReader, offset: int, length: int, settings: TransferSettings, where: str
    ) -> None:
        super().__init__(memoryview(b""))
        self._reader, self._offset, self._length = reader, offset, length
        self._settings, self._where = settings, where
        self._crc: int | None = None
        self._pass = 0
        self._held = 0

    def __len__(self) -> int:
        return self._length

    def seek(self, *_: object) -> None:
        """A retry re-reads and re-hashes from the start of the part."""
        self._crc = None

    def __aiter__(self) -> AsyncGenerator[memoryview, None]:
        self._pass += 1
        self._give_back()
        return self._chunks(self._pass)

    def _give_back(self) -> None:
        held, self._held = self._held, 0
        if held:
            self._settings.budget.release(held)

    async def _chunks(self, this_pass: int) -> AsyncGenerator[memoryview, None]:
        crc, pos = 0, 0
        while pos < self._length:
            length = min(self._settings.chunk_size, self._length - pos)
            taken = await self._settings.budget.acquire(length)
            if this_pass != self._pass:  # superseded while waiting
                self._settings.budget.release(taken)
                return
            self._held = taken
            try:
                # A fresh buffer per chunk: the transport may still hold the last one's slices.
                view = memoryview(bytearray(length))
                await read_full(self._reader, self._offset + pos, view, where=self._where)
                crc = await crc64(view, crc)
                for start in range(0, length, SEND_SLICE):
                    yield view[start : start + SEND_SLICE]
            finally:
                if this_pass == self._pass:
                    self._give_back()
            pos += length
        self._crc = crc

    def checksum(self) -> str:
        """The CRC64NVME of the bytes sent by the last complete pass."""
        if self._crc is None:
            raise PermanentBackendError(f"{self._where}: the store answered before the part was sent")
        return checksum.encode(self._crc)


class Multipart:
    """Multipart operations on one key."""

    def __init__(self, client: S3Client, bucket: str, key: str, settings: TransferSettings) -> None:
        self.client, self.bucket, self.key, self.settings = client, bucket, key, settings
        self.location = f"s3://{bucket}/{key}"

    async def write(
        self,
        relpath: str,
        reader: RangeReader,
        expected: str,
        resume: ResumeStore | None,
        progress: Progress | None,
    ) -> None:
        """Upload ``reader`` as a multipart object, resuming what ``resume`` recorded.

        Raises IntegrityError (after aborting the upload) when the parts' combined CRC
        differs from ``expected``; UploadVanished (a TransientBackendError) when the
        store lost the upload meanwhile (the next attempt starts over). On other failures the
        upload is kept for a later resume when ``resume`` is given, else aborted.
        """
        state, done = await self._start(relpath, reader.size, resume)
        try:
            parts = await self._upload_missing(relpath, state, done, reader, resume, progress)
            combined = checksum.encode(combine_all([(checksum.decode(p.checksum), p.size) for p in parts]))
            if combined != expected:
                raise mismatch(self.location, expected, combined, "source")
            try:
                await self._complete(state.upload_id, parts, combined)
            except NotFound as exc:  # aborted meanwhile, or completed by an attempt whose answer was lost
                if resume is not None:
                    await resume.clear(relpath)
                raise TransientBackendError(
                    f"{self.location}: the upload vanished before completion"
                ) from exc
        except BaseException as exc:
            if resume is None or isinstance(exc, IntegrityError):
                await asyncio.shield(self._give_up(relpath, state, resume))
            raise
        if resume is not None:
            await resume.clear(relpath)

    async def _start(
        self, relpath: str, size: int, resume: ResumeStore | None
    ) -> tuple[UploadState, dict[int, PartState]]:
        """Resume the recorded upload if the store still has it, else begin a new one."""
        if resume is not None:
            previous = await resume.load(relpath)
            if previous is not None:
                done = await self._reusable_parts(previous, size)
                if done is not None:
                    return previous, done
                await resume.clear(relpath)
        with s3_errors("start upload", self.location):
            response = await self.client.create_multipart_upload(
                Bucket=self.bucket, Key=self.key, ChecksumAlgorithm="CRC64NVME", ChecksumType="FULL_OBJECT"
            )
        part_size = part_size_for(size, self.settings.part_size)
        state = UploadState(response["UploadId"], self.key, part_size, size)
        if resume is not None:
            await resume.begin(relpath, state)
        return state, {}

    async def _reusable_parts(self, state: UploadState, size: int) -> dict[int, PartState] | None:
        """The recorded parts the store really holds (ListParts), or None to start over."""
        if state.key != self.key or state.size != size or part_count(size, state.part_size) > MAX_PARTS:
            await self._abort_quietly(state.key, state.upload_id)
            return None
        try:
            held = await self.list_parts(state.upload_id)
        except NotFound:
            return None  # aborted or expired: start over
        reusable = {}
        for part in state.parts:
            length = min(state.part_size, size - (part.part_number - 1) * state.part_size)
            if part.size == length and held.get(part.part_number) == (part.size, part.etag):
                reusable[part.part_number] = part
        return reusable

    async def list_parts(self, upload_id: str) -> dict[int, tuple[int, str]]:
        """{part number: (size, etag)} of what the store holds. NotFound if the upload is gone."""
        held: dict[int, tuple[int, str]] = {}
        marker = 0
        while True:
            with s3_errors("list parts of", self.location):
                page = await self.client.list_parts(
                    Bucket=self.bucket, Key=self.key, UploadId=upload_id, PartNumberMarker=marker
                )
            for part in page.get("Parts", []):
                held[part["PartNumber"]] = (part["Size"], part["ETag"].strip('"'))
            if not page.get("IsTruncated") or not page.get("NextPartNumberMarker"):
                return held
            marker = page["NextPartNumberMarker"]

    async def _upload_missing(
        self,
        relpath: str,
        state: UploadState,
        done: dict[int, PartState],
        reader: RangeReader,
        resume: ResumeStore | None,
        progress: Progress | None,
    ) -> list[PartState]:
        count = part_count(state.size, state.part_size)
        results = dict(done)
        if progress is not None and done:
            progress(sum(p.size for p in done.values()))

        async def send(number: int) -> None:
            part = await self._upload_part(state, number, reader)
            results[number] = part
            if resume is not None:
                await resume.part_done(relpath, part)
            if progress is not None:
                progress(part.size)

        todo = [n for n in range(1, count + 1) if n not in done]
        await for_each(todo, send, self.settings.concurrency)
        return [results[n] for n in range(1, count + 1)]

    async def _upload_part(self, state: UploadState, number: int, reader: RangeReader) -> PartState:
        offset = (number - 1) * state.part_size
        length = min(state.part_size, state.size - offset)
        where = f"{self.location} part {number}"
        if length <= self.settings.buffered_part_limit:
            async with self.settings.budget.buffer(length) as view:
                await read_full(reader, offset, view, where=where)
                crc = checksum.encode(await crc64(view))
                etag = await self._send_part(state.upload_id, number, BufferBody(view), crc)
            return PartState(number, length, etag, crc)
        body = StreamBody(reader, offset, length, self.settings, where)
        etag = await self._send_part(state.upload_id, number, body, None)
        return PartState(number, length, etag, body.checksum())

    async def _send_part(self, upload_id: str, number: int, body: BufferBody, crc: str | None) -> str:
        extra: dict[str, Any] = {}
        if crc is not None:
            extra = {"ChecksumAlgorithm": "CRC64NVME", "ChecksumCRC64NVME": crc}
        with _upload_must_exist(), s3_errors(f"upload part {number} of", self.location):
            response = await self.client.upload_part(
                Bucket=self.bucket,
                Key=self.key,
                UploadId=upload_id,
                PartNumber=number,
                Body=body,  # type: ignore[arg-type]
                ContentLength=len(body),
                **extra,
            )
        return response["ETag"].strip('"')

    async def _complete(self, upload_id: str, parts: Sequence[PartState], full: str) -> None:
        listing: list[dict[str, Any]] = [{"PartNumber": p.part_number, "ETag": f'"{p.etag}"'} for p in parts]
        with _upload_must_exist(), s3_errors("complete upload of", self.location):
            await self.client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=self.key,
                UploadId=upload_id,
                MultipartUpload={"Parts": listing},  # type: ignore[typeddict-item]
                ChecksumCRC64NVME=full,
                ChecksumType="FULL_OBJECT",
            )

    async def _give_up(self, relpath: str, state: UploadState, resume: ResumeStore | None) -> None:
        await self._abort_quietly(state.key, state.upload_id)
        if resume is not None:
            await resume.clear(relpath)

    async def abort(self, key: str, upload_id: str) -> None:
        """Abort an upload; one already gone is fine. Raises Transient/PermanentBackendError."""
        try:
            with s3_errors("abort upload of", f"s3://{self.bucket}/{key}"):
                await self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except NotFound:
            pass

    async def _abort_quietly(self, key: str, upload_id: str) -> None:
        try:
            await self.abort(key, upload_id)
        except TierdError as exc:  # abort_stale_uploads will get it later
            log.warning("abort_failed", location=self.location, upload_id=upload_id, error=str(exc))

    async def copy(self, source: CopySourceTypeDef, size: int, expected: str) -> None:
        """Server-side multipart copy (UploadPartCopy), the store validating ``expected``.

        Raises PermanentBackendError when the store does not support it.
        """
        part_size = part_size_for(size, self.settings.copy_part_size)
        with s3_errors("start copy to", self.location):
            response = await self.client.create_multipart_upload(
                Bucket=self.bucket, Key=self.key, ChecksumAlgorithm="CRC64NVME", ChecksumType="FULL_OBJECT"
            )
        state = UploadState(response["UploadId"], self.key, part_size, size)
        parts: dict[int, PartState] = {}

        async def copy_part(number: int) -> None:
            first = (number - 1) * part_size
            last = min(size, first + part_size) - 1
            with s3_errors(f"copy part {number} to", self.location):
                result = await self.client.upload_part_copy(
                    Bucket=self.bucket,
                    Key=self.key,
                    UploadId=state.upload_id,
                    PartNumber=number,
                    CopySource=source,
                    CopySourceRange=f"bytes={first}-{last}",
                )
            etag = result.get("CopyPartResult", {}).get("ETag")
            if not etag:
                raise PermanentBackendError(f"{self.location}: the store returned no ETag for a copied part")
            parts[number] = PartState(number, last - first + 1, etag.strip('"'), "")

        try:
            await for_each(range(1, part_count(size, part_size) + 1), copy_part, self.settings.concurrency)
            await self._complete(state.upload_id, [parts[n] for n in sorted(parts)], expected)
        except BaseException:
            await asyncio.shield(self._abort_quietly(self.key, state.upload_id))
            raise

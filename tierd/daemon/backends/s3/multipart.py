"""S3 multipart uploads: parallel parts, bounded memory, resumable, full-object CRC64NVME.

Part size is ``max(configured, ceil(size / 9000) rounded up to a MiB)`` so no object needs
more than 9,000 of S3's 10,000 parts. A part no bigger than ``buffered_part_limit`` is
read into a budgeted (aligned: ``s3.bodies``) buffer and hashed before it is sent, with its CRC64NVME in the
request so the store validates it. A bigger part (huge objects grow the part size past
what memory allows) is streamed from the reader in budgeted chunks and hashed on the
way; the store then validates it through the full-object CRC64NVME sent with
CompleteMultipartUpload (``ChecksumType=FULL_OBJECT``). Part CRCs are combined, never
recomputed, so a resumed upload reads only its missing parts. The request bodies, and why
they are aiohttp payloads, are in ``s3.bodies``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tierd.daemon import checksum
from tierd.daemon.backends.base import (
    Progress,
    RangeReader,
    ResumeStore,
    WriteRequest,
    mismatch,
    read_full,
)
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.hashing import combine_all, crc64
from tierd.daemon.backends.s3.bodies import BufferBody, StreamBody, TransferSettings
from tierd.daemon.backends.s3.errors import s3_errors
from tierd.daemon.backends.uploads import PartState, UploadState
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


def part_size_for(size: int, configured: int) -> int:
    """The part size for an object of ``size`` bytes: never more than 9,000 parts."""
    needed = -(-size // TARGET_PARTS)
    needed = -(-needed // MIB) * MIB
    return min(MAX_PART, max(configured, MIN_PART, needed))


def part_count(size: int, part_size: int) -> int:
    """How many parts ``size`` bytes take (at least one)."""
    return max(1, -(-size // part_size))


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


class Multipart:
    """Multipart operations on one key.

    ``active`` is the backend's set of UploadIds being written: an upload is in it from
    the moment the store hands out (or the resume store recalls) its UploadId until the
    write or copy ends, so the stale-upload sweep leaves it alone. ``metadata`` (user
    metadata: the file's owner and mode, ``backends.ownermeta``) goes with the upload's creation.
    """

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        settings: TransferSettings,
        active: set[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        placement: Mapping[str, str] | None = None,
    ) -> None:
        """``placement``: the tier's storage class and encryption (``s3.placement``), sent on creation."""
        self.client, self.bucket, self.key, self.settings = client, bucket, key, settings
        self.metadata = dict(metadata or {})
        self.placement = dict(placement or {})
        self.location = f"s3://{bucket}/{key}"
        self.active = set() if active is None else active
        self._claimed: set[str] = set()

    def _claim(self, upload_id: str) -> None:
        self._claimed.add(upload_id)
        self.active.add(upload_id)

    def _unclaim(self) -> None:
        self.active.difference_update(self._claimed)
        self._claimed.clear()

    async def _create(self, action: str) -> str:
        """CreateMultipartUpload; the new UploadId is claimed before anything else runs."""
        with s3_errors(action, self.location):
            response = await self.client.create_multipart_upload(
                Bucket=self.bucket,
                Key=self.key,
                ChecksumAlgorithm="CRC64NVME",
                ChecksumType="FULL_OBJECT",
                Metadata=self.metadata,
                **self.placement,  # type: ignore[arg-type]
            )
        self._claim(response["UploadId"])
        return response["UploadId"]

    async def write(self, request: WriteRequest) -> None:
        """Upload the request's reader as a multipart object, resuming what its ``resume`` recorded.

        Raises IntegrityError (after aborting the upload) when the parts' combined CRC
        differs from ``expected_checksum``; UploadVanished (a TransientBackendError) when the
        store lost the upload meanwhile (the next attempt starts over). A PermanentBackendError
        (the store refused a request) aborts the upload too. On other failures the upload is
        kept for a later resume when ``resume`` is given, else aborted.
        """
        try:
            await self._write(
                request.relpath, request.reader, request.expected_checksum, request.resume, request.progress
            )
        finally:
            self._unclaim()

    async def _write(
        self,
        relpath: str,
        reader: RangeReader,
        expected: str,
        resume: ResumeStore | None,
        progress: Progress | None,
    ) -> None:
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
            # a refusal fails the job for good, and the catalog then forgets the upload
            if resume is None or isinstance(exc, IntegrityError | PermanentBackendError):
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
                self._claim(previous.upload_id)
                done = await self._reusable_parts(previous, size)
                if done is not None:
                    return previous, done
                await resume.clear(relpath)
        upload_id = await self._create("start upload")
        part_size = part_size_for(size, self.settings.part_size)
        state = UploadState(upload_id, self.key, part_size, size)
        if resume is not None:
            try:
                await resume.begin(relpath, state)
            except BaseException:
                # Not recorded, so no later attempt would resume it: nothing must hold it open.
                await asyncio.shield(self._abort_quietly(self.key, upload_id))
                raise
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
            async with self.settings.budget.aligned(length) as view:
                await read_full(reader, offset, view, where=where)
                crc = checksum.encode(await crc64(view))
                etag = await self._send_part(state.upload_id, number, BufferBody(view), crc)
            return PartState(number, length, etag, crc)
        body = StreamBody(reader, offset, length, self.settings, where)
        etag = await self._send_part(state.upload_id, number, body, None)
        return PartState(number, length, etag, body.checksum())

    async def _send_part(
        self, upload_id: str, number: int, body: BufferBody | StreamBody, crc: str | None
    ) -> str:
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
        state = UploadState(await self._create("start copy to"), self.key, part_size, size)
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
        finally:
            self._unclaim()

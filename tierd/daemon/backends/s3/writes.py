"""Writing into an S3 tier: ``write`` and server-side ``copy_from``, each verified, for ``S3Backend``.

A small object goes up in one PutObject with its CRC64NVME (and a Content-MD5 up to
``MD5_LIMIT``), a bigger one as a multipart upload (``s3.multipart``); a copy between two
tiers of one store is a CopyObject (or UploadPartCopy). Each is then verified
(``_verify_written``; the backend's module docstring says how), and what does not match is
deleted. ``S3Backend`` inherits these from ``S3Writes``, which declares what it takes from
the backend.
"""

from __future__ import annotations

import base64
import hashlib
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierd.config import S3Tier
from tierd.daemon import checksum
from tierd.daemon.backends.base import (
    Backend,
    BytesReader,
    ObjectInfo,
    Ownership,
    RangeReader,
    WriteRequest,
    mismatch,
    read_full,
)
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.hashing import crc64
from tierd.daemon.backends.ownermeta import owner_metadata
from tierd.daemon.backends.s3.bodies import BufferBody, TransferSettings
from tierd.daemon.backends.s3.errors import s3_errors
from tierd.daemon.backends.s3.fast.lean import LeanRequests
from tierd.daemon.backends.s3.multipart import Multipart
from tierd.daemon.backends.s3.placement import placement_headers, placement_params
from tierd.errors import IntegrityError, TierdError
from tierd.logs import get_logger

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import CopySourceTypeDef

__all__ = ["HASH_CHUNK", "MD5_LIMIT", "PutAnswer", "S3Writes"]

log = get_logger(__name__)

HASH_CHUNK = 1 * MIB
# Up to this size a PutObject carries a Content-MD5: MD5 costs less than the HeadObject it spares.
MD5_LIMIT = 256 * 1024


class S3Writes(Backend):
    """The writes of an S3 tier; ``S3Backend`` gives it the client, the keys and the settings."""

    tier: S3Tier
    bucket: str
    settings: TransferSettings
    copy_object_limit: int
    _active_uploads: set[str]  # UploadIds this backend is writing to now

    @abstractmethod
    async def client(self) -> S3Client:
        """The shared aiobotocore client, opened on first use."""

    @abstractmethod
    def _key(self, relpath: str) -> str:
        """The object key of ``relpath``; PermanentBackendError for one S3 would refuse."""

    @abstractmethod
    def location_of_key(self, key: str) -> str:
        """``s3://bucket/key``."""

    @abstractmethod
    def _lean_for(self) -> LeanRequests | None:
        """The lean way to this bucket, once botocore has shown where it is."""

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Upload and verify (see the module docstring).

        The request's ``owner`` goes with the object as user metadata (``backends.ownermeta``:
        PutObject, or the multipart upload's creation; a resumed upload keeps what it was
        created with). With its ``resume``, an interrupted multipart upload is picked up where
        it stopped. Raises IntegrityError when the bytes read, or what the store holds, do not
        match ``expected_checksum`` (nothing is left under the key: an upload is aborted, a
        completed object deleted), TransientBackendError (network, throttling, 5xx) or
        PermanentBackendError (access denied, no such bucket, other 4xx).
        """
        relpath, reader, expected, owner = (
            request.relpath,
            request.reader,
            request.expected_checksum,
            request.owner,
        )
        key = self._key(relpath)
        size = reader.size
        metadata = owner_metadata(owner)
        if size <= min(self.settings.part_size, self.settings.buffered_part_limit):
            answer = await self._put_small(key, reader, expected, metadata)
            if request.progress is not None:
                request.progress(size)
            return await self._verify_written(relpath, expected, size, answer, owner)
        upload = self._multipart(await self.client(), key, metadata)
        await upload.write(request)
        return await self._verify_written(relpath, expected, size)

    async def _put_small(
        self, key: str, reader: RangeReader, expected: str, metadata: Mapping[str, str]
    ) -> PutAnswer:
        """PutObject with the CRC64NVME (and Content-MD5 up to ``MD5_LIMIT``); what the answer vouches for.

        A BytesReader's bytes go as they are: in memory already, and charged to the budget
        by whoever read them.
        """
        if isinstance(reader, BytesReader):
            return await self._put_buffer(key, memoryview(reader.data), expected, metadata)
        async with self.settings.budget.buffer(reader.size) as view:
            await read_full(reader, 0, view, where=self.location_of_key(key))
            return await self._put_buffer(key, view, expected, metadata)

    async def _put_buffer(
        self, key: str, view: memoryview, expected: str, metadata: Mapping[str, str]
    ) -> PutAnswer:
        """PutObject of ``view`` once its CRC64NVME is the expected one (IntegrityError if not)."""
        location = self.location_of_key(key)
        actual = checksum.encode(await crc64(view))
        if actual != expected:
            raise mismatch(location, expected, actual, "source")
        md5 = hashlib.md5(view, usedforsecurity=False).digest() if len(view) <= MD5_LIMIT else None
        with s3_errors("put", location):
            answer = await self._put(key, view, actual, md5, metadata)
        etag = str(answer.get("ETag", "")).strip('"')
        return PutAnswer(answer.get("ChecksumCRC64NVME"), md5 is not None and etag == md5.hex())

    async def _put(
        self, key: str, view: memoryview, crc: str, md5: bytes | None, metadata: Mapping[str, str]
    ) -> Mapping[str, Any]:
        """One PutObject, the lean way when it can go that way; the answer's fields."""
        content_md5 = base64.b64encode(md5).decode() if md5 is not None else None
        if len(view) <= HASH_CHUNK and (lean := self._lean_for()) is not None:
            placement = placement_headers(self.tier)
            answer = await lean.put(self.bucket, key, bytes(view), crc, content_md5, metadata, placement)
            if answer is not None:
                return answer
        client = await self.client()
        extra = {"ContentMD5": content_md5} if content_md5 is not None else {}
        return await client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=bytes(view) if len(view) <= HASH_CHUNK else BufferBody(view),  # type: ignore[arg-type]
            ContentLength=len(view),
            ChecksumAlgorithm="CRC64NVME",
            ChecksumCRC64NVME=crc,
            Metadata=dict(metadata),
            **extra,  # type: ignore[arg-type]
            **placement_params(self.tier),  # type: ignore[arg-type]
        )

    def _multipart(self, client: S3Client, key: str, metadata: Mapping[str, str]) -> Multipart:
        """A multipart upload (or copy) to ``key``, created with the tier's class and encryption."""
        placement = placement_params(self.tier)
        return Multipart(client, self.bucket, key, self.settings, self._active_uploads, metadata, placement)

    async def _verify_written(
        self,
        relpath: str,
        expected: str,
        size: int,
        answer: PutAnswer | None = None,
        owner: Ownership | None = None,
    ) -> ObjectInfo:
        """``verify``, plus the size; on a mismatch delete what was just stored.

        With ``verify: native`` the store's answer to a PutObject is its word, as
        HeadObject's would be, and no HeadObject follows when it vouches for the bytes
        (the ObjectInfo then says the ``owner`` that was sent).
        """
        try:
            if answer is not None and self.tier.verify == "native":
                if answer.crc64nvme is not None and answer.crc64nvme != expected:
                    raise mismatch(self.location(relpath), expected, answer.crc64nvme, "store-reported")
                if answer.crc64nvme is not None or answer.md5_confirmed:
                    return ObjectInfo(relpath, size, expected, None, "store", owner)
            info = await self.verify(relpath, expected)
            if info.size != size:
                raise IntegrityError(f"{self.location(relpath)}: stored {info.size} bytes, sent {size}")
        except IntegrityError:
            try:
                await self.delete(relpath)
            except TierdError as exc:
                log.warning("delete_after_mismatch_failed", location=self.location(relpath), error=str(exc))
            raise
        return info

    async def copy_from(
        self,
        src: Backend,
        src_relpath: str,
        dst_relpath: str,
        expected_checksum: str,
        *,
        owner: Ownership | None = None,
    ) -> ObjectInfo:
        """CopyObject (UploadPartCopy past ``copy_object_limit``), then ``verify``.

        With ``owner`` the copy's metadata is that owner's (``MetadataDirective=REPLACE``);
        without, the source's owner is kept. Raises NotFound when the source is missing,
        IntegrityError when the source's own checksum or the copy's differs from
        ``expected_checksum`` (the copy is deleted), PermanentBackendError when the store
        cannot copy.
        """
        if not isinstance(src, S3Writes) or not self.can_copy_from(src):
            raise ValueError(f"{self.name} cannot copy server-side from {src.name}")
        key = self._key(dst_relpath)  # a key S3 would refuse fails before any request
        source = await src.stat(src_relpath)
        if source.checksum is not None and source.checksum != expected_checksum:
            where = src.location(src_relpath)
            raise mismatch(where, expected_checksum, source.checksum, "source store-reported")
        copy_source: CopySourceTypeDef = {"Bucket": src.bucket, "Key": src._key(src_relpath)}
        metadata = owner_metadata(owner or source.owner)
        if source.size <= self.copy_object_limit:
            client = await self.client()
            replaced: dict[str, Any] = {"MetadataDirective": "REPLACE", "Metadata": metadata} if owner else {}
            with s3_errors("copy to", self.location_of_key(key)):
                await client.copy_object(
                    Bucket=self.bucket,
                    Key=key,
                    CopySource=copy_source,
                    ChecksumAlgorithm="CRC64NVME",
                    **replaced,
                    **placement_params(self.tier),  # type: ignore[arg-type]
                )
        else:
            upload = self._multipart(await self.client(), key, metadata)
            await upload.copy(copy_source, source.size, expected_checksum)
        return await self._verify_written(dst_relpath, expected_checksum, source.size)


@dataclass(frozen=True)
class PutAnswer:
    """What the store's answer to a PutObject vouches for."""

    crc64nvme: str | None  # the CRC64NVME it reports holding
    md5_confirmed: bool  # its ETag is the MD5 of the bytes sent, which went with their Content-MD5

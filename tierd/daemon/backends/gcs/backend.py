"""A GCS tier: ``gs://<bucket>/<prefix><relpath>`` through the JSON API, spoken with httpx.

Writes (``gcs.writes``) declare the CRC32C of the bytes, computed in the same pass as the
CRC64NVME, so the service refuses a corrupt object; the CRC64NVME is kept in the object's
metadata beside the declared CRC32C (``gcs.objects``). ``verify`` (and so scrub) reads no
byte: the recorded CRC64NVME must be the expected one and the service's CRC32C the one
declared beside it; an object without them (written by another tool, or a big one whose
PATCH a crash cut off) is read back. ``verify: readback`` always reads back.

Every object is placed whole: GCS shows an object only once its upload finished, and
tierd never finishes an upload whose bytes it has not checked. Leftovers: a killed
multipart request leaves nothing; a resumable session cannot be listed (the JSON API has
no call for it), so ``abort_stale_uploads`` and ``remove_leftovers`` find nothing and an
abandoned session expires by itself after a week. Big files go up as one resumable
session each, chunk after chunk, not as parallel pieces composed: see docs/data-path.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import httpx

from tierd.config import GcsTier
from tierd.daemon import checksum
from tierd.daemon.backends.base import (
    Backend,
    Features,
    ObjectInfo,
    RangeReader,
    WriteRequest,
    check_prefix,
    check_relpath,
    mismatch,
    read_full,
)
from tierd.daemon.backends.budget import MIB, ByteBudget, default_budget
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.gcs.auth import credentials_for
from tierd.daemon.backends.gcs.client import GOOGLE_ENDPOINT, GcsClient, emulator_endpoint
from tierd.daemon.backends.gcs.media import MediaSession
from tierd.daemon.backends.gcs.objects import encode_crc32c, info_from, object_metadata, stored_checksums
from tierd.daemon.backends.gcs.writes import ObjectSettings, hash_both, resumable_upload, upload_whole
from tierd.daemon.backends.hashing import crc64
from tierd.daemon.backends.headfirst import HeadFirstReader
from tierd.errors import IntegrityError, PermanentBackendError, TransientBackendError

__all__ = ["GcsBackend", "GcsReader"]

#: What ``open_reader``'s media GET asks for: a small object whole.
OPEN_RANGE = 256 * 1024
#: What ``hash`` and read-back verification read per request.
READ_CHUNK = 8 * MIB
LIST_PAGE = 1000


class GcsReader(HeadFirstReader):
    """A RangeReader over one generation of an object: ranged media GETs; ``head``: its first bytes."""

    def __init__(
        self, media: MediaSession, name: str, size: int, generation: str | None, head: bytes = b""
    ) -> None:
        super().__init__(size, head)
        self.media, self.client, self.name = media, media.client, name
        self.params = {"alt": "media", **({"generation": generation} if generation else {})}

    async def fetch(self, offset: int, view: memoryview) -> None:
        """Fill ``view`` from ``offset`` with one ranged GET.

        Raises TransientBackendError when the body is cut or runs past the range.
        """
        want = len(view)
        where = f"gs://{self.client.bucket}/{self.name}"
        headers = {"Range": f"bytes={offset}-{offset + want - 1}"}
        url = self.client.object_url(self.name)
        async with self.media.get(url, where, params=self.params, headers=headers) as answer:
            filled = await answer.read_into(view, stop=True)
            if filled == want and await answer.read(1):
                raise TransientBackendError(f"{where}: the answer runs past {want} bytes from {offset}")
        if filled != want:
            raise TransientBackendError(f"{where}: body cut at {filled} of {want} bytes from {offset}")


class GcsBackend(Backend):
    """A tier in ``gs://<bucket>/<prefix>``."""

    features = Features(native_checksum=True, server_side_copy=False, multipart=True)

    def __init__(self, tier: GcsTier, *, budget: ByteBudget | None = None) -> None:
        self.name, self.tier = tier.name, tier
        self.bucket, self.prefix = tier.bucket, tier.prefix
        self.budget = budget or default_budget()
        self.chunk_size = int(tier.chunk_size)
        emulator = emulator_endpoint(tier.endpoint_url)
        credentials = credentials_for(tier.credentials_file, emulator=emulator is not None)
        pool = max(10, tier.concurrency * 2)
        self.client = GcsClient(
            emulator or GOOGLE_ENDPOINT, tier.bucket, credentials, verify_tls=tier.verify_tls, pool=pool
        )
        self.media = MediaSession(self.client, connections=pool, verify_tls=tier.verify_tls)
        self.settings = ObjectSettings(tier.storage_class, tier.kms_key_name)

    def location(self, relpath: str) -> str:
        """``gs://bucket/prefix/relpath``."""
        return f"gs://{self.bucket}/{self.prefix}{relpath}"

    async def _resource(self, relpath: str) -> dict[str, Any]:
        response = await self.client.request(
            "GET", self.client.object_url(self.prefix + check_relpath(relpath)), self.location(relpath)
        )
        resource: dict[str, Any] = response.json()
        return resource

    async def stat(self, relpath: str) -> ObjectInfo:
        """Size, mtime, owner and the recorded CRC64NVME (when vouched for). Raises NotFound."""
        return info_from(relpath, await self._resource(relpath), with_checksum=True)

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix``, page by page."""
        full = self.prefix + check_prefix(prefix)
        params: dict[str, Any] = {"prefix": full, "maxResults": LIST_PAGE}
        while True:
            response = await self.client.request(
                "GET", self.client.objects_url, f"gs://{self.bucket}/{full}", params=params
            )
            page = response.json()
            for resource in page.get("items") or []:
                name = str(resource.get("name", ""))
                if name.startswith(self.prefix) and not name.endswith("/"):
                    yield info_from(name.removeprefix(self.prefix), resource, with_checksum=False)
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = token

    async def open_reader(self, relpath: str) -> RangeReader:
        """A reader of the object's current generation, opened by a media GET of its first bytes.

        Its size comes from the answer's Content-Range and its generation from
        ``x-goog-generation`` (the ranged reads after it ask for that generation): no
        metadata GET first. Raises NotFound.
        """
        name, where = self.prefix + check_relpath(relpath), self.location(relpath)
        head = bytearray(OPEN_RANGE)
        headers = {"Range": f"bytes=0-{OPEN_RANGE - 1}"}
        url, params = self.client.object_url(name), {"alt": "media"}
        async with self.media.get(
            url, where, params=params, headers=headers, passing=frozenset({416})
        ) as answer:
            if answer.status == 416:  # an empty object, on some servers
                resource = await self._resource(relpath)
                size = int(resource.get("size", 0))
                return GcsReader(self.media, name, size, resource.get("generation"))
            got = await answer.read_into(memoryview(head), stop=True)
            size = _total_size(answer.headers.get("content-range", ""), answer.headers, got)
            generation = answer.headers.get("x-goog-generation")
        return GcsReader(self.media, name, size, generation, bytes(head[:got]))

    async def _read_into(self, relpath: str, view: memoryview) -> None:
        """One object of ``read_whole``: one media GET of it whole (no metadata GET: its size is known).

        Raises NotFound when missing, IntegrityError when it is not ``len(view)`` bytes long.
        """
        name, where = self.prefix + check_relpath(relpath), self.location(relpath)
        url = self.client.object_url(name)
        async with self.media.get(url, where, params={"alt": "media"}) as answer:
            filled = await answer.read_into(view, stop=False)
        if filled != len(view):
            raise IntegrityError(f"{where}: holds {filled} bytes, expected {len(view)}")

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Upload verified (see the module docstring); raises IntegrityError, leaving nothing new."""
        relpath = check_relpath(request.relpath)
        name, where = self.prefix + relpath, self.location(relpath)
        if request.reader.size <= self.chunk_size:
            resource, crc32 = await self._write_small(request, name, where)
        else:
            metadata = object_metadata(request.expected_checksum, 0, request.owner)
            del metadata["crc32c"]  # not known before the last chunk: PATCHed in after
            resource, crc32 = await resumable_upload(
                self.client,
                request,
                name,
                self.chunk_size,
                self.settings.resource(name, metadata),
                self.settings.params(),
                self.budget,
            )
            await self._check_finished(resource, crc32, where)
            await self._record_crc32c(name, resource, request, crc32)
        return await self._verified_write(relpath, resource, request.expected_checksum)

    async def _write_small(self, request: WriteRequest, name: str, where: str) -> tuple[dict[str, Any], int]:
        size = request.reader.size
        data = getattr(request.reader, "data", None)
        # A group's file is sent from the bytes the group holds within the budget: waiting for
        # more of it here could wait forever (every lane holding a group's buffer).
        taken = 0 if data is not None else await self.budget.acquire(size)
        try:
            view = memoryview(data).cast("B") if data is not None else memoryview(bytearray(size))
            if data is None:
                await read_full(request.reader, 0, view, where=where)
            hashed = await hash_both(view)
            actual = checksum.encode(hashed.crc64)
            if actual != request.expected_checksum:
                raise mismatch(where, request.expected_checksum, actual, "read")
            metadata = object_metadata(request.expected_checksum, hashed.crc32, request.owner)
            resource = self.settings.resource(name, metadata) | {"crc32c": encode_crc32c(hashed.crc32)}
            answer = await upload_whole(self.media, name, view, resource, self.settings.params())
        finally:
            self.budget.release(taken)
        if request.progress is not None:
            request.progress(size)
        await self._check_finished(answer, hashed.crc32, where)
        return answer, hashed.crc32

    async def _check_finished(self, resource: dict[str, Any], crc32: int, where: str) -> None:
        """The service's CRC32C must be the one tierd computed; else the object goes and the write fails."""
        if resource.get("crc32c") != encode_crc32c(crc32):
            await self._delete_name(str(resource.get("name", "")), resource.get("generation"))
            raise IntegrityError(
                f"{where}: GCS holds CRC32C {resource.get('crc32c')}, tierd sent {encode_crc32c(crc32)}"
            )

    async def _record_crc32c(
        self, name: str, resource: dict[str, Any], request: WriteRequest, crc32: int
    ) -> None:
        """PATCH the declared CRC32C into a big object's metadata (only its generation)."""
        metadata = object_metadata(request.expected_checksum, crc32, request.owner)
        response = await self.client.request(
            "PATCH",
            self.client.object_url(name),
            self.location(name.removeprefix(self.prefix)),
            params={"ifGenerationMatch": str(resource.get("generation", ""))},
            json={"metadata": metadata},
        )
        resource.update(response.json())

    async def _verified_write(self, relpath: str, resource: dict[str, Any], expected: str) -> ObjectInfo:
        if self.tier.verify == "readback":
            return await self._read_back(relpath, expected)
        info = info_from(relpath, resource, with_checksum=True)
        if info.checksum != expected:
            raise mismatch(self.location(relpath), expected, str(info.checksum), "stored")
        return ObjectInfo(relpath, info.size, expected, info.mtime, "store", info.owner)

    async def _delete_name(self, name: str, generation: Any) -> None:
        params = {"ifGenerationMatch": str(generation)} if generation else {}
        await self.client.request(
            "DELETE", self.client.object_url(name), f"gs://{self.bucket}/{name}", ok404=True, params=params
        )

    async def delete(self, relpath: str) -> None:
        """Remove the object; a missing one is fine."""
        await self._delete_name(self.prefix + check_relpath(relpath), None)

    async def hash(self, relpath: str) -> str:
        """Read back every byte (one chunk at a time) and return its CRC64NVME. Raises NotFound."""
        reader = await self.open_reader(relpath)
        value, offset = 0, 0
        taken = await self.budget.acquire(min(READ_CHUNK, max(reader.size, 1)))
        try:
            buffer = memoryview(bytearray(min(READ_CHUNK, reader.size)))
            while offset < reader.size:
                view = buffer[: min(len(buffer), reader.size - offset)]
                await read_full(reader, offset, view, where=self.location(relpath))
                value = await crc64(view, value)
                offset += len(view)
        finally:
            self.budget.release(taken)
        return checksum.encode(value)

    async def _read_back(self, relpath: str, expected: str) -> ObjectInfo:
        info = await self.stat(relpath)
        actual = await self.hash(relpath)
        if actual != expected:
            raise mismatch(self.location(relpath), expected, actual, "read back")
        return ObjectInfo(relpath, info.size, expected, info.mtime, "readback", info.owner)

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """Check the recorded CRC64NVME and the service's CRC32C (no byte read), else read back.

        Raises NotFound when missing, IntegrityError on a mismatch (the object stays).
        """
        resource = await self._resource(relpath)
        crc64_recorded, declared, actual = stored_checksums(resource)
        if self.tier.verify == "readback" or crc64_recorded is None or declared is None:
            return await self._read_back(relpath, expected_checksum)
        where = self.location(relpath)
        if declared != actual:
            raise IntegrityError(f"{where}: GCS holds CRC32C {actual}, tierd declared {declared}")
        if crc64_recorded != expected_checksum:
            raise mismatch(where, expected_checksum, crc64_recorded, "stored")
        info = info_from(relpath, resource, with_checksum=True)
        return ObjectInfo(relpath, info.size, expected_checksum, info.mtime, "store", info.owner)

    async def remove_checkpoint(self, path: str, markers: Sequence[str], rest: Sequence[str]) -> None:
        """Delete the markers first, then the rest ``concurrency`` at a time (one request per object)."""
        await for_each(markers, self.delete, self.tier.concurrency)
        await for_each(rest, self.delete, self.tier.concurrency)

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Nothing to find: GCS cannot list resumable sessions (they expire after a week)."""
        return 0

    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """Nothing to find: a killed upload leaves no object, and sessions cannot be listed."""
        return 0

    async def close(self) -> None:
        """Close the connections."""
        try:
            await self.media.close()
            await self.client.close()
        except httpx.HTTPError as exc:
            raise PermanentBackendError(f"{self.name}: closing: {exc}") from exc


def _total_size(content_range: str, headers: Mapping[str, str], got: int) -> int:
    """The object's size: ``bytes a-b/total``'s total, else a whole answer's length."""
    if "/" in content_range and not content_range.endswith("/*"):
        return int(content_range.rsplit("/", 1)[1])
    stored = headers.get("x-goog-stored-content-length") or headers.get("Content-Length")
    return int(stored) if stored else got

"""Uploads: one multipart request for a small file, a resumable session for a big one.

Both hash what they read in one pass, CRC64NVME and CRC32C of the same buffer, and refuse
to finish an upload whose CRC64NVME is not the expected one: a small file is then never
sent, a big file's last chunk is never sent (GCS makes an object visible only when its
upload finishes, so the final name never holds partial or wrong bytes). The CRC32C is
declared to the service, which refuses bytes that do not have it: in the multipart
request's metadata, and in the last chunk's ``X-Goog-Hash`` header. The answer's
``crc32c`` is checked too (an emulator that ignores ``X-Goog-Hash`` finishes a wrong object:
it is deleted and the write fails). A big file's recorded CRC32C joins its metadata by a
PATCH right after (``ifGenerationMatch``); until then ``verify`` reads it back.

A resumable session's URI is recorded (``ResumeStore.begin``: the UploadState's
``upload_id``), then each chunk the service acknowledged (``part_done``: its CRC64NVME, and
the running CRC32C so far as the part's ``etag``). A later write of the same file asks the
session how many bytes it holds, reads and hashes those again without sending them, and
sends the rest. Chunks go one after another: a session takes its bytes in order.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierd.daemon import checksum
from tierd.daemon.backends.base import WriteRequest, mismatch, read_full
from tierd.daemon.backends.concurrency import blocking_on
from tierd.daemon.backends.gcs.objects import crc32c, encode_crc32c
from tierd.daemon.backends.hashing import INLINE_HASH_LIMIT, crc64
from tierd.daemon.backends.uploads import PartState, UploadState
from tierd.errors import IntegrityError, NotFound, TierdError, TransientBackendError
from tierd.logs import get_logger

if TYPE_CHECKING:
    from tierd.daemon.backends.budget import ByteBudget
    from tierd.daemon.backends.gcs.client import GcsClient
    from tierd.daemon.backends.gcs.media import MediaSession

__all__ = ["Hashed", "ObjectSettings", "hash_both", "resumable_upload", "session_status", "upload_whole"]

RANGE_PREFIX = "bytes=0-"
QUANTUM = 256 * 1024
BODY_SLICE = 1024 * 1024
#: The longest object resource an upload's answer may hold (its metadata is at most 8 KiB).
RESOURCE_LIMIT = 1024 * 1024
log = get_logger(__name__)


@dataclass(frozen=True)
class ObjectSettings:
    """What every write sends besides the bytes: storage class, KMS key."""

    storage_class: str | None
    kms_key_name: str | None

    def params(self) -> dict[str, str]:
        """The query parameters of an upload."""
        return {"kmsKeyName": self.kms_key_name} if self.kms_key_name else {}

    def resource(self, name: str, metadata: Mapping[str, str]) -> dict[str, Any]:
        """The object resource declared with an upload."""
        body: dict[str, Any] = {"name": name, "metadata": dict(metadata)}
        if self.storage_class:
            body["storageClass"] = self.storage_class
        return body


@dataclass(frozen=True)
class Hashed:
    """A buffer's CRC64NVME and CRC32C."""

    crc64: int
    crc32: int


def _both(view: memoryview, crc64_before: int, crc32_before: int) -> Hashed:
    return Hashed(checksum_crc64(view, crc64_before), crc32c(view, crc32_before))


def checksum_crc64(view: memoryview, previous: int) -> int:
    """CRC64NVME of ``view`` continuing ``previous`` (on the calling thread)."""
    from awscrt import checksums

    return int(checksums.crc64nvme(view, previous))


async def hash_both(view: memoryview, crc32_before: int = 0) -> Hashed:
    """Both CRCs of ``view`` in one trip (CRC32C continuing ``crc32_before``); big buffers off the loop."""
    if len(view) <= INLINE_HASH_LIMIT:
        return Hashed(await crc64(view), crc32c(view, crc32_before))
    return await blocking_on(view, _both, 0, crc32_before)


async def upload_whole(
    media: MediaSession, name: str, data: memoryview, resource: dict[str, Any], params: dict[str, str]
) -> dict[str, Any]:
    """One multipart upload (metadata + bytes); the resource must declare the ``crc32c``."""
    boundary = f"tierd-{secrets.token_hex(12)}"
    head = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
        f"{json.dumps(resource)}\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    where = f"gs://{media.client.bucket}/{name}"
    async with media.send(
        "POST",
        media.client.upload_url,
        where,
        params={"uploadType": "multipart", **params},
        body=(head, data, tail),
        headers={"Content-Type": f"multipart/related; boundary={boundary}"},
    ) as answer:
        resource_json: dict[str, Any] = json.loads(await answer.whole(RESOURCE_LIMIT))
    return resource_json


async def start_session(
    client: GcsClient, name: str, size: int, resource: dict[str, Any], params: dict[str, str]
) -> str:
    """Open a resumable session; returns its URI."""
    response = await client.request(
        "POST",
        client.upload_url,
        f"gs://{client.bucket}/{name}",
        params={"uploadType": "resumable", "name": name, **params},
        json=resource,
        headers={"X-Upload-Content-Length": str(size), "X-Upload-Content-Type": "application/octet-stream"},
    )
    location = response.headers.get("Location")
    if not location:
        raise TransientBackendError(f"gs://{client.bucket}/{name}: no session URI in GCS's answer")
    return str(location)


async def session_status(client: GcsClient, session: str, size: int) -> tuple[int, dict[str, Any] | None]:
    """How many bytes the session holds, and the object if it already finished.

    Raises NotFound when the session expired or was cancelled.
    """
    response = await client.request(
        "PUT", session, "resumable session", content=b"", headers={"Content-Range": f"bytes */{size}"}
    )
    if response.status_code != 308:
        return size, response.json()
    text = response.headers.get("Range", "")
    held = int(text.removeprefix(RANGE_PREFIX)) + 1 if text.startswith(RANGE_PREFIX) else 0
    # GCS persists whole 256 KiB blocks short of the end; gcp-storage-emulator says
    # "bytes=0-0" for a session holding nothing.
    return held - held % QUANTUM, None


async def cancel_session(client: GcsClient, session: str) -> None:
    """Cancel a session (best effort: an abandoned one expires after a week)."""
    with contextlib.suppress(TierdError):
        await client.request("DELETE", session, "resumable session", ok404=True)


@dataclass
class _Progress:
    """Where a resumable upload stands: the next byte, the CRCs so far, what the session holds."""

    session: str
    offset: int = 0
    held: int = 0
    crc32: int = 0
    pieces: tuple[tuple[int, int], ...] = ()
    finished: dict[str, Any] | None = None


async def _resumed(client: GcsClient, request: WriteRequest, name: str, chunk: int) -> _Progress | None:
    """The recorded session of this file when it can go on (see the module docstring)."""
    if request.resume is None:
        return None
    state = await request.resume.load(request.relpath)
    size = request.reader.size
    if state is None or (state.key, state.size, state.part_size) != (name, size, chunk):
        return None
    parts = sorted(state.parts, key=lambda p: p.part_number)
    if [p.part_number for p in parts] != list(range(1, len(parts) + 1)):
        return None
    try:
        held, finished = await session_status(client, state.upload_id, size)
    except NotFound:
        return None
    recorded = sum(p.size for p in parts)
    if held < recorded:
        return None
    pieces = tuple((checksum.decode(p.checksum), p.size) for p in parts)
    crc32 = int.from_bytes(base64.b64decode(parts[-1].etag), "big") if parts else 0
    return _Progress(state.upload_id, recorded, held, crc32, pieces, finished)


async def resumable_upload(
    client: GcsClient,
    request: WriteRequest,
    name: str,
    chunk: int,
    resource: dict[str, Any],
    params: dict[str, str],
    budget: ByteBudget,
) -> tuple[dict[str, Any], int]:
    """Upload a big file through a resumable session; returns the object resource and its CRC32C.

    Raises IntegrityError (the session cancelled, nothing visible) when the bytes read do
    not hash to ``request.expected_checksum`` or the service refused them; Transient errors
    leave the session recorded to resume.
    """
    size, where = request.reader.size, f"gs://{client.bucket}/{name}"
    progress = await _resumed(client, request, name, chunk)
    if progress is None:
        progress = _Progress(await start_session(client, name, size, resource, params))
        if request.resume is not None:
            await request.resume.begin(request.relpath, UploadState(progress.session, name, chunk, size))
    else:
        log.info("gcs_session_resumed", relpath=request.relpath, recorded=progress.offset, held=progress.held)
        if request.progress is not None and progress.offset:
            request.progress(progress.offset)
    try:
        while progress.offset < size:
            await _one_chunk(client, request, progress, chunk, where, budget)
    except IntegrityError:
        await _forget(client, request, progress.session)
        raise
    except BaseException:
        if request.resume is None:
            await cancel_session(client, progress.session)
        raise
    if request.resume is not None:
        await request.resume.clear(request.relpath)
    assert progress.finished is not None
    return progress.finished, progress.crc32


async def _forget(client: GcsClient, request: WriteRequest, session: str) -> None:
    await cancel_session(client, session)
    if request.resume is not None:
        await request.resume.clear(request.relpath)


async def _one_chunk(
    client: GcsClient, request: WriteRequest, progress: _Progress, chunk: int, where: str, budget: ByteBudget
) -> None:
    """Read, hash and (unless the session holds it) send the chunk at ``progress.offset``."""
    size, start = request.reader.size, progress.offset
    length = min(chunk, size - start)
    taken = await budget.acquire(length)
    try:
        buffer = bytearray(length)
        view = memoryview(buffer)
        await read_full(request.reader, start, view, where=where)
        hashed = await hash_both(view, progress.crc32)
        pieces = (*progress.pieces, (hashed.crc64, length))
        last = start + length == size
        if last:
            _check_whole(pieces, request.expected_checksum, where)
        if start + length > progress.held:  # from the first byte the session lacks
            skip = max(0, progress.held - start)
            await _send(client, progress, view[skip:], start + skip, size, hashed.crc32 if last else None)
    finally:
        budget.release(taken)
    progress.offset, progress.crc32, progress.pieces = start + length, hashed.crc32, pieces
    if request.resume is not None and not last:
        part = PartState(len(pieces), length, encode_crc32c(hashed.crc32), checksum.encode(hashed.crc64))
        await request.resume.part_done(request.relpath, part)
    if request.progress is not None:
        request.progress(length)


async def _slices(*parts: bytes | memoryview) -> AsyncIterator[bytes]:
    """A request body from buffers as they are, a slice at a time.

    Nothing is joined or copied here, and the socket's write buffer holds at most a slice
    beyond what the kernel took (a 16 MiB buffer handed whole was copied whole into it).
    """
    for part in parts:
        view = memoryview(part).cast("B")
        for offset in range(0, len(view), BODY_SLICE):
            yield view[offset : offset + BODY_SLICE]  # type: ignore[misc]


def _check_whole(pieces: tuple[tuple[int, int], ...], expected: str, where: str) -> None:
    total = 0
    for value, length in pieces:
        total = checksum.combine(total, value, length)
    actual = checksum.encode(total)
    if actual != expected:
        raise mismatch(where, expected, actual, "read")


async def _send(
    client: GcsClient, progress: _Progress, view: memoryview, start: int, size: int, final_crc32: int | None
) -> None:
    """PUT one chunk; the last one declares the whole object's CRC32C."""
    headers = {"Content-Range": f"bytes {start}-{start + len(view) - 1}/{size}"}
    if final_crc32 is not None:
        headers["X-Goog-Hash"] = f"crc32c={encode_crc32c(final_crc32)}"
    headers["Content-Length"] = str(len(view))
    response = await client.request(
        "PUT", progress.session, "resumable session", content=_slices(view), headers=headers
    )
    if final_crc32 is not None:
        if response.status_code == 308:
            raise TransientBackendError("resumable session: the last chunk was not taken whole")
        progress.finished = response.json()

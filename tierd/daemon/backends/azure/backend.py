"""An Azure tier: block blobs in ``<container>/<prefix>``, every request on tierd's own session.

Small files (up to ``bodies.PUT_LIMIT``, 1 MiB) go up in one Put Blob carrying their
CRC64 (``x-ms-content-crc64``); bigger ones as staged blocks, each with its CRC64, then one
Put Block List (``azure.blocks``). Either way the service refuses bytes whose CRC64 it does
not compute itself (``Crc64Mismatch`` -> IntegrityError), and the CRC sent is the one
recorded at first sight (a Put Blob) or the blocks' CRCs whose combination equals it. The
whole file's CRC64NVME is kept in the blob's ``crc64nvme`` metadata, beside its owner and
mode (``azure.metadata``), and every write carries the tier's ``storage_class`` (access
tier) and ``encryption_scope``.

Verification: with ``verify: native``, Get Blob Properties, and the recorded
``crc64nvme`` must equal the expected checksum (``verified_by="store"``, no byte read
back: scrub costs one request per file); a blob without it (written by something else)
and ``verify: readback`` read every byte back (``azure.reads``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from tierd.config import AzureTier
from tierd.config.stores import AZURE_MAX_NAME_CHARS
from tierd.daemon import checksum
from tierd.daemon.backends.azure.blocks import BlockUpload, WriteOptions, azure_crc64, upload_tag
from tierd.daemon.backends.azure.bodies import PUT_LIMIT
from tierd.daemon.backends.azure.calls import Properties, blob_properties, delete_blob, list_blobs
from tierd.daemon.backends.azure.client import account_url, credential
from tierd.daemon.backends.azure.errors import azure_errors
from tierd.daemon.backends.azure.leftovers import StagedBlob, drop_unless_kept, staged_blobs
from tierd.daemon.backends.azure.metadata import blob_metadata, checksum_from_metadata
from tierd.daemon.backends.azure.puts import put_blob, write_headers
from tierd.daemon.backends.azure.reads import (
    AzureReader,
    Blob,
    hash_blob,
    open_blob,
    read_whole_blob,
)
from tierd.daemon.backends.azure.rest import AzureRest, Signer
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
from tierd.daemon.backends.budget import ByteBudget, default_budget
from tierd.daemon.backends.concurrency import for_each
from tierd.daemon.backends.hashing import crc64
from tierd.daemon.backends.ownermeta import owner_from_metadata
from tierd.errors import NotFound, PermanentBackendError

__all__ = ["REQUESTS_PER_FILE", "AzureBackend"]

#: Blocks and read-back ranges of one blob in flight.
REQUESTS_PER_FILE = 16
#: The data path's connections to the service, at least.
CONNECTIONS = 64


class AzureBackend(Backend):
    """A tier in ``azure://<account>/<container>/<prefix>``."""

    features = Features(native_checksum=True, server_side_copy=False, multipart=True)

    def __init__(self, tier: AzureTier, *, budget: ByteBudget | None = None) -> None:
        self.name, self.tier, self.prefix = tier.name, tier, tier.prefix
        self.budget = budget or default_budget()
        self.block_size = int(tier.block_size)
        self.concurrency = min(tier.concurrency, REQUESTS_PER_FILE)
        self.options = WriteOptions(tier.storage_class, tier.encryption_scope, self.concurrency, self.budget)
        self._rest: AzureRest | None = None
        self._writing: dict[str, int] = {}  # upload tags being written now, with how many writes

    @property
    def rest(self) -> AzureRest:
        """The tier's session (``azure.rest``), made on first use (no request is sent to make it)."""
        if self._rest is None:
            with azure_errors("configure", f"tier {self.name}"):
                signer = Signer(self.tier.account, credential(self.tier))
            connections = max(CONNECTIONS, self.tier.concurrency * 4)
            self._rest = AzureRest(
                account_url(self.tier), self.tier.container, signer, connections=connections
            )
        return self._rest

    def _data(self, relpath: str) -> Blob:
        """The blob of ``relpath`` on the data path."""
        return Blob(self.rest, self._name(relpath), self.location(relpath))

    def _name(self, relpath: str) -> str:
        """The blob name of ``relpath``; PermanentBackendError past Azure's 1,024 characters."""
        name = self.prefix + check_relpath(relpath)
        if len(name) > AZURE_MAX_NAME_CHARS:
            raise PermanentBackendError(
                f"{self.location_of(name[:120])}...: the blob name is {len(name):,} characters; "
                f"Azure takes at most {AZURE_MAX_NAME_CHARS:,} (the tier's prefix plus the file's path)"
            )
        return name

    def location_of(self, name: str) -> str:
        """``azure://account/container/name``."""
        return f"azure://{self.tier.account}/{self.tier.container}/{name}"

    def location(self, relpath: str) -> str:
        """``azure://account/container/prefix+relpath``."""
        return self.location_of(self.prefix + check_relpath(relpath))

    async def _properties(self, relpath: str) -> Properties:
        return await blob_properties(self.rest, self._name(relpath), self.location(relpath))

    async def stat(self, relpath: str) -> ObjectInfo:
        """Size, mtime, the recorded CRC64NVME and owner. Raises NotFound when missing."""
        return _info(relpath, await self._properties(relpath))

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Committed blobs under the directory ``prefix`` (checksum None).

        Raises PermanentBackendError for a missing container or access denied.
        """
        full = self.prefix + check_prefix(prefix)
        async for blob in list_blobs(self.rest, full, self.location_of(full)):
            if not blob.name.endswith("/"):
                mtime = blob.last_modified.timestamp() if blob.last_modified else None
                yield ObjectInfo(blob.name[len(self.prefix) :], blob.size, None, mtime)

    async def open_reader(self, relpath: str) -> RangeReader:
        """An AzureReader, opened by a GET of the first ``OPEN_RANGE`` bytes.

        Raises NotFound when missing, ObjectArchived for a blob in the Archive tier.
        """
        blob = self._data(relpath)
        try:
            return await open_blob(blob)
        except PermanentBackendError as exc:
            if not str(exc).startswith(f"open {blob.location}: 416"):
                raise
        properties = await self._properties(relpath)  # an empty blob: no range of it exists
        return AzureReader(blob, properties.size, properties.etag, b"")

    async def _read_into(self, relpath: str, view: memoryview) -> None:
        """One small blob of ``read_whole``: one GET, no range, no reader (its size is known)."""
        await read_whole_blob(self._data(relpath), view)

    async def write(self, request: WriteRequest) -> ObjectInfo:
        """Put Blob (small) or staged blocks (big), each carrying its CRC64; then verified.

        Raises IntegrityError, leaving nothing new under the name, when the bytes do not
        hash to ``expected_checksum`` or the service refused their CRC64.
        """
        name, size = self._name(request.relpath), request.reader.size
        metadata = blob_metadata(request.expected_checksum, request.owner)
        if size <= PUT_LIMIT:
            await self._put(request, metadata)
        else:
            tag = upload_tag(request.expected_checksum, self.block_size)
            self._writing[tag] = self._writing.get(tag, 0) + 1
            try:
                upload = BlockUpload(
                    name,
                    self.rest,
                    self.options,
                    self.location(request.relpath),
                    self.block_size,
                )
                await upload.write(request, metadata)
            finally:
                self._release(tag)
        if self.tier.verify == "readback":
            return await self.verify(request.relpath, request.expected_checksum)
        info = ObjectInfo(request.relpath, size, request.expected_checksum, None, "store", request.owner)
        return info

    def _release(self, tag: str) -> None:
        left = self._writing.pop(tag) - 1
        if left:
            self._writing[tag] = left

    async def _put(self, request: WriteRequest, metadata: dict[str, str]) -> None:
        """One Put Blob with the bytes' CRC64, checked against the expected one before it is sent.

        A group's file (a ``BytesReader``) is sent from the bytes it holds: the group holds
        them within the budget already, and waiting for more of it here could wait forever
        (every lane holding a group's buffer, the whole budget taken).
        """
        data = getattr(request.reader, "data", None)
        if data is not None:
            await self._put_view(request, memoryview(data).cast("B"), metadata)
        else:
            async with self.budget.buffer(request.reader.size) as view:
                await read_full(request.reader, 0, view, where=self.location(request.relpath))
                await self._put_view(request, view, metadata)
        if request.progress is not None:
            request.progress(request.reader.size)

    async def _put_view(self, request: WriteRequest, view: memoryview, metadata: dict[str, str]) -> None:
        location = self.location(request.relpath)
        crc = await crc64(view)
        if checksum.encode(crc) != request.expected_checksum:
            raise mismatch(location, request.expected_checksum, checksum.encode(crc), "source")
        extra = write_headers(self.tier.storage_class, self.tier.encryption_scope)
        name = self._name(request.relpath)
        await put_blob(self.rest, name, location, view, azure_crc64(crc), metadata, extra)

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """Compare the recorded CRC64NVME (native), or read every byte back.

        Raises NotFound when missing, IntegrityError on a mismatch (the blob is left in
        place), ObjectArchived when a read-back meets a blob in the Archive tier.
        """
        properties = await self._properties(relpath)
        info = _info(relpath, properties)
        if self.tier.verify == "native" and info.checksum is not None:
            if info.checksum != expected_checksum:
                raise mismatch(self.location(relpath), expected_checksum, info.checksum, "recorded")
            return replace(info, verified_by="store")
        actual = await self._hash(relpath, properties)
        if actual != expected_checksum:
            raise mismatch(self.location(relpath), expected_checksum, actual, "read-back")
        return replace(info, checksum=actual, verified_by="readback")

    async def hash(self, relpath: str) -> str:
        """Read back every byte (ranges in parallel) and return its CRC64NVME. Raises NotFound."""
        return await self._hash(relpath, await self._properties(relpath))

    async def _hash(self, relpath: str, properties: Properties) -> str:
        return await hash_blob(
            self._data(relpath),
            properties.size,
            properties.etag,
            concurrency=self.concurrency,
            budget=self.budget,
        )

    async def delete(self, relpath: str) -> None:
        """Delete Blob (missing is fine). Raises Transient/PermanentBackendError."""
        with contextlib.suppress(NotFound):
            await delete_blob(self.rest, self._name(relpath), self.location(relpath))

    async def remove_checkpoint(self, path: str, markers: Sequence[str], rest: Sequence[str]) -> None:
        """The completion markers first, one by one; then the rest, ``concurrency`` at a time."""
        for relpath in markers:
            await self.delete(relpath)
        await for_each(rest, self.delete, self.tier.concurrency)

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Drop blobs under the prefix that hold only staged blocks, older than that.

        Spares uploads in ``keep`` and those being written. Returns how many were dropped.
        Raises PermanentBackendError (no such container, access denied) or TransientBackendError.
        """
        where = self.location_of(self.prefix)
        found = await staged_blobs(self.rest, self.prefix, where)
        stale = [blob for blob in found if _age(blob) >= older_than_seconds]
        return await drop_unless_kept(self.rest, stale, keep=keep, active=set(self._writing), where=where)

    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """Drop the staged-only blobs of exactly these files, whatever their age, but ``keep``."""
        names = {self._name(relpath) for relpath in relpaths}
        if not names:
            return 0
        where = self.location_of(self.prefix)
        found = await staged_blobs(self.rest, _shared_prefix(names), where)
        mine = [blob for blob in found if blob.name in names]
        active = set(self._writing)
        return await drop_unless_kept(self.rest, mine, keep=keep, active=active, where=where)

    async def close(self) -> None:
        """Close the session's connections."""
        rest, self._rest = self._rest, None
        if rest is not None:
            await rest.close()


def _age(blob: StagedBlob) -> float:
    """Seconds since the blob's last change (infinite when the service does not say)."""
    if blob.modified is None:
        return float("inf")
    return (datetime.now(UTC) - blob.modified).total_seconds()


def _shared_prefix(names: Collection[str]) -> str:
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _info(relpath: str, properties: Properties) -> ObjectInfo:
    mtime = properties.last_modified.timestamp() if properties.last_modified else None
    return ObjectInfo(
        relpath,
        properties.size,
        checksum_from_metadata(properties.metadata),
        mtime,
        owner=owner_from_metadata(properties.metadata),
    )

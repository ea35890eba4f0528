"""An S3 tier: any S3-compatible store (AWS, MinIO, Ceph RGW, ...) through aioboto3.

Plain client calls only, never boto3's transfer manager: with awscrt installed it may pick
the CRT client, which has ignored a custom ``endpoint_url``. botocore's own checksums
are set to ``when_required`` (we send CRC64NVME ourselves; its default CRC32 trailer is
refused by some S3-compatible servers) and payload signing is off (the CRC64NVME header
protects the body, and hashing SHA-256 on the event loop would stall it).

Small objects go up in one PutObject with their CRC64NVME; bigger ones as a multipart
upload (``s3.multipart``). S3 never shows an incomplete multipart object, and a
PutObject is atomic, so the final key never holds partial bytes. Reads need no HeadObject:
``open_reader``'s GET of the first ``OPEN_RANGE`` bytes tells the size and ETag, and brings
those bytes (a small object whole).

Verification (``verify``, run by ``write`` and ``copy_from``): with ``verify: native``,
HeadObject with ``ChecksumMode=ENABLED``; when the store reports a CRC64NVME it must equal
the expected one (``verified_by="store"``), when it reports none every byte is read back
(ranged GETs in parallel, ``s3.reads``) and hashed (``verified_by="readback"``). A
PutObject's answer can spare the HeadObject: when it carries the CRC64NVME (AWS, moto),
or when its ETag is the MD5 of the bytes sent (AWS without SSE-KMS, MinIO, Ceph,
``rclone serve s3``). Objects up to ``writes.MD5_LIMIT`` go up with a Content-MD5 the store
checks on receipt, and the buffer sent is the one whose CRC64NVME was just checked, so
that ETag proves the store holds the bytes tierd meant. ``verify: readback`` always reads
back. AWS validates the checksums we send; a store that merely echoes them (moto,
``rclone serve s3`` for PutObject) makes "store" only as strong as our own hash of the
bytes sent -- choose ``verify: readback`` for such stores.

A file's recorded owner, group and mode go with it as user metadata (``backends.ownermeta``:
rclone's ``x-amz-meta-mode``, ``-uid`` and ``-gid``), on PutObject, on the multipart upload's
creation and on server-side copies; ``stat`` (HeadObject) reads them back, ``list`` does not
(ListObjectsV2 carries no metadata).

With the tier's ``fast_path: auto``, small objects' PutObject, HeadObject and opening GET
skip botocore's per-request work once the bucket's endpoint is known (``fast.lean``), and
on a custom ``endpoint_url`` a group of small objects is read with its GETs pipelined on
one connection (``fast.pipelined_gets``); ``fast.paths`` says what is used where. With
``fast_path: off`` every request is botocore's.

botocore sends a request at most ``REQUEST_ATTEMPTS`` times (standard retry mode): one
retry, so a throttled or dropped multipart part or ranged GET is sent again in place
rather than failing its file's try and cancelling the parts in flight beside it; the
file level (``tierd.daemon.transfer.retry``) retries everything else. The README's
"Retries" section has the whole table.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aiobotocore.config import AioConfig
from botocore.exceptions import ClientError

from tierd.config import S3_MAX_KEY_BYTES, S3Tier
from tierd.daemon.backends.base import (
    Backend,
    Features,
    ObjectInfo,
    RangeReader,
    check_prefix,
    check_relpath,
    mismatch,
)
from tierd.daemon.backends.budget import MIB, ByteBudget, default_budget
from tierd.daemon.backends.ownermeta import owner_from_metadata
from tierd.daemon.backends.s3.bodies import TransferSettings
from tierd.daemon.backends.s3.client import USER_AGENT, ClientSession, botocore_session
from tierd.daemon.backends.s3.errors import range_not_satisfiable, s3_errors
from tierd.daemon.backends.s3.fast import FastPath, plan_for
from tierd.daemon.backends.s3.fast.lean import LeanRequests
from tierd.daemon.backends.s3.fast.pipelined_gets import PipelinedGets
from tierd.daemon.backends.s3.holds import S3Holds
from tierd.daemon.backends.s3.leftovers import abort_unless_kept, list_open_uploads, open_uploads_of
from tierd.daemon.backends.s3.multipart import MAX_PART
from tierd.daemon.backends.s3.reads import BodyReader, RangeGet, S3Reader, content_range_total, hash_ranges
from tierd.daemon.backends.s3.remove import delete_keys
from tierd.daemon.backends.s3.writes import S3Writes
from tierd.errors import IntegrityError, PermanentBackendError, TierdError, TransientBackendError
from tierd.logs import get_logger

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import HeadObjectOutputTypeDef

__all__ = ["S3Backend"]

log = get_logger(__name__)

BUFFERED_PART_LIMIT = 16 * MIB
STREAM_CHUNK = 8 * MIB
COPY_PART_SIZE = 512 * MIB
#: How much of a refused key its error shows (characters).
KEY_SHOWN = 120
# What open_reader's GET asks for: a small object whole; held in memory while the reader is open.
OPEN_RANGE = 256 * 1024
MAX_POOL = 512
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 120
# A pipelined group with nothing coming back for this long is handed to single GETs.
PIPELINE_STALL = 10
#: How many times botocore sends one request (the first send included; standard mode).
REQUEST_ATTEMPTS = 2


#: Requests of one object in flight (parts, read-back ranges): past this, more parts only
#: wait for the buffer budget, holding a connection a store may time out.
REQUESTS_PER_FILE = 16


def requests_per_file(concurrency: int) -> int:
    """Parts and read-back ranges of one object run this many at a time."""
    return min(concurrency, REQUESTS_PER_FILE)


def pool_size(concurrency: int) -> int:
    """Connections for ``concurrency`` files at once, each with ``requests_per_file`` requests."""
    return min(MAX_POOL, max(10, concurrency * (requests_per_file(concurrency) + 1)))


class S3Backend(S3Writes, S3Holds):
    """A tier in ``s3://<bucket>/<prefix>`` (writes and copies: ``s3.writes``; legal holds: ``s3.holds``)."""

    features = Features(native_checksum=True, server_side_copy=True, multipart=True, legal_hold=True)

    def __init__(
        self,
        tier: S3Tier,
        *,
        budget: ByteBudget | None = None,
        buffered_part_limit: int = BUFFERED_PART_LIMIT,
        chunk_size: int = STREAM_CHUNK,
        copy_part_size: int = COPY_PART_SIZE,
        copy_object_limit: int = MAX_PART,
    ) -> None:
        self.name, self.tier = tier.name, tier
        self.bucket, self.prefix = tier.bucket, tier.prefix
        self.budget = budget or default_budget()
        self.settings = TransferSettings(
            part_size=int(tier.part_size),
            concurrency=requests_per_file(tier.concurrency),
            budget=self.budget,
            buffered_part_limit=buffered_part_limit,
            chunk_size=chunk_size,
            copy_part_size=copy_part_size,
        )
        self.copy_object_limit = copy_object_limit
        with s3_errors("configure", f"tier {tier.name}"):
            self._session = ClientSession(
                botocore_session=botocore_session(),
                aws_access_key_id=tier.access_key_id,
                aws_secret_access_key=_secret(tier),
                profile_name=tier.profile,
                region_name=tier.region,
            )
        self._stack: AsyncExitStack | None = None
        self._client: S3Client | None = None
        self.fast_path = FastPath()  # attached when the client opens
        self._client_lock = asyncio.Lock()
        self._active_uploads: set[str] = set()  # UploadIds this backend is writing to now
        self._plain_http = (tier.endpoint_url or "").lower().startswith("http://")

    def _boto_config(self) -> AioConfig:
        return AioConfig(
            signature_version="s3v4",
            s3={"addressing_style": self.tier.addressing_style, "payload_signing_enabled": False},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            retries={"mode": "standard", "total_max_attempts": REQUEST_ATTEMPTS},
            max_pool_connections=pool_size(self.tier.concurrency),
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            tcp_keepalive=True,
            user_agent=USER_AGENT,
        )

    async def client(self) -> S3Client:
        """The shared aiobotocore client, opened on first use."""
        async with self._client_lock:
            if self._client is None:
                stack = AsyncExitStack()
                with s3_errors("connect to", self.location_of_key(self.prefix)):
                    self._client = await stack.enter_async_context(
                        self._session.client(
                            "s3",
                            endpoint_url=self.tier.endpoint_url,
                            # None, not True: botocore then honours AWS_CA_BUNDLE and ca_bundle.
                            # Plain http needs no TLS context (its CA certificates: ~3.7 MB).
                            verify=None if self.tier.verify_tls and not self._plain_http else False,
                            config=self._boto_config(),
                        )
                    )
                self.fast_path = FastPath.attach(
                    self._client,
                    self.name,
                    plan_for(self.tier),
                    connect_timeout=CONNECT_TIMEOUT,
                    read_timeout=PIPELINE_STALL,
                )
                self._stack = stack
            return self._client

    async def observe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(operation)`` for every API call this backend makes from now on."""
        client = await self.client()
        client.meta.events.register("before-call.s3", lambda model, **_: callback(model.name))
        if self.fast_path.lean is not None:
            self.fast_path.lean.observers.append(callback)

    @property
    def pipeline(self) -> PipelinedGets | None:
        """Pipelined GETs of small objects, once the client is open and allows them."""
        return self.fast_path.pipeline

    def _lean_for(self) -> LeanRequests | None:
        """The lean way to this bucket, once botocore has shown where it is."""
        lean = self.fast_path.lean
        return lean if lean is not None and lean.knows(self.bucket) else None

    def _key(self, relpath: str) -> str:
        """The object key of ``relpath``, checked before any request is sent with it.

        Raises PermanentBackendError for a key past ``S3_MAX_KEY_BYTES`` (AWS refuses it,
        some stores take it: refused here, it fails the same everywhere).
        """
        key = self.prefix + check_relpath(relpath)
        size = len(key.encode("utf-8", "surrogateescape"))
        if size > S3_MAX_KEY_BYTES:
            shown = key if len(key) <= KEY_SHOWN else f"{key[:KEY_SHOWN]}..."
            raise PermanentBackendError(
                f"{self.location_of_key(shown)}: the object key is {size:,} bytes in UTF-8; "
                f"S3 takes at most {S3_MAX_KEY_BYTES:,} (the tier's prefix plus the file's path)"
            )
        return key

    def location_of_key(self, key: str) -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.bucket}/{key}"

    def location(self, relpath: str) -> str:
        """``s3://bucket/prefix+relpath`` (whatever its length: this names it, sends nothing)."""
        return self.location_of_key(self.prefix + check_relpath(relpath))

    async def _head(self, relpath: str) -> HeadObjectOutputTypeDef:
        client = await self.client()
        key = self._key(relpath)
        with s3_errors("stat", self.location(relpath)):
            lean = self._lean_for()
            if lean is not None and (answer := await lean.head(self.bucket, key)) is not None:
                return answer  # type: ignore[return-value]
            return await client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")

    async def stat(self, relpath: str) -> ObjectInfo:
        """Size, mtime and the store's CRC64NVME if it reports one.

        Raises NotFound when missing (a missing bucket also answers HEAD with a bare
        404), PermanentBackendError on access denied, TransientBackendError on 5xx.
        """
        return _info(relpath, await self._head(relpath))

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Objects under the directory ``prefix`` (ListObjectsV2, checksum None).

        Raises PermanentBackendError for a missing bucket or access denied.
        """
        full = self.prefix + check_prefix(prefix)
        client = await self.client()
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
        with s3_errors("list", self.location_of_key(full)):
            async for page in pages:
                for obj in page.get("Contents", []):
                    key, mtime = obj["Key"], obj["LastModified"].timestamp()
                    if not key.endswith("/"):
                        yield ObjectInfo(key[len(self.prefix) :], obj["Size"], None, mtime)

    def _ranges(self, client: S3Client, relpath: str, etag: str | None) -> RangeGet:
        pipeline = self.fast_path.pipeline if self._lean_for() is not None else None  # straight into buffers
        direct = None if pipeline is None else functools.partial(pipeline.get_range, self.bucket)
        key = self._key(relpath)
        return RangeGet(client, self.bucket, key, etag, self.location(relpath), direct, self.budget)

    async def open_reader(self, relpath: str) -> RangeReader:
        """An S3Reader, opened by a GET of the first ``OPEN_RANGE`` bytes (no HeadObject).

        The GET is read to its end at once, so an open reader never holds a connection
        (readers waiting for connections held by other readers could wait forever).
        Raises NotFound when missing.
        """
        client = await self.client()
        key, location = self._key(relpath), self.location(relpath)
        with s3_errors("open", location):
            try:
                if (lean := self._lean_for()) is not None:
                    answer = await lean.get(self.bucket, key, 0, OPEN_RANGE - 1)
                    if answer is not None:
                        return self._opened(client, relpath, *answer)
                response = await client.get_object(
                    Bucket=self.bucket, Key=key, Range=f"bytes=0-{OPEN_RANGE - 1}"
                )
            except ClientError as exc:
                if not range_not_satisfiable(exc):
                    raise
                response = None
        if response is None:  # an empty object: stores refuse any range of it
            head = await self._head(relpath)
            return S3Reader(self._ranges(client, relpath, head.get("ETag")), head["ContentLength"])
        size = content_range_total(response)
        first = bytearray(min(size, OPEN_RANGE))
        body = BodyReader(response["Body"])
        try:
            with s3_errors("read", location):
                got = await body.into(memoryview(first))
        finally:
            body.close()
        return self._opened(client, relpath, response, first if got == len(first) else first[:got])

    async def read_whole(
        self, relpaths: Sequence[str], views: Sequence[memoryview]
    ) -> Sequence[TierdError | None]:
        """Small objects with their GETs pipelined (``fast.pipelined_gets``); what that leaves, one by one."""
        filled = await self._pipelined(relpaths, views)
        return [
            None if done else await self._read_one(relpath, view)
            for relpath, view, done in zip(relpaths, views, filled, strict=True)
        ]

    async def _pipelined(self, relpaths: Sequence[str], views: Sequence[memoryview]) -> Sequence[bool]:
        """Which objects a pipelined read filled (empty ones are not asked; a GET cannot range them)."""
        filled = [False] * len(views)
        pipeline = self.fast_path.pipeline if self._lean_for() is not None else None
        wanted = [index for index, view in enumerate(views) if len(view) > 0]
        if pipeline is None or len(wanted) < 2:
            return filled
        try:
            with s3_errors("read", self.location(relpaths[wanted[0]])):
                got = await pipeline.get(
                    self.bucket, [self._key(relpaths[i]) for i in wanted], [views[i] for i in wanted]
                )
        except TierdError as exc:  # e.g. no credentials: each object's own read reports it
            log.debug("pipelined_read_failed", tier=self.name, error=str(exc))
            return filled
        for index, done in zip(wanted, got, strict=True):
            filled[index] = done
        return filled

    async def _read_into(self, relpath: str, view: memoryview) -> None:
        """One small object of ``read_whole`` into its view with one GET, no reader in between.

        An object the lean path cannot fetch (a bucket botocore has not shown yet, an empty
        or a big object, an answer it hands back) goes through ``open_reader``.
        """
        if not await self._get_whole(relpath, view):
            await super()._read_into(relpath, view)

    async def _get_whole(self, relpath: str, view: memoryview) -> bool:
        """One lean GET of the object into ``view``; False where it must be read another way.

        Raises IntegrityError when the object's size is not the view's, NotFound when missing.
        """
        lean = self._lean_for()
        if lean is None or not 0 < len(view) <= OPEN_RANGE:
            return False
        location = self.location(relpath)
        with s3_errors("read", location):
            answer = await lean.get(self.bucket, self._key(relpath), 0, len(view) - 1)
        if answer is None:
            return False
        fields, body = answer
        if (size := content_range_total(fields)) != len(view):
            raise IntegrityError(f"{location}: holds {size} bytes, expected {len(view)}")
        if len(body) != size:
            raise TransientBackendError(f"read {location}: the body ended at byte {len(body)} of {size}")
        view[:] = body
        return True

    def _opened(self, client: S3Client, relpath: str, response: Any, first: bytes | bytearray) -> S3Reader:
        """The reader for an opening GET's answer and body."""
        size = content_range_total(response)
        if len(first) != (want := min(size, OPEN_RANGE)):
            where = self.location(relpath)
            raise TransientBackendError(f"read {where}: the body ended at byte {len(first)} of {want}")
        return S3Reader(self._ranges(client, relpath, response.get("ETag")), size, first)

    async def verify(self, relpath: str, expected_checksum: str) -> ObjectInfo:
        """Check the object: natively if the tier says so and the store reports a CRC64NVME.

        Otherwise read back every byte. Raises NotFound when missing, IntegrityError on a
        mismatch (the object is left in place).
        """
        head = await self._head(relpath)
        info = _info(relpath, head)
        if self.tier.verify == "native" and info.checksum is not None:
            if info.checksum != expected_checksum:
                raise mismatch(self.location(relpath), expected_checksum, info.checksum, "store-reported")
            return replace(info, verified_by="store")
        actual = await self._hash(relpath, head)
        if actual != expected_checksum:
            raise mismatch(self.location(relpath), expected_checksum, actual, "read-back")
        return replace(info, checksum=actual, verified_by="readback")

    async def delete(self, relpath: str) -> None:
        """DeleteObject (missing is fine).

        Raises PermanentBackendError (no such bucket, access denied) or TransientBackendError.
        """
        client = await self.client()
        with s3_errors("delete", self.location(relpath)):
            await client.delete_object(Bucket=self.bucket, Key=self._key(relpath))

    async def remove_checkpoint(self, path: str, markers: Sequence[str], rest: Sequence[str]) -> None:
        """DeleteObjects: the completion markers in a call of their own, then the rest by 1,000.

        Raises PermanentBackendError (access denied, no such bucket) or TransientBackendError.
        """
        client = await self.client()
        batches = [[self._key(p) for p in markers], [self._key(p) for p in rest]]
        with s3_errors("delete", self.location(path)):
            await delete_keys(client, self.bucket, [b for b in batches if b], self.location(path))

    async def hash(self, relpath: str) -> str:
        """GET every byte (ranges in parallel) and return its CRC64NVME.

        Raises NotFound when missing, TransientBackendError if it changed meanwhile (412).
        """
        return await self._hash(relpath, await self._head(relpath))

    async def _hash(self, relpath: str, head: HeadObjectOutputTypeDef) -> str:
        ranges = self._ranges(await self.client(), relpath, head.get("ETag"))
        return await hash_ranges(ranges, head["ContentLength"], self.settings.concurrency)

    async def abort_stale_uploads(self, older_than_seconds: float, *, keep: Collection[str] = ()) -> int:
        """Abort multipart uploads under the prefix initiated longer ago than that.

        Never aborts an UploadId in ``keep`` nor one this backend is uploading or
        copying right now: some stores report a made-up "initiated" time (moto says 2010
        for every upload), so age alone cannot protect them. Returns how many were
        aborted. Raises PermanentBackendError (no such bucket, access denied,
        ListMultipartUploads not supported) or TransientBackendError.
        """
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_seconds)
        client = await self.client()
        found = await list_open_uploads(client, self.bucket, self.prefix)
        stale = [upload for upload in found if upload.initiated <= cutoff]
        return await abort_unless_kept(
            client, self.bucket, self.settings, stale, keep=keep, active=self._active_uploads
        )

    async def remove_leftovers(self, relpaths: Sequence[str], *, keep: Collection[str] = ()) -> int:
        """Abort the open multipart uploads of exactly these files' keys, but ``keep``; returns how many.

        One ListMultipartUploads by the keys' common prefix (the checkpoint's), whatever the
        uploads' age. Only uploads whose key is one of these files' are aborted: another
        daemon may be uploading other files of the same checkpoint under the same prefix,
        and a job's lease makes its hop the only writer of its own keys. Never aborts an
        UploadId in ``keep`` (the catalog means to resume it) nor one this backend is
        writing. Raises PermanentBackendError (no such bucket, access denied,
        ListMultipartUploads not supported) or TransientBackendError.
        """
        keys = {self._key(relpath) for relpath in relpaths}
        client = await self.client()
        mine = await open_uploads_of(client, self.bucket, keys)
        return await abort_unless_kept(
            client, self.bucket, self.settings, mine, keep=keep, active=self._active_uploads
        )

    def _identity(self) -> tuple[Any, ...]:
        t = self.tier
        return (t.endpoint_url, t.region, t.access_key_id, _secret(t), t.profile, t.verify_tls)

    def can_copy_from(self, src: Backend) -> bool:
        """True for another S3 tier on the same endpoint with the same credentials."""
        return isinstance(src, S3Backend) and src._identity() == self._identity()

    async def close(self) -> None:
        """Close the client's connections."""
        stack, self._stack, self._client = self._stack, None, None
        if self.fast_path.pipeline is not None:
            self.fast_path.pipeline.close()
        self.fast_path = FastPath()
        if stack is not None:
            await stack.aclose()


def _info(relpath: str, head: HeadObjectOutputTypeDef) -> ObjectInfo:
    return ObjectInfo(
        relpath,
        head["ContentLength"],
        head.get("ChecksumCRC64NVME"),
        head["LastModified"].timestamp(),
        owner=owner_from_metadata(head.get("Metadata")),
    )


def _secret(tier: S3Tier) -> str | None:
    return tier.secret_access_key.get_secret_value() if tier.secret_access_key else None

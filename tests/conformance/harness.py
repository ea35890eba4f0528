"""The conformance harness: the backends under test, their skip list, and test helpers.

A new backend is one entry in ``BACKENDS`` and one branch in ``Harness.make``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import azure_harness
from tests.fixtures.azurite import AzuriteServer
from tests.fixtures.gcsemulator import GcsEmulator
from tests.fixtures.s3servers import S3Server
from tierd.config import PosixTier
from tierd.daemon import checksum
from tierd.daemon.backends import Backend, ByteBudget, PosixBackend, S3Backend
from tierd.daemon.backends.posix.backend import CHUNK_SIZE, TEMP_MARK
from tierd.errors import TransientBackendError

MIB = 1024 * 1024
PART = 5 * MIB  # the smallest part S3 allows; S3 tiers in these tests use it

BACKENDS = ["posix", "s3-moto", "s3-rclone", "gcs", "azure"]

# capability -> why this backend cannot show it. Tests call ``harness.require(capability)``.
SKIP: dict[str, dict[str, str]] = {
    "posix": {},
    "s3-moto": {
        "directories": "an object store has keys, not directories: nothing unrecorded shares a prefix's fate",
        "upload_age": "moto reports Initiated=2010-11-10 for every multipart upload",
    },
    "s3-rclone": {
        "directories": "an object store has keys, not directories: nothing unrecorded shares a prefix's fate",
        "native_checksum": "rclone serve s3 reports no CRC64NVME for multipart objects",
        "multipart_copy": "rclone serve s3 answers UploadPartCopy without an ETag (rclone#7454)",
    },
    # --- GCS (issue 28) ---
    "gcs": {
        "directories": "an object store has keys, not directories: nothing unrecorded shares a prefix's fate",
        "listed_uploads": "the JSON API cannot list resumable sessions: a killed upload leaves no "
        "object, an abandoned session expires after a week",
        "many_objects": "gcp-storage-emulator serves one request at a time in Python: a thousand "
        "writes and deletes take minutes on a loaded 2-core machine",
    },
    # --- end GCS ---
    # --- azure (issue 28) ---
    "azure": {
        "directories": "a container has names, not directories: nothing unrecorded shares a prefix's fate",
        "uploads_per_key": "a blob holds the staged blocks of every attempt together: one leftover per name",
        "abort_drops_blocks": "Azurite keeps the staged blocks of a blob deleted before its commit, and a "
        "later commit of the name uses them (each was CRC64-checked: the bytes are right)",
    },
    # --- end azure ---
}


def crc(data: bytes) -> str:
    """CRC64NVME of ``data`` as S3 spells it."""
    hasher = checksum.Crc64()
    hasher.update(data)
    return hasher.hexdigest()


@dataclass
class Harness:
    """Builds fresh backends of one kind and reaches behind them when a test must."""

    kind: str
    tmp_path: Path
    server: S3Server | AzuriteServer | None = None
    gcs: GcsEmulator | None = None
    created: list[Backend] = field(default_factory=list)

    def require(self, capability: str) -> None:
        """Skip the test when this backend is known not to have ``capability``."""
        reason = SKIP[self.kind].get(capability)
        if reason:
            pytest.skip(reason)

    def skip_reasons(self) -> dict[str, str]:
        """This backend's entry in SKIP."""
        return SKIP[self.kind]

    async def make(
        self,
        *,
        concurrency: int = 4,
        verify: str = "native",
        chunk_size: int | None = None,
        buffered_part_limit: int | None = None,
        budget: int | None = None,
        **s3_options: Any,
    ) -> Backend:
        """A fresh, empty backend (new directory or new bucket)."""
        own_budget = ByteBudget(budget) if budget else None
        backend: Backend
        if self.gcs is not None:  # GCS (issue 28): chunks are the emulator tier's 5 MiB
            from tierd.daemon.backends.gcs import GcsBackend

            backend = GcsBackend(self.gcs.new_tier(concurrency=concurrency, verify=verify), budget=own_budget)
        elif self.server is None:
            root = self.tmp_path / f"root{len(self.created)}"
            root.mkdir()
            tier = PosixTier(name="posix", kind="posix", path=root, concurrency=concurrency, verify=verify)
            backend = PosixBackend(tier, budget=own_budget, chunk_size=chunk_size or CHUNK_SIZE)
        elif isinstance(self.server, AzuriteServer):  # azure (issue 28)
            backend = azure_harness.make(self.server, own_budget, concurrency=concurrency, verify=verify)
        else:
            tier_s3 = self.server.new_tier(concurrency=concurrency, verify=verify)
            if chunk_size:
                s3_options["chunk_size"] = chunk_size
            if buffered_part_limit is not None:
                s3_options["buffered_part_limit"] = buffered_part_limit
            backend = S3Backend(tier_s3, budget=own_budget, **s3_options)
        self.created.append(backend)
        return backend

    def leave_debris(self, backend: Backend, relpath: str) -> str:
        """What a crash mid-write leaves behind: a temp file, or an open multipart upload.

        Returns the temp file's path or the UploadId.
        """
        self.require("listed_uploads")
        if isinstance(backend, PosixBackend):
            path = backend.root / relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.parent / f".{path.name}{TEMP_MARK}deadbeef"
            temp.write_bytes(b"partial")
            return str(temp)
        if azure_harness.is_azure(backend):  # azure (issue 28)
            return azure_harness.leave_debris(backend, relpath)
        assert isinstance(backend, S3Backend)
        assert isinstance(self.server, S3Server)
        created = self.server.client().create_multipart_upload(
            Bucket=backend.bucket, Key=backend.prefix + relpath
        )
        upload_id: str = created["UploadId"]
        return upload_id

    def debris_left(self, backend: Backend) -> list[str]:
        """The relpath each leftover (temp file, open multipart upload) belongs to, sorted."""
        self.require("listed_uploads")
        if isinstance(backend, PosixBackend):
            found = []
            for dirpath, _, names in os.walk(backend.root):
                rel = os.path.relpath(dirpath, backend.root)
                for name in names:
                    if TEMP_MARK in name:
                        final = name[1 : name.index(TEMP_MARK)]
                        found.append(final if rel == "." else f"{rel}/{final}")
            return sorted(found)
        if azure_harness.is_azure(backend):  # azure (issue 28)
            return azure_harness.debris_left(backend)
        assert isinstance(backend, S3Backend)
        assert isinstance(self.server, S3Server)
        listing = self.server.client().list_multipart_uploads(Bucket=backend.bucket)
        return sorted(u["Key"].removeprefix(backend.prefix) for u in listing.get("Uploads", []))

    def abort_behind(self, backend: Backend) -> int:
        """Abort every open multipart upload from outside, as a lifecycle rule would."""
        self.require("listed_uploads")
        if azure_harness.is_azure(backend):  # azure (issue 28)
            return azure_harness.abort_behind(backend)
        assert isinstance(backend, S3Backend)
        assert isinstance(self.server, S3Server)
        client = self.server.client()
        uploads = client.list_multipart_uploads(Bucket=backend.bucket).get("Uploads", [])
        for u in uploads:
            client.abort_multipart_upload(Bucket=backend.bucket, Key=u["Key"], UploadId=u["UploadId"])
        return len(uploads)

    def age_debris(self, backend: Backend, seconds: float) -> bool:
        """Make POSIX temp files look ``seconds`` old; False where ages cannot be faked (S3)."""
        if not isinstance(backend, PosixBackend):
            return False
        when = time.time() - seconds
        for dirpath, _, names in os.walk(backend.root):
            for name in names:
                os.utime(os.path.join(dirpath, name), (when, when))
        return True


class CountingReader:
    """A RangeReader over bytes that counts what was read and can fail past an offset.

    ``fail_when``: the failing read first waits (up to 10 s) until it returns True.
    """

    def __init__(
        self,
        data: bytes,
        *,
        fail_at: int | None = None,
        fail_when: Callable[[], bool] | None = None,
        size: int | None = None,
    ) -> None:
        self._data = memoryview(data)
        self.size = len(data) if size is None else size
        self.fail_at, self.fail_when = fail_at, fail_when
        self.bytes_read = 0
        self.closed = False

    async def read_into(self, offset: int, buf: memoryview) -> int:
        if self.fail_at is not None and offset + len(buf) > self.fail_at:
            deadline = time.monotonic() + 10
            while self.fail_when is not None and not self.fail_when() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            raise TransientBackendError(f"simulated failure reading at {offset}")
        chunk = self._data[offset : offset + len(buf)]
        buf[: len(chunk)] = chunk
        self.bytes_read += len(chunk)
        return len(chunk)

    async def close(self) -> None:
        self.closed = True


async def read_back(backend: Backend, relpath: str) -> bytes:
    """Every byte of an object, through its RangeReader."""
    reader = await backend.open_reader(relpath)
    try:
        buf = bytearray(reader.size)
        view = memoryview(buf)
        filled = 0
        while filled < reader.size:
            n = await reader.read_into(filled, view[filled:])
            assert n > 0, "reader ended early"
            filled += n
        return bytes(buf)
    finally:
        await reader.close()


async def listed(backend: Backend, prefix: str = "") -> list[str]:
    """Sorted relpaths under ``prefix``."""
    return sorted([info.relpath async for info in backend.list(prefix)])

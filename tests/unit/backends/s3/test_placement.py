"""Storage class and server-side encryption on every write path, on moto's server and rclone's.

moto records what each request asked for (HeadObject shows it back). ``rclone serve s3``
keeps the headers as it keeps metadata and shows them back on HeadObject, but neither
encrypts nor moves anything: the file under its directory holds the plain bytes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.conformance.harness import crc
from tests.fixtures.s3servers import S3Server
from tierd.config import S3Tier
from tierd.daemon.backends import BytesReader, S3Backend, WriteRequest
from tierd.daemon.backends.s3.placement import placement_headers, placement_params
from tierd.errors import ObjectArchived

MIB = 1024 * 1024
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/0c6b5e2e-1111-2222-3333-444455556666"
PLACED = {"storage_class": "STANDARD_IA", "server_side_encryption": "aws:kms", "sse_kms_key_id": KMS_KEY}


@pytest.fixture
async def make(moto_server: S3Server) -> AsyncIterator[Callable[..., S3Backend]]:
    made: list[S3Backend] = []

    def build(**tier: Any) -> S3Backend:
        # copy_object_limit: a 6 MiB copy goes as UploadPartCopy, as a copy past 5 GiB would
        backend = S3Backend(moto_server.new_tier(**tier), copy_object_limit=5 * MIB)
        made.append(backend)
        return backend

    yield build
    for backend in made:
        await backend.close()


def placement_of(server: S3Server, bucket: str, key: str) -> tuple[str | None, str | None, str | None]:
    """(storage class, SSE, KMS key id) as another S3 client sees the object."""
    head = server.client().head_object(Bucket=bucket, Key=key)
    return head.get("StorageClass"), head.get("ServerSideEncryption"), head.get("SSEKMSKeyId")


async def put(backend: S3Backend, relpath: str, data: bytes) -> None:
    await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))


async def test_every_write_path_sends_the_class_and_encryption(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    """PutObject (botocore's, then the lean one), multipart, CopyObject and UploadPartCopy."""
    src, dst = make(**PLACED), make(**PLACED)
    small, big = os.urandom(1000), os.urandom(6 * MIB)
    await put(src, "step/first.bin", small)  # botocore: the bucket's route is not known yet
    await put(src, "step/second.bin", small)  # the lean PutObject
    await put(src, "step/big.bin", big)  # multipart (parts of 5 MiB)
    assert src.fast_path.lean is not None
    assert src.fast_path.lean.requests["PutObject"] >= 1
    await dst.copy_from(src, "step/first.bin", "step/copied.bin", crc(small))  # CopyObject
    await dst.copy_from(src, "step/big.bin", "step/big-copied.bin", crc(big))  # UploadPartCopy
    expected = ("STANDARD_IA", "aws:kms", KMS_KEY)
    for backend, key in [
        (src, "step/first.bin"),
        (src, "step/second.bin"),
        (src, "step/big.bin"),
        (dst, "step/copied.bin"),
        (dst, "step/big-copied.bin"),
    ]:
        assert placement_of(moto_server, backend.bucket, key) == expected, key


async def test_a_copy_takes_the_destination_tiers_class_not_the_sources(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    src = make(storage_class="STANDARD_IA", server_side_encryption="AES256")
    dst = make(storage_class="GLACIER_IR", server_side_encryption="AES256")
    data = os.urandom(2000)
    await put(src, "a.bin", data)
    await dst.copy_from(src, "a.bin", "a.bin", crc(data))
    assert placement_of(moto_server, dst.bucket, "a.bin") == ("GLACIER_IR", "AES256", None)


async def test_no_keys_send_nothing(make: Callable[..., S3Backend], moto_server: S3Server) -> None:
    backend = make()
    await put(backend, "a.bin", b"data")
    assert placement_of(moto_server, backend.bucket, "a.bin") == (None, None, None)


async def test_an_archived_object_is_refused_as_archived_and_glacier_ir_reads(
    make: Callable[..., S3Backend],
) -> None:
    data = os.urandom(3000)
    cold, instant = make(storage_class="GLACIER"), make(storage_class="GLACIER_IR")
    for backend in (cold, instant):
        await put(backend, "a.bin", data)  # verified natively: HeadObject works on an archived object
    with pytest.raises(ObjectArchived, match=r"InvalidObjectState.*RestoreObject"):
        await cold.open_reader("a.bin")
    reader = await instant.open_reader("a.bin")
    assert reader.size == len(data)
    await reader.close()


async def test_rclone_serve_s3_echoes_the_headers_and_keeps_plain_bytes(rclone_server: S3Server) -> None:
    backend = S3Backend(rclone_server.new_tier(storage_class="STANDARD_IA", server_side_encryption="AES256"))
    try:
        data = os.urandom(1000)
        await put(backend, "a.bin", data)
        assert (await backend.verify("a.bin", crc(data))).size == len(data)
        head = rclone_server.client().head_object(Bucket=backend.bucket, Key="a.bin")
        assert (head.get("StorageClass"), head.get("ServerSideEncryption")) == ("STANDARD_IA", "AES256")
        assert rclone_server.data_dir is not None
        assert (rclone_server.data_dir / backend.bucket / "a.bin").read_bytes() == data
    finally:
        await backend.close()


def test_params_and_headers_name_only_what_is_set() -> None:
    tier = S3Tier(name="s3", kind="s3", bucket="bucket", **PLACED)
    assert placement_params(tier) == {
        "StorageClass": "STANDARD_IA",
        "ServerSideEncryption": "aws:kms",
        "SSEKMSKeyId": KMS_KEY,
    }
    assert placement_headers(S3Tier(name="s3", kind="s3", bucket="bucket", storage_class="GLACIER")) == [
        ("x-amz-storage-class", "GLACIER")
    ]

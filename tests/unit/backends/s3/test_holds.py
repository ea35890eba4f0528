"""Object Lock legal holds set by ``S3Backend``, enforced by moto's server against a direct delete.

(moto 5.2.5 answers PutObjectLegalHold on a missing key with a 500, not AWS's 404
NoSuchKey, so a missing object is not tested here.)
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conformance.harness import crc
from tests.fixtures.s3servers import S3Server
from tierd.config import PosixTier
from tierd.daemon.backends import BytesReader, PosixBackend, S3Backend, WriteRequest
from tierd.errors import ConfigError, PermanentBackendError

MIB = 1024 * 1024


def locked_bucket(server: S3Server) -> str:
    name = f"tierd-lock-{secrets.token_hex(6)}"
    server.client().create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


@pytest.fixture
async def make(moto_server: S3Server) -> AsyncIterator[Callable[..., S3Backend]]:
    made: list[S3Backend] = []

    def build(**tier: Any) -> S3Backend:
        backend = S3Backend(moto_server.new_tier(**tier))
        made.append(backend)
        return backend

    yield build
    for backend in made:
        await backend.close()


async def test_a_held_version_cannot_be_deleted_until_the_hold_is_cleared(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    backend = make(bucket=locked_bucket(moto_server), object_lock=True)
    await backend.check_legal_hold()
    files = {"step/a.bin": os.urandom(1000), "step/big.bin": os.urandom(6 * MIB)}
    for relpath, data in files.items():
        await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))
    await backend.set_legal_hold(list(files), True)
    s3 = moto_server.client()
    for relpath in files:
        assert s3.get_object_legal_hold(Bucket=backend.bucket, Key=relpath)["LegalHold"]["Status"] == "ON"
        version = s3.head_object(Bucket=backend.bucket, Key=relpath)["VersionId"]
        with pytest.raises(ClientError, match="AccessDenied"):
            s3.delete_object(Bucket=backend.bucket, Key=relpath, VersionId=version)
    await backend.set_legal_hold(list(files), False)
    for relpath in files:
        version = s3.head_object(Bucket=backend.bucket, Key=relpath)["VersionId"]
        s3.delete_object(Bucket=backend.bucket, Key=relpath, VersionId=version)


async def test_a_bucket_without_object_lock_fails_the_check_naming_tier_and_bucket(
    make: Callable[..., S3Backend],
) -> None:
    backend = make(name="cold", object_lock=True)
    with pytest.raises(ConfigError, match=rf"tier cold: object_lock: true, but bucket {backend.bucket}"):
        await backend.check_legal_hold()


async def test_a_posix_tier_keeps_no_holds(tmp_path: Path) -> None:
    backend = PosixBackend(PosixTier(name="nvme", kind="posix", path=tmp_path))
    assert not backend.features.legal_hold
    with pytest.raises(PermanentBackendError, match="keeps no legal holds"):
        await backend.set_legal_hold(["a"], True)

"""A file's recorded owner and mode kept as S3 object metadata (rclone's names), on moto's server."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.conformance.harness import crc
from tests.fixtures.s3servers import S3Server
from tierd.daemon.backends import BytesReader, Ownership, S3Backend, WriteRequest, make_backend

MIB = 1024 * 1024
JOB = Ownership(1234, 1234, 0o640)
AS_RCLONE_WRITES_IT = {"mode": "0100640", "uid": "1234", "gid": "1234"}


@pytest.fixture
async def make(moto_server: S3Server) -> AsyncIterator[Callable[..., S3Backend]]:
    made: list[S3Backend] = []

    def build(**tier: Any) -> S3Backend:
        backend = make_backend(moto_server.new_tier(**tier))
        assert isinstance(backend, S3Backend)
        made.append(backend)
        return backend

    yield build
    for backend in made:
        await backend.close()


def head_metadata(server: S3Server, backend: S3Backend, relpath: str) -> dict[str, str]:
    """The object's user metadata, as another S3 client sees it."""
    return dict(server.client().head_object(Bucket=backend.bucket, Key=relpath)["Metadata"])


async def put(backend: S3Backend, relpath: str, data: bytes, owner: Ownership | None = JOB) -> None:
    await backend.write(WriteRequest(relpath, BytesReader(data), crc(data), owner=owner))


async def test_put_lean_put_and_multipart_carry_the_owner_and_stat_reads_it_back(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    backend = make()
    await put(backend, "step/first.bin", os.urandom(1000))  # botocore: the bucket's route is not known yet
    await put(backend, "step/second.bin", os.urandom(1000))  # the lean PutObject
    await put(backend, "step/big.bin", os.urandom(6 * MIB))  # multipart (parts of 5 MiB)
    assert backend.fast_path.lean is not None
    assert backend.fast_path.lean.requests["PutObject"] >= 1
    for relpath in ("step/first.bin", "step/second.bin", "step/big.bin"):
        assert head_metadata(moto_server, backend, relpath) == AS_RCLONE_WRITES_IT, relpath
        assert (await backend.stat(relpath)).owner == JOB, relpath  # the lean HeadObject
    plain = make(fast_path="off", bucket=backend.bucket)
    assert (await plain.stat("step/big.bin")).owner == JOB  # botocore's HeadObject


async def test_no_recorded_owner_sends_no_metadata(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    backend = make()
    await put(backend, "a.bin", b"data", owner=None)
    assert head_metadata(moto_server, backend, "a.bin") == {}
    assert (await backend.stat("a.bin")).owner is None


async def test_a_server_side_copy_keeps_the_owner_or_takes_the_one_given(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    src, dst = make(), make()
    data = os.urandom(3000)
    await put(src, "ckpt/x.bin", data)
    assert dst.can_copy_from(src)
    await dst.copy_from(src, "ckpt/x.bin", "ckpt/kept.bin", crc(data))
    assert (await dst.stat("ckpt/kept.bin")).owner == JOB
    other = Ownership(4321, 99, 0o600)
    await dst.copy_from(src, "ckpt/x.bin", "ckpt/given.bin", crc(data), owner=other)
    given = head_metadata(moto_server, dst, "ckpt/given.bin")
    assert given == {"mode": "0100600", "uid": "4321", "gid": "99"}


@pytest.mark.parametrize(
    ("metadata", "owner"),
    [
        ({"mode": "100600", "uid": "5", "gid": "6"}, Ownership(5, 6, 0o600)),  # rclone without the 0
        ({"mode": "0104755", "uid": "0", "gid": "0"}, Ownership(0, 0, 0o4755)),  # bits as recorded
        ({"mode": "0640", "uid": "1"}, None),  # no gid
        ({"mode": "rw-r-----", "uid": "1", "gid": "1"}, None),
        ({"mode": "0640", "uid": "-1", "gid": "1"}, None),
        ({"mode": "0640", "uid": str(2**32 - 1), "gid": "1"}, None),  # chown's "leave it"
    ],
)
async def test_metadata_another_writer_left_is_read_or_ignored(
    make: Callable[..., S3Backend], moto_server: S3Server, metadata: dict[str, str], owner: Ownership | None
) -> None:
    backend = make(fast_path="off")
    moto_server.client().put_object(Bucket=backend.bucket, Key="f", Body=b"x", Metadata=metadata)
    assert (await backend.stat("f")).owner == owner

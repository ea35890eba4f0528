"""S3 specifics against moto's real server: resume edge cases, prefixes, errors, headers."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.conformance.harness import CountingReader, crc, read_back
from tests.fixtures.s3servers import S3Server
from tierd.daemon.backends import (
    BytesReader,
    MemoryResumeStore,
    PartState,
    PosixBackend,
    S3Backend,
    UploadState,
    WriteRequest,
    make_backend,
)
from tierd.errors import NotFound, PermanentBackendError, TransientBackendError

MIB = 1024 * 1024
PART = 5 * MIB


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


def open_uploads(server: S3Server, backend: S3Backend) -> list[str]:
    listing = server.client().list_multipart_uploads(Bucket=backend.bucket)
    return [u["Key"] for u in listing.get("Uploads", [])]


async def interrupted(backend: S3Backend, relpath: str, data: bytes, store: MemoryResumeStore) -> None:
    with pytest.raises(TransientBackendError):
        await backend.write(
            WriteRequest(relpath, CountingReader(data, fail_at=2 * PART), crc(data), resume=store)
        )


async def test_resume_state_for_another_size_starts_over(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    backend = make(concurrency=1)
    store = MemoryResumeStore()
    old = os.urandom(3 * PART)
    await interrupted(backend, "x.bin", old, store)
    assert open_uploads(moto_server, backend) == ["x.bin"]
    new = os.urandom(3 * PART + 1)  # the file changed before the restart
    reader = CountingReader(new)
    await backend.write(WriteRequest("x.bin", reader, crc(new), resume=store))
    assert reader.bytes_read == len(new)
    assert open_uploads(moto_server, backend) == []  # the stale upload was aborted
    assert await read_back(backend, "x.bin") == new


async def test_resume_reuploads_parts_the_store_does_not_hold(make: Callable[..., S3Backend]) -> None:
    backend = make(concurrency=1)
    store = MemoryResumeStore()
    data = os.urandom(3 * PART)
    await interrupted(backend, "x.bin", data, store)
    state = store.states["x.bin"]
    forged = PartState(2, PART, "0" * 32, state.parts[1].checksum)  # an ETag the store never issued
    store.states["x.bin"] = UploadState(
        state.upload_id, state.key, state.part_size, state.size, (state.parts[0], forged)
    )
    reader = CountingReader(data)
    await backend.write(WriteRequest("x.bin", reader, crc(data), resume=store))
    assert reader.bytes_read == 2 * PART  # part 1 reused; parts 2 and 3 sent
    assert await read_back(backend, "x.bin") == data


async def test_resume_keeps_the_recorded_part_size(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    first = make(concurrency=1)
    store = MemoryResumeStore()
    data = os.urandom(3 * PART)
    await interrupted(first, "x.bin", data, store)
    tier = first.tier.model_copy(update={"part_size": 6 * MIB})  # config changed meanwhile
    second = S3Backend(tier)
    try:
        reader = CountingReader(data)
        await second.write(WriteRequest("x.bin", reader, crc(data), resume=store))
        assert reader.bytes_read == PART
    finally:
        await second.close()


class UnrecordableStore(MemoryResumeStore):
    """A resume store whose catalog write fails, as a busy or unreachable catalog's does."""

    async def begin(self, relpath: str, state: UploadState) -> None:
        raise TransientBackendError("catalog: database is locked")


async def test_an_upload_the_catalog_could_not_record_is_aborted(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    backend = make(concurrency=1)
    data = os.urandom(3 * PART)
    with pytest.raises(TransientBackendError, match="database is locked"):
        await backend.write(WriteRequest("x.bin", BytesReader(data), crc(data), resume=UnrecordableStore()))
    # no later attempt would know to resume it, so nothing may hold it open
    assert open_uploads(moto_server, backend) == []


async def test_prefix_scopes_keys_listing_and_cleanup(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    backend = make(prefix="cluster-a/ckpt")
    assert backend.prefix == "cluster-a/ckpt/"
    await backend.write(WriteRequest("run/x.bin", BytesReader(b"abc"), crc(b"abc")))
    client = moto_server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=backend.bucket)["Contents"]]
    assert keys == ["cluster-a/ckpt/run/x.bin"]
    client.put_object(Bucket=backend.bucket, Key="cluster-a/other.bin", Body=b"x")
    client.create_multipart_upload(Bucket=backend.bucket, Key="elsewhere/y.bin")
    client.create_multipart_upload(Bucket=backend.bucket, Key="cluster-a/ckpt/run/y.bin")
    assert [i.relpath async for i in backend.list()] == ["run/x.bin"]
    assert await backend.abort_stale_uploads(0) == 1
    assert open_uploads(moto_server, backend) == ["elsewhere/y.bin"]
    assert backend.location("run/x.bin") == f"s3://{backend.bucket}/cluster-a/ckpt/run/x.bin"


async def test_a_key_past_1024_bytes_is_refused_before_any_request(
    make: Callable[..., S3Backend], moto_server: S3Server
) -> None:
    """AWS refuses a key over 1,024 bytes of UTF-8; moto takes it, so tierd must not rely on the store."""
    backend = make(prefix="ckpt")
    longest = "run/" + "é" * 506 + "xxx"  # 1,024 bytes with the prefix "ckpt/"; "é" is 2 bytes
    data = b"abc"
    await backend.write(WriteRequest(longest, BytesReader(data), crc(data)))
    assert await read_back(backend, longest) == data
    sent: list[str] = []
    await backend.observe(sent.append)
    too_long = longest + "x"
    with pytest.raises(
        PermanentBackendError, match=r"the object key is 1,025 bytes in UTF-8; S3 takes at most 1,024"
    ):
        await backend.write(WriteRequest(too_long, BytesReader(data), crc(data)))
    with pytest.raises(PermanentBackendError, match="1,025 bytes"):
        await backend.copy_from(backend, longest, too_long, crc(data))
    assert sent == []  # refused before any request
    assert backend.location(too_long).endswith(too_long)  # naming it sends nothing, so it is no error
    moto_server.client().put_object(Bucket=backend.bucket, Key="ckpt/" + too_long, Body=data)  # moto took it


async def test_small_objects_carry_their_crc64nvme(make: Callable[..., S3Backend]) -> None:
    backend = make()
    data = os.urandom(1000)
    info = await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))
    assert info.verified_by == "store"
    assert (await backend.stat("s.bin")).checksum == crc(data)


async def test_bad_credentials_are_permanent(moto_server: S3Server, rclone_server: S3Server) -> None:
    backend = S3Backend(rclone_server.new_tier(secret_access_key="not-the-secret-key-000000000000000000000"))
    try:
        with pytest.raises(PermanentBackendError):
            await backend.write(WriteRequest("x.bin", BytesReader(b"x"), crc(b"x")))
        with pytest.raises(PermanentBackendError):
            [i async for i in backend.list()]
    finally:
        await backend.close()


async def test_a_missing_bucket_is_permanent(moto_server: S3Server) -> None:
    backend = S3Backend(moto_server.new_tier(bucket="tierd-no-such-bucket"))
    try:
        with pytest.raises(PermanentBackendError, match="NoSuchBucket"):
            await backend.write(WriteRequest("x.bin", BytesReader(b"x"), crc(b"x")))
        with pytest.raises(PermanentBackendError, match="NoSuchBucket"):
            [i async for i in backend.list()]
        with pytest.raises(NotFound):  # HEAD answers a bare 404: indistinguishable
            await backend.stat("x.bin")
    finally:
        await backend.close()


async def test_an_unreachable_endpoint_is_transient(moto_server: S3Server) -> None:
    tier = moto_server.new_tier().model_copy(update={"endpoint_url": "http://127.0.0.1:9"})
    backend = S3Backend(tier)
    try:
        with pytest.raises(TransientBackendError):
            await backend.stat("x.bin")
    finally:
        await backend.close()


async def test_server_side_copy_needs_the_same_store(make: Callable[..., S3Backend], tmp_path: Any) -> None:
    a, b = make(), make()
    other = make(access_key_id="AKIAOTHERKEY00000001")
    assert a.can_copy_from(b)
    assert b.can_copy_from(a)
    assert not a.can_copy_from(other)
    from tierd.config import PosixTier

    posix = PosixBackend(PosixTier(name="p", kind="posix", path=tmp_path))
    assert not a.can_copy_from(posix)
    assert not posix.can_copy_from(a)
    with pytest.raises(ValueError, match="server-side"):
        await a.copy_from(other, "x", "y", crc(b""))

"""Which requests the S3 backend sends, against both real servers (moto, rclone serve s3).

Reads open with one GET and no HeadObject. A small upload is verified by the PutObject
answer: the checksum where the store reports it there (moto), else an ETag that is the
MD5 of the bytes sent with their Content-MD5 (rclone); past ``MD5_LIMIT``, or with an ETag
that is not the MD5, by a HeadObject. A read-back hashes ranges in parallel, pinned to
one ETag. Counts include the lean requests of ``s3.fast.lean`` and the pipelined GETs of
``s3.fast.pipelined_gets``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import botocore.loaders
import botocore.utils
import pytest

from tests.conformance.harness import crc, read_back
from tests.fixtures.s3servers import S3Server
from tierd.daemon.backends import BytesReader, S3Backend, WriteRequest
from tierd.daemon.backends.s3.backend import OPEN_RANGE, pool_size
from tierd.daemon.backends.s3.client import USER_AGENT, parse_timestamp
from tierd.daemon.backends.s3.fast.endpoints import referenced_parameters
from tierd.daemon.backends.s3.reads import hash_ranges
from tierd.daemon.backends.s3.writes import MD5_LIMIT, PutAnswer
from tierd.errors import IntegrityError, NotFound, PermanentBackendError, TransientBackendError

MIB = 1024 * 1024


class Calls:
    """Counts the operations a backend's client sends."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def __call__(self, operation: str) -> None:
        self.seen[operation] += 1

    def take(self) -> Counter[str]:
        """What was sent since the last call."""
        seen, self.seen = self.seen, Counter()
        return seen


@pytest.fixture
async def backend(s3_server: S3Server) -> AsyncIterator[S3Backend]:
    backend = S3Backend(s3_server.new_tier())
    yield backend
    await backend.close()


async def counted(backend: S3Backend) -> Calls:
    calls = Calls()
    await backend.observe(calls)
    return calls


async def test_a_small_object_is_read_with_one_get(backend: S3Backend) -> None:
    data = os.urandom(3000)
    await backend.write(WriteRequest("a/small.bin", BytesReader(data), crc(data)))
    calls = await counted(backend)
    assert await read_back(backend, "a/small.bin") == data
    assert calls.take() == Counter({"GetObject": 1})


async def test_a_group_of_small_objects_is_read_with_one_get_each(
    backend: S3Backend, s3_server: S3Server
) -> None:
    files = {f"g/f{n}.bin": os.urandom(2000 + n) for n in range(4)}
    files["g/big.bin"] = os.urandom(OPEN_RANGE + 10)  # past what one lean GET takes
    for relpath, data in files.items():
        await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))
    calls = await counted(backend)
    for _ in range(2):  # moto's first group finds that it cannot be pipelined (test_s3_pipeline)
        calls.take()
        views = [memoryview(bytearray(len(data))) for data in files.values()]
        assert await backend.read_whole(list(files), views) == [None] * len(files)
        assert [bytes(view) for view in views] == list(files.values())
    if s3_server.kind == "rclone":  # pipelined, the big one too
        assert calls.take() == Counter({"GetObject": len(files)})
    else:  # one by one: the big one through a reader (opening GET + the rest)
        assert calls.take() == Counter({"GetObject": len(files) + 1})


async def test_reads_use_the_opening_get_and_range_the_rest(backend: S3Backend) -> None:
    data = os.urandom(3 * MIB + 17)
    await backend.write(WriteRequest("big.bin", BytesReader(data), crc(data)))
    calls = await counted(backend)
    reader = await backend.open_reader("big.bin")
    try:
        assert reader.size == len(data)
        assert calls.take() == Counter({"GetObject": 1})
        piece = memoryview(bytearray(OPEN_RANGE // 4))
        for offset in (OPEN_RANGE // 2, 0, OPEN_RANGE // 4):  # within the opening range: no request
            assert await reader.read_into(offset, piece) == len(piece)
            assert piece == data[offset : offset + len(piece)]
        assert calls.take() == Counter()
        rest = memoryview(bytearray(len(data)))
        n = await reader.read_into(OPEN_RANGE // 2, rest)  # across its end: finished by one GET
        assert n == len(data) - OPEN_RANGE // 2
        assert rest[:n] == data[OPEN_RANGE // 2 :]
        assert await reader.read_into(2 * MIB, piece) == len(piece)  # past it: one GET
        assert piece == data[2 * MIB : 2 * MIB + len(piece)]
        assert await reader.read_into(len(data), piece) == 0
    finally:
        await reader.close()
    assert calls.take() == Counter({"GetObject": 2})


async def test_open_readers_hold_no_connection(backend: S3Backend) -> None:
    data = os.urandom(2 * MIB)
    await backend.write(WriteRequest("x.bin", BytesReader(data), crc(data)))
    readers = [await backend.open_reader("x.bin") for _ in range(2 * pool_size(backend.tier.concurrency))]
    try:
        buf = memoryview(bytearray(MIB))
        for reader in readers:  # every one can still read past its opening range
            assert await reader.read_into(MIB, buf) == MIB
            assert buf == data[MIB:]
    finally:
        for reader in readers:
            await reader.close()


async def test_opening_a_missing_object_is_not_found(backend: S3Backend) -> None:
    with pytest.raises(NotFound):
        await backend.open_reader("nope.bin")


async def test_an_empty_object_opens_without_a_range(backend: S3Backend) -> None:
    await backend.write(WriteRequest("empty.bin", BytesReader(b""), crc(b"")))
    reader = await backend.open_reader("empty.bin")
    try:
        assert reader.size == 0
        assert await reader.read_into(0, memoryview(bytearray(10))) == 0
    finally:
        await reader.close()


@pytest.mark.parametrize("size", [0, 5000, MD5_LIMIT])
async def test_small_uploads_are_verified_by_the_put_answer(backend: S3Backend, size: int) -> None:
    calls = await counted(backend)
    data = os.urandom(size)
    info = await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))
    assert (info.checksum, info.verified_by, info.size) == (crc(data), "store", len(data))
    # moto reports the CRC64NVME in its answer; rclone an ETag that is the MD5 of the bytes.
    assert calls.take() == Counter({"PutObject": 1})


async def test_past_the_md5_limit_a_put_answer_needs_its_checksum(
    backend: S3Backend, s3_server: S3Server
) -> None:
    calls = await counted(backend)
    data = os.urandom(MD5_LIMIT + 1)
    info = await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))
    assert (info.checksum, info.verified_by) == (crc(data), "store")
    if s3_server.kind == "moto":  # reports the CRC64NVME in the PutObject answer
        assert calls.take() == Counter({"PutObject": 1})
    else:  # rclone answers PutObject with an ETag only, and no MD5 went with the bytes
        assert calls.take() == Counter({"PutObject": 1, "HeadObject": 1})


async def test_a_wrong_content_md5_is_never_taken_for_proof(
    backend: S3Backend, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(5000)

    async def wrong_md5(
        self: S3Backend, key: str, view: memoryview, crc: str, md5: bytes | None, *rest: Any
    ) -> Any:
        return await original(self, key, view, crc, bytes(16), *rest)

    original = S3Backend._put
    monkeypatch.setattr(S3Backend, "_put", wrong_md5)
    if s3_server.kind == "rclone":  # checks Content-MD5 against the bytes, as AWS does
        with pytest.raises(IntegrityError, match="BadDigest"):
            await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))
        return
    info = await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))  # moto does not
    assert info.verified_by == "store"  # by the CRC64NVME in its answer, not by the ETag


async def test_an_etag_that_is_not_the_md5_leads_to_a_headobject(
    backend: S3Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def opaque_etag(
        self: S3Backend, key: str, view: memoryview, crc: str, md5: bytes | None, *rest: Any
    ) -> Any:
        await original(self, key, view, crc, md5, *rest)
        return {"ETag": '"0123456789abcdef0123456789abcdef-1"'}  # as SSE-KMS answers

    original = S3Backend._put
    monkeypatch.setattr(S3Backend, "_put", opaque_etag)
    calls = await counted(backend)
    data = os.urandom(5000)
    info = await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))
    assert (info.checksum, info.verified_by) == (crc(data), "store")
    assert calls.take() == Counter({"PutObject": 1, "HeadObject": 1})


async def test_a_put_answer_with_another_checksum_is_a_mismatch(
    backend: S3Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(5000)

    async def lying_put(self: S3Backend, key: str, reader: Any, expected: str, *rest: Any) -> PutAnswer:
        await original(self, key, reader, expected, *rest)
        return PutAnswer(crc(b"something else"), md5_confirmed=True)

    original = S3Backend._put_small
    monkeypatch.setattr(S3Backend, "_put_small", lying_put)
    with pytest.raises(IntegrityError, match="store-reported"):
        await backend.write(WriteRequest("s.bin", BytesReader(data), crc(data)))
    with pytest.raises(NotFound):  # nothing left under the name
        await backend.stat("s.bin")


async def test_readback_hashes_ranges_in_parallel(backend: S3Backend) -> None:
    data = os.urandom(3 * MIB + 12345)
    await backend.write(WriteRequest("r.bin", BytesReader(data), crc(data)))
    client = await backend.client()
    head = await client.head_object(Bucket=backend.bucket, Key=backend._key("r.bin"))
    ranges = backend._ranges(client, "r.bin", head["ETag"])
    calls = await counted(backend)
    assert await hash_ranges(ranges, len(data), 4, range_size=MIB) == crc(data)
    assert calls.take() == Counter({"GetObject": 4})
    assert await backend.hash("r.bin") == crc(data)


async def test_readback_takes_no_botocore_get_on_a_custom_endpoint(
    backend: S3Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-back's pieces come straight from the socket into budget buffers (``reads.DIRECT_PIECE``)."""
    data = os.urandom(3 * MIB + 12345)
    await backend.write(WriteRequest("r.bin", BytesReader(data), crc(data)))
    client = await backend.client()
    head = await client.head_object(Bucket=backend.bucket, Key=backend._key("r.bin"))

    async def botocore_get(**_: Any) -> Any:
        raise AssertionError("a read-back piece went through botocore")

    monkeypatch.setattr(client, "get_object", botocore_get)
    ranges = backend._ranges(client, "r.bin", head["ETag"])
    calls = await counted(backend)
    assert await hash_ranges(ranges, len(data), 4, range_size=MIB) == crc(data)
    assert calls.take() == Counter({"GetObject": 4})


async def test_readback_falls_back_to_botocore_where_a_direct_get_fails(backend: S3Backend) -> None:
    data = os.urandom(2 * MIB + 3)
    await backend.write(WriteRequest("r.bin", BytesReader(data), crc(data)))
    client = await backend.client()
    head = await client.head_object(Bucket=backend.bucket, Key=backend._key("r.bin"))
    ranges = backend._ranges(client, "r.bin", head["ETag"])
    refused: list[int] = []

    async def refusing(key: str, etag: str | None, first: int, view: memoryview) -> bool:
        refused.append(first)
        return False

    ranges.direct = refusing
    assert await hash_ranges(ranges, len(data), 2, range_size=MIB) == crc(data)
    assert sorted(refused) == [0, MIB, 2 * MIB]


async def test_readback_refuses_a_replaced_object(backend: S3Backend, s3_server: S3Server) -> None:
    data = os.urandom(2 * MIB)
    await backend.write(WriteRequest("r.bin", BytesReader(data), crc(data)))
    client = await backend.client()
    head = await client.head_object(Bucket=backend.bucket, Key=backend._key("r.bin"))
    s3_server.client().put_object(Bucket=backend.bucket, Key=backend._key("r.bin"), Body=b"other")
    ranges = backend._ranges(client, "r.bin", head["ETag"])
    # moto answers 412 (If-Match); rclone ignores If-Match and sends the new, shorter body
    with pytest.raises((PermanentBackendError, TransientBackendError)):
        await hash_ranges(ranges, len(data), 2, range_size=MIB)


def test_endpoint_rules_never_read_the_key() -> None:
    rules = botocore.loaders.create_loader().load_service_model("s3", "endpoint-rule-set-1")
    used = referenced_parameters(rules)
    assert {"Bucket", "Region", "Endpoint", "ForcePathStyle"} <= used
    assert not {"Key", "Prefix", "CopySource"} & used


def test_the_pool_covers_parts_of_every_file() -> None:
    assert pool_size(1) == 10
    assert pool_size(4) == 20
    assert pool_size(20) == 20 * (16 + 1)  # parts of one file stop at REQUESTS_PER_FILE
    assert pool_size(256) == 512


@pytest.mark.parametrize(
    "text",
    [
        "Sun, 22 Nov 2026 05:24:59 GMT",
        "2026-11-22T05:24:59.000Z",
        "2026-11-22T05:24:59Z",
        "2026-11-22T05:24:59",  # no zone: botocore's parser
        "1795152299",  # epoch seconds: botocore's parser
    ],
)
def test_timestamps_parse_as_botocore_does(text: str) -> None:
    ours, theirs = parse_timestamp(text), botocore.utils.parse_timestamp(text)
    assert (ours.tzinfo is None) == (theirs.tzinfo is None)
    assert ours == theirs


async def test_stat_and_list_times_are_aware(backend: S3Backend) -> None:
    await backend.write(WriteRequest("t.bin", BytesReader(b"t"), crc(b"t")))
    stat = await backend.stat("t.bin")
    listed = [info async for info in backend.list()]
    assert stat.mtime is not None
    assert abs(stat.mtime - time.time()) < 3600
    assert [i.relpath for i in listed] == ["t.bin"]
    assert listed[0].mtime is not None
    assert abs(listed[0].mtime - stat.mtime) < 2


async def test_requests_carry_tierds_user_agent(backend: S3Backend) -> None:
    sent: list[str] = []

    def record(request: Any, **_: Any) -> None:
        agent = request.headers["User-Agent"]
        sent.append(agent.decode() if isinstance(agent, bytes) else agent)

    (await backend.client()).meta.events.register("before-send.s3", record)
    await backend.write(WriteRequest("u.bin", BytesReader(b"u"), crc(b"u")))
    assert sent
    assert all(agent.startswith(USER_AGENT) for agent in sent)

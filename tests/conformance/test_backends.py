"""The backend conformance suite: every backend must pass it, bar its declared skips."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.conformance.harness import PART, CountingReader, Harness, crc, listed, read_back
from tierd.daemon.backends import (
    Backend,
    BytesReader,
    MemoryResumeStore,
    ObjectInfo,
    SmallFile,
    WriteRequest,
    copy_object,
)
from tierd.errors import IntegrityError, NotFound, TransientBackendError

MIB = 1024 * 1024
MULTIPART_SIZE = 2 * PART + 12_345  # three parts, the last one short


async def write_bytes(backend: Backend, relpath: str, data: bytes) -> ObjectInfo:
    return await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))


async def test_write_stat_list_read_back(backend: Backend) -> None:
    data = os.urandom(100_000)
    info = await backend.write(WriteRequest("run1/step1/shard.bin", BytesReader(data), crc(data)))
    assert (info.relpath, info.size, info.checksum) == ("run1/step1/shard.bin", len(data), crc(data))
    assert info.verified_by in ("store", "readback", "stream")
    stat = await backend.stat("run1/step1/shard.bin")
    assert stat.size == len(data)
    assert stat.mtime is not None
    assert await listed(backend) == ["run1/step1/shard.bin"]
    assert await read_back(backend, "run1/step1/shard.bin") == data
    assert await backend.hash("run1/step1/shard.bin") == crc(data)


async def test_empty_file(backend: Backend) -> None:
    info = await backend.write(WriteRequest("empty/.metadata", BytesReader(b""), crc(b"")))
    assert info.size == 0
    assert info.checksum == crc(b"") == "AAAAAAAAAAA="
    assert (await backend.stat("empty/.metadata")).size == 0
    assert await read_back(backend, "empty/.metadata") == b""
    assert await backend.hash("empty/.metadata") == crc(b"")


@pytest.mark.parametrize("streamed", [False, True], ids=["buffered-parts", "streamed-parts"])
async def test_larger_than_one_part(harness: Harness, streamed: bool) -> None:
    # streamed: parts bigger than the buffering limit are read and hashed chunk by chunk
    limit = 1 * MIB if streamed else None
    backend = await harness.make(chunk_size=1 * MIB, buffered_part_limit=limit, budget=8 * MIB)
    data = os.urandom(MULTIPART_SIZE)
    seen: list[int] = []
    info = await backend.write(
        WriteRequest("big/model.pt", BytesReader(data), crc(data), progress=seen.append)
    )
    assert info.size == len(data)
    assert info.checksum == crc(data)
    assert sum(seen) == len(data)
    assert await read_back(backend, "big/model.pt") == data
    assert await backend.hash("big/model.pt") == crc(data)


@pytest.mark.parametrize("size", [1000, MULTIPART_SIZE], ids=["small", "multipart"])
async def test_checksum_mismatch_leaves_nothing(backend: Backend, size: int) -> None:
    data = os.urandom(size)
    with pytest.raises(IntegrityError):
        await backend.write(WriteRequest("bad/x.bin", BytesReader(data), crc(b"other")))
    with pytest.raises(NotFound):
        await backend.stat("bad/x.bin")
    assert await listed(backend) == []
    assert await backend.abort_stale_uploads(0) == 0  # the upload (or temp file) is gone too


async def test_mismatch_keeps_the_previous_version(backend: Backend) -> None:
    old = os.urandom(MULTIPART_SIZE)
    await write_bytes(backend, "ckpt/w.bin", old)
    with pytest.raises(IntegrityError):
        await backend.write(WriteRequest("ckpt/w.bin", BytesReader(os.urandom(len(old))), crc(b"x")))
    assert await read_back(backend, "ckpt/w.bin") == old


async def test_source_shorter_than_its_size(backend: Backend) -> None:
    data = os.urandom(1000)
    with pytest.raises(IntegrityError, match="ended"):
        await backend.write(WriteRequest("short.bin", CountingReader(data, size=2000), crc(data)))
    assert await listed(backend) == []


async def test_overwrite_replaces(backend: Backend) -> None:
    await write_bytes(backend, "a/latest", b"global_step100")
    await write_bytes(backend, "a/latest", b"global_step200")
    assert await read_back(backend, "a/latest") == b"global_step200"
    assert await listed(backend) == ["a/latest"]


async def test_delete_is_idempotent(backend: Backend) -> None:
    await backend.delete("never/existed.bin")
    await write_bytes(backend, "d/e/f.bin", b"bytes")
    await backend.delete("d/e/f.bin")
    with pytest.raises(NotFound):
        await backend.stat("d/e/f.bin")
    await backend.delete("d/e/f.bin")
    assert await listed(backend) == []


async def test_missing_objects_raise_not_found(backend: Backend) -> None:
    for call in (backend.stat, backend.open_reader, backend.hash):
        with pytest.raises(NotFound):
            await call("no/such/file.bin")
    with pytest.raises(NotFound):
        await backend.verify("no/such/file.bin", crc(b""))
    assert await listed(backend, "no/such") == []


@pytest.mark.parametrize("bad", ["", "/abs/path", "../escape", "a/../b", "a//b", "./a", "a/.", "dir/"])
async def test_bad_relpaths_are_refused(backend: Backend, bad: str) -> None:
    with pytest.raises(ValueError, match="path"):
        await backend.stat(bad)
    with pytest.raises(ValueError, match="path"):
        await write_bytes(backend, bad, b"x")


async def test_range_reader(backend: Backend) -> None:
    data = os.urandom(3000)
    await write_bytes(backend, "r.bin", data)
    reader = await backend.open_reader("r.bin")
    try:
        assert reader.size == 3000
        buf = memoryview(bytearray(1000))
        assert await reader.read_into(1000, buf) == 1000
        assert bytes(buf) == data[1000:2000]
        assert await reader.read_into(2500, buf) == 500
        assert bytes(buf[:500]) == data[2500:]
        assert await reader.read_into(3000, buf) == 0
    finally:
        await reader.close()


async def test_hash_and_verify(backend: Backend) -> None:
    data = os.urandom(50_000)
    await write_bytes(backend, "v/w.bin", data)
    assert await backend.hash("v/w.bin") == crc(data)
    info = await backend.verify("v/w.bin", crc(data))
    assert info.checksum == crc(data)
    assert info.verified_by in ("store", "readback", "stream")
    with pytest.raises(IntegrityError):
        await backend.verify("v/w.bin", crc(b"something else"))
    assert await read_back(backend, "v/w.bin") == data  # verify never deletes


async def test_native_checksum_is_reported_by_the_store(harness: Harness) -> None:
    backend = await harness.make()
    if not backend.features.native_checksum:
        pytest.skip(f"{harness.kind} has no native checksum")
    harness.require("native_checksum")
    data = os.urandom(MULTIPART_SIZE)
    info = await write_bytes(backend, "n/m.bin", data)
    assert info.verified_by == "store"
    assert (await backend.stat("n/m.bin")).checksum == crc(data)


async def test_readback_verification_mode(harness: Harness) -> None:
    backend = await harness.make(verify="readback")
    data = os.urandom(MULTIPART_SIZE)
    info = await write_bytes(backend, "rb.bin", data)
    assert info.verified_by == "readback"
    assert info.checksum == crc(data)


@pytest.mark.parametrize(
    "relpath",
    [
        "dir with spaces/file name.bin",
        "ünïcödé/检查点/ckpt-Ω.pt",
        "odd/a+b=c&d,e;f@g.bin",
        "pct/100%done#1.bin",
    ],
)
async def test_awkward_names(backend: Backend, relpath: str) -> None:
    data = os.urandom(2000)
    await write_bytes(backend, relpath, data)
    assert await listed(backend) == [relpath]
    assert (await backend.stat(relpath)).size == 2000
    assert await read_back(backend, relpath) == data
    await backend.delete(relpath)
    assert await listed(backend) == []


async def test_nested_directories_and_prefixes(backend: Backend) -> None:
    names = ["a/b/c.bin", "a/b/e/f.bin", "a/bc/d.bin", "top.bin"]
    for name in names:
        await write_bytes(backend, name, name.encode())
    assert await listed(backend) == sorted(names)
    assert await listed(backend, "a/b") == ["a/b/c.bin", "a/b/e/f.bin"]
    assert await listed(backend, "a/b/") == ["a/b/c.bin", "a/b/e/f.bin"]
    assert await listed(backend, "a/b/e") == ["a/b/e/f.bin"]
    assert await listed(backend, "nope") == []
    sizes = {info.relpath: info.size async for info in backend.list("a")}
    assert sizes == {name: len(name) for name in names if name.startswith("a/")}


async def test_concurrent_writes(harness: Harness) -> None:
    backend = await harness.make(concurrency=2, budget=16 * MIB)
    blobs = {f"c/rank{i}.bin": os.urandom(300_000) for i in range(8)}
    blobs |= {f"c/big{i}.bin": os.urandom(PART + 1000) for i in range(2)}
    infos = await asyncio.gather(*(write_bytes(backend, name, data) for name, data in blobs.items()))
    assert len(infos) == len(blobs)
    assert await listed(backend, "c") == sorted(blobs)
    for name, data in blobs.items():
        assert await read_back(backend, name) == data


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_resume_skips_finished_parts(harness: Harness, concurrency: int) -> None:
    backend = await harness.make(concurrency=concurrency)
    if not backend.features.multipart:
        pytest.skip(f"{harness.kind} writes are not resumable")
    data = os.urandom(3 * PART + 4321)
    store = MemoryResumeStore()

    def two_parts_done() -> bool:
        state = store.states.get("res/x.bin")
        return state is not None and len(state.parts) >= 2

    # Reading part 3 fails, once parts 1 and 2 are in (as when the daemon is killed).
    failing = CountingReader(data, fail_at=2 * PART + 10, fail_when=two_parts_done)
    with pytest.raises(TransientBackendError, match="simulated"):
        await backend.write(WriteRequest("res/x.bin", failing, crc(data), resume=store))
    with pytest.raises(NotFound):
        await backend.stat("res/x.bin")  # nothing visible mid-upload
    finished = {p.part_number: p.size for p in store.states["res/x.bin"].parts}
    assert sorted(finished) == [1, 2]

    again = CountingReader(data)
    seen: list[int] = []
    info = await backend.write(
        WriteRequest("res/x.bin", again, crc(data), resume=store, progress=seen.append)
    )
    assert again.bytes_read == len(data) - sum(finished.values())  # finished parts not re-sent
    assert sum(seen) == len(data)
    assert info.checksum == crc(data)
    assert store.states == {}
    assert await read_back(backend, "res/x.bin") == data


async def test_resume_when_the_upload_vanished(harness: Harness) -> None:
    harness.require("listed_uploads")
    backend = await harness.make(concurrency=1)
    if not backend.features.multipart:
        pytest.skip(f"{harness.kind} writes are not resumable")
    data = os.urandom(2 * PART + 99)
    store = MemoryResumeStore()
    with pytest.raises(TransientBackendError):
        await backend.write(
            WriteRequest("gone/x.bin", CountingReader(data, fail_at=PART + 1), crc(data), resume=store)
        )
    assert await backend.abort_stale_uploads(0) == 1  # e.g. a lifecycle rule aborted it
    again = CountingReader(data)
    await backend.write(WriteRequest("gone/x.bin", again, crc(data), resume=store))
    assert again.bytes_read == len(data)  # started over cleanly
    assert await read_back(backend, "gone/x.bin") == data


async def test_upload_aborted_mid_write(harness: Harness) -> None:
    backend = await harness.make(concurrency=1)
    if not backend.features.multipart:
        pytest.skip(f"{harness.kind} writes are not resumable")
    harness.require("abort_drops_blocks")  # azure (issue 28)
    data = os.urandom(2 * PART + 99)
    store = MemoryResumeStore()

    class AbortingReader(CountingReader):
        async def read_into(self, offset: int, buf: memoryview) -> int:
            if offset >= PART and not self.closed:
                self.closed = True  # once: a lifecycle rule aborts the upload under our feet
                assert harness.abort_behind(backend) == 1
            return await super().read_into(offset, buf)

    with pytest.raises(TransientBackendError):
        await backend.write(WriteRequest("ab/x.bin", AbortingReader(data), crc(data), resume=store))
    with pytest.raises(NotFound):
        await backend.stat("ab/x.bin")
    again = CountingReader(data)
    await backend.write(WriteRequest("ab/x.bin", again, crc(data), resume=store))
    assert again.bytes_read == len(data)
    assert await read_back(backend, "ab/x.bin") == data


async def test_resume_integrity_failure_discards_the_upload(harness: Harness) -> None:
    backend = await harness.make(concurrency=1)
    if not backend.features.multipart:
        pytest.skip(f"{harness.kind} writes are not resumable")
    data = os.urandom(2 * PART + 99)
    store = MemoryResumeStore()
    with pytest.raises(TransientBackendError):
        await backend.write(
            WriteRequest("corrupt/x.bin", CountingReader(data, fail_at=PART + 1), crc(data), resume=store)
        )
    with pytest.raises(IntegrityError):
        await backend.write(WriteRequest("corrupt/x.bin", BytesReader(data), crc(b"no"), resume=store))
    assert store.states == {}
    assert await backend.abort_stale_uploads(0) == 0
    assert await listed(backend) == []


async def test_abort_stale_uploads(harness: Harness) -> None:
    backend = await harness.make()
    harness.leave_debris(backend, "stale/shard.bin")
    assert await listed(backend) == []  # leftovers are never listed as objects
    if "upload_age" not in harness.skip_reasons():
        assert await backend.abort_stale_uploads(3600) == 0  # too young to be stale
    aged = harness.age_debris(backend, 7200)
    assert await backend.abort_stale_uploads(3600 if aged else 0) == 1
    assert await backend.abort_stale_uploads(0) == 0


async def test_kept_uploads_survive_the_sweep(harness: Harness) -> None:
    backend = await harness.make()
    if not backend.features.multipart:
        pytest.skip(f"{harness.kind} has no UploadIds: keep does not apply")
    kept = harness.leave_debris(backend, "keep/a.bin")
    harness.leave_debris(backend, "drop/b.bin")
    assert await backend.abort_stale_uploads(0, keep={kept}) == 1
    assert await backend.abort_stale_uploads(0, keep=[kept]) == 0
    assert await backend.abort_stale_uploads(0) == 1


async def test_the_sweep_spares_a_write_in_progress(harness: Harness) -> None:
    backend = await harness.make(concurrency=1, chunk_size=PART)
    data = os.urandom(2 * PART + 99)
    swept: list[int] = []

    class SweepingReader(CountingReader):
        async def read_into(self, offset: int, buf: memoryview) -> int:
            if offset >= PART and not swept:  # the write's upload (or temp file) exists now
                harness.age_debris(backend, 7200)
                swept.append(await backend.abort_stale_uploads(0))
            return await super().read_into(offset, buf)

    info = await backend.write(WriteRequest("busy/x.bin", SweepingReader(data), crc(data)))
    assert swept == [0]
    assert info.checksum == crc(data)
    assert await read_back(backend, "busy/x.bin") == data


async def test_server_side_copy(harness: Harness) -> None:
    src, dst = await harness.make(), await harness.make()
    if not (dst.features.server_side_copy and dst.can_copy_from(src)):
        pytest.skip(f"{harness.kind} has no server-side copy")
    data = os.urandom(300_000)
    await write_bytes(src, "s/x.bin", data)
    info = await copy_object(src, "s/x.bin", dst, "t/y.bin", crc(data))
    assert info.checksum == crc(data)
    assert info.verified_by in ("store", "readback", "stream")
    assert await read_back(dst, "t/y.bin") == data
    with pytest.raises(IntegrityError):
        await copy_object(src, "s/x.bin", dst, "t/z.bin", crc(b"wrong"))
    assert await listed(dst) == ["t/y.bin"]
    with pytest.raises(NotFound):
        await copy_object(src, "s/missing.bin", dst, "t/m.bin", crc(b""))


async def test_multipart_server_side_copy(harness: Harness) -> None:
    src = await harness.make()
    dst = (
        await harness.make(copy_object_limit=1 * MIB, copy_part_size=PART)
        if src.features.server_side_copy
        else src
    )
    if not (dst.features.server_side_copy and dst.can_copy_from(src)):
        pytest.skip(f"{harness.kind} has no server-side copy")
    harness.require("multipart_copy")
    data = os.urandom(MULTIPART_SIZE)
    await write_bytes(src, "s/big.bin", data)
    info = await dst.copy_from(src, "s/big.bin", "t/big.bin", crc(data))
    assert info.size == len(data)
    assert await read_back(dst, "t/big.bin") == data


async def test_streamed_copy_between_tiers(harness: Harness) -> None:
    first, second = await harness.make(), await harness.make(verify="readback")
    data = os.urandom(MULTIPART_SIZE)
    await write_bytes(first, "x/y.bin", data)
    reader = await first.open_reader("x/y.bin")
    try:
        info = await second.write(WriteRequest("x/y.bin", reader, crc(data)))
    finally:
        await reader.close()
    assert info.checksum == crc(data)
    assert await second.hash("x/y.bin") == crc(data)


async def test_native_posix_write_is_verified_in_flight(harness: Harness) -> None:
    if harness.kind != "posix":
        pytest.skip("POSIX only: stores verify natively or by read-back")
    backend = await harness.make()
    data = os.urandom(MULTIPART_SIZE)
    info = await write_bytes(backend, "s/t.bin", data)
    assert (info.verified_by, info.checksum) == ("stream", crc(data))
    assert await read_back(backend, "s/t.bin") == data


async def test_read_whole_reads_each_file_or_says_why_not(backend: Backend) -> None:
    files = {f"step/d{n % 2}/f{n}.bin": os.urandom(1000 * n) for n in range(5)}  # f0 is empty
    for relpath, data in files.items():
        await write_bytes(backend, relpath, data)
    asked = [*files, "step/missing.bin", "step/d1/f1.bin"]
    sizes = [*(len(data) for data in files.values()), 10, 999]  # the last one's size is wrong
    buffer = bytearray(sum(sizes))
    views, offset = [], 0
    for size in sizes:
        views.append(memoryview(buffer)[offset : offset + size])
        offset += size
    results = await backend.read_whole(asked, views)
    assert results[: len(files)] == [None] * len(files)
    assert [bytes(view) for view in views[: len(files)]] == list(files.values())
    assert isinstance(results[-2], NotFound)
    assert isinstance(results[-1], IntegrityError)
    assert "999" in str(results[-1])


async def test_write_whole_writes_each_file_and_refuses_a_bad_one(backend: Backend) -> None:
    good = {f"step/d{n % 2}/f{n}.bin": os.urandom(500 * n) for n in range(4)}
    bad = SmallFile("step/d0/bad.bin", os.urandom(700), crc(b"other bytes"))
    files = [SmallFile(relpath, data, crc(data)) for relpath, data in good.items()]
    files.insert(2, bad)
    batch = backend.batch()
    results = await batch.write_whole(files)
    await batch.commit()
    assert isinstance(results[2], IntegrityError)
    written = [result for n, result in enumerate(results) if n != 2]
    assert all(isinstance(info, ObjectInfo) and info.verified_by for info in written)
    assert [info.checksum for info in written if isinstance(info, ObjectInfo)] == [
        crc(data) for data in good.values()
    ]
    assert await listed(backend) == sorted(good)
    for relpath, data in good.items():
        assert await read_back(backend, relpath) == data
    assert await backend.abort_stale_uploads(0) == 0  # no temp file or upload left for the bad one

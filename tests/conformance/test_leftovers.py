"""``remove_leftovers``: a hop clears what killed attempts of its own files left, and nothing else."""

from __future__ import annotations

import os

import pytest

from tests.conformance.harness import PART, CountingReader, Harness, crc, listed, read_back
from tierd.daemon.backends import Backend, BytesReader, WriteRequest

STEP = ["run/step1/shard0.bin", "run/step1/sub/shard1.bin"]


async def test_removes_the_leftovers_of_these_files_at_once(harness: Harness) -> None:
    backend = await harness.make()
    for relpath in STEP:
        harness.leave_debris(backend, relpath)  # just now: no age threshold applies
    assert harness.debris_left(backend) == sorted(STEP)
    assert await backend.remove_leftovers(STEP) == 2
    assert harness.debris_left(backend) == []
    assert await backend.remove_leftovers(STEP) == 0  # again: nothing left, no error


async def test_leaves_other_files_leftovers_alone(harness: Harness) -> None:
    """Another daemon may be writing other files of the same checkpoint, or a name that extends ours."""
    backend = await harness.make()
    others = [
        "run/step1/shard9.bin",  # same directory, another daemon's file
        "run/step1/shard0.bin.old",  # a key that starts with one of ours
        "run/step10/shard0.bin",  # a checkpoint whose path starts with ours
        "run/step2/shard0.bin",
    ]
    for relpath in [*STEP, *others]:
        harness.leave_debris(backend, relpath)
    assert await backend.remove_leftovers(STEP) == 2
    assert harness.debris_left(backend) == sorted(others)


async def test_keeps_the_uploads_the_catalog_resumes(harness: Harness) -> None:
    backend = await harness.make()
    if not backend.features.multipart:
        pytest.skip(f"{harness.kind} has no UploadIds: keep does not apply")
    harness.require("uploads_per_key")  # azure (issue 28)
    kept = harness.leave_debris(backend, STEP[0])
    harness.leave_debris(backend, STEP[0])  # a second attempt's upload of the same key
    harness.leave_debris(backend, STEP[1])
    assert await backend.remove_leftovers(STEP, keep={kept}) == 2
    assert harness.debris_left(backend) == [STEP[0]]
    assert await backend.remove_leftovers(STEP, keep=[kept]) == 0
    assert await backend.remove_leftovers(STEP) == 1


async def test_nothing_to_remove(backend: Backend) -> None:
    assert await backend.remove_leftovers([]) == 0
    assert await backend.remove_leftovers(["never/written/x.bin"]) == 0  # no such directory


async def test_spares_a_write_in_progress(harness: Harness) -> None:
    backend = await harness.make(concurrency=1, chunk_size=PART)
    data = os.urandom(2 * PART + 99)
    removed: list[int] = []

    class CleaningReader(CountingReader):
        async def read_into(self, offset: int, buf: memoryview) -> int:
            if offset >= PART and not removed:  # the write's upload (or temp file) exists now
                assert harness.debris_left(backend) == ["busy/x.bin"]
                removed.append(await backend.remove_leftovers(["busy/x.bin"]))
            return await super().read_into(offset, buf)

    info = await backend.write(WriteRequest("busy/x.bin", CleaningReader(data), crc(data)))
    assert removed == [0]
    assert info.checksum == crc(data)
    assert await read_back(backend, "busy/x.bin") == data
    assert harness.debris_left(backend) == []


async def test_a_write_after_the_clean_up_succeeds(harness: Harness) -> None:
    backend = await harness.make()
    harness.leave_debris(backend, STEP[0])
    assert await backend.remove_leftovers(STEP) == 1
    data = os.urandom(1000)
    await backend.write(WriteRequest(STEP[0], BytesReader(data), crc(data)))
    assert await listed(backend) == [STEP[0]]
    assert await read_back(backend, STEP[0]) == data

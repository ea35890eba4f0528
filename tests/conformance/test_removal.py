"""Removing a whole checkpoint, and a tier's free space, on every backend."""

from __future__ import annotations

import os

import pytest

from tests.conformance.harness import Harness, crc, listed, read_back
from tierd.daemon.backends import Backend, BytesReader, PosixBackend, WriteRequest
from tierd.daemon.backends.s3.remove import DELETE_BATCH


async def put(backend: Backend, relpaths: list[str]) -> None:
    for relpath in relpaths:
        data = relpath.encode()
        await backend.write(WriteRequest(relpath, BytesReader(data), crc(data)))


async def test_remove_checkpoint_removes_its_files_and_only_those(backend: Backend) -> None:
    step = ["run/step1/.metadata", "run/step1/__0_0.distcp", "run/step1/sub/__1_0.distcp"]
    other = ["run/step2/.metadata", "run/step2/__0_0.distcp"]
    await put(backend, step + other)
    await backend.remove_checkpoint("run/step1", step[:1], step[1:])
    assert await listed(backend) == sorted(other)
    await backend.remove_checkpoint("run/step1", step[:1], step[1:])  # again: nothing left, no error
    assert await read_back(backend, other[1]) == other[1].encode()


async def test_remove_checkpoint_of_more_files_than_one_delete_call(harness: Harness) -> None:
    harness.require("many_objects")
    backend = await harness.make(concurrency=32)
    files = [f"big/step/f{i:05d}" for i in range(DELETE_BATCH + 5)]
    await put(backend, files)
    await backend.remove_checkpoint("big/step", [], files)
    assert await listed(backend) == []


async def test_a_single_file_checkpoint(backend: Backend) -> None:
    await put(backend, ["run/model_step7.pt", "run/model_step8.pt"])
    await backend.remove_checkpoint("run/model_step7.pt", ["run/model_step7.pt"], [])
    assert await listed(backend) == ["run/model_step8.pt"]


async def test_posix_keeps_unrecorded_files_and_removes_markers_first(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.require("directories")
    backend = await harness.make()
    assert isinstance(backend, PosixBackend)
    await put(backend, ["run/step1/.metadata", "run/step1/shard"])
    (backend.root / "run/step1/notes.txt").write_text("not recorded")
    removed: list[str] = []
    real_unlink = os.unlink

    def spy(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:
        removed.append(os.fspath(path))
        real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", spy)
    await backend.remove_checkpoint("run/step1", ["run/step1/.metadata"], ["run/step1/shard"])
    assert [os.path.basename(p) for p in removed] == [".metadata", "shard"]
    assert sorted(p.name for p in (backend.root / "run/step1").iterdir()) == ["notes.txt"]


async def test_posix_leaves_the_directories_above_the_checkpoint(harness: Harness) -> None:
    harness.require("directories")
    backend = await harness.make()
    assert isinstance(backend, PosixBackend)
    await put(
        backend, ["run/step1/.metadata", "run/step1/sub/shard", "solo/model_step2.pt", "odd/step3/shard"]
    )
    (backend.root / "odd/step3/notes.txt").write_text("not recorded")
    await backend.remove_checkpoint(
        "run/step1", ["run/step1/.metadata"], ["run/step1/sub/shard"]
    )  # renamed away
    await backend.remove_checkpoint("solo/model_step2.pt", ["solo/model_step2.pt"], [])  # file by file
    await backend.remove_checkpoint("odd/step3", [], ["odd/step3/shard"])
    # A run's directory is the job's (on tier 0, a watched one): it outlives its last checkpoint.
    left = sorted(str(p.relative_to(backend.root)) for p in backend.root.rglob("*"))
    assert left == ["odd", "odd/step3", "odd/step3/notes.txt", "run", "solo"]


async def test_space(backend: Backend) -> None:
    space = await backend.space()
    if isinstance(backend, PosixBackend):
        assert space is not None
        st = os.statvfs(backend.root)
        assert space.total == st.f_blocks * st.f_frsize
        assert 0 < space.free <= space.total
    else:
        assert space is None

"""A hop's small files into a POSIX tier: staged unseen, committed together, or dropped."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harness import crc
from tierd.config import PosixTier
from tierd.daemon.backends import BytesReader, PosixBackend, WriteRequest
from tierd.daemon.backends.base import SmallFile, WriteBatch
from tierd.daemon.backends.posix import batch as posixbatch
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import unnamed
from tierd.daemon.backends.posix.backend import is_temp_name
from tierd.daemon.backends.posix.temp import remove_stale_temps
from tierd.errors import IntegrityError, TransientBackendError

MIB = 1024 * 1024


def backend_at(root: Path, **kw: object) -> PosixBackend:
    root.mkdir(parents=True, exist_ok=True)
    return PosixBackend(PosixTier(name="pfs", kind="posix", path=root, **kw), chunk_size=MIB)


def visible(root: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, n), root)
        for d, _, names in os.walk(root)
        for n in names
        if not is_temp_name(n)
    }


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if is_temp_name(n)]


async def stage_files(batch: WriteBatch, count: int, size: int = 100) -> dict[str, bytes]:
    files = {f"step/d{n % 3}/f{n}.bin": os.urandom(size) for n in range(count)}
    for name, data in files.items():
        info = await batch.write(WriteRequest(name, BytesReader(data), crc(data)))
        assert info.checksum == crc(data)
    return files


async def test_small_files_stay_unseen_until_commit(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 10)
    assert all(batch.holds(name) for name in files)
    assert visible(backend.root) == set()
    assert temps(backend.root) == []  # staged with no name at all (posix.unnamed)
    assert sorted(await batch.commit()) == sorted(files)
    assert visible(backend.root) == set(files)
    assert all((backend.root / name).read_bytes() == data for name, data in files.items())
    assert temps(backend.root) == []
    assert not batch.holds(next(iter(files)))
    assert await batch.commit() == []


async def test_big_files_and_readback_tiers_are_written_at_once(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    big = os.urandom(MIB + 1)
    await batch.write(WriteRequest("big.bin", BytesReader(big), crc(big)))
    assert not batch.holds("big.bin")
    assert (backend.root / "big.bin").read_bytes() == big

    checked = backend_at(tmp_path / "checked", verify="readback")
    batch = checked.batch()
    info = await batch.write(WriteRequest("x.bin", BytesReader(b"abc"), crc(b"abc")))
    assert info.verified_by == "readback"
    assert not batch.holds("x.bin")
    assert (checked.root / "x.bin").read_bytes() == b"abc"


async def test_discard_leaves_nothing(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    await stage_files(batch, 5)
    await batch.discard()
    assert visible(backend.root) == set()
    assert temps(backend.root) == []
    assert await batch.commit() == []


async def test_files_are_held_until_their_commit_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit under way takes the staged files, but they are not durable before it returns."""
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 3)
    syncing, may_finish = threading.Event(), threading.Event()
    real_commit = posixcopy.commit_staged

    def slow_commit(staged: list[Any]) -> None:
        syncing.set()
        assert may_finish.wait(10)
        real_commit(staged)

    monkeypatch.setattr(posixcopy, "commit_staged", slow_commit)
    commit = asyncio.create_task(batch.commit())
    assert await asyncio.to_thread(syncing.wait, 10)
    assert all(batch.holds(name) for name in files)
    await batch.write(WriteRequest("late.bin", BytesReader(b"late"), crc(b"late")))  # for the next commit
    may_finish.set()
    assert sorted(await commit) == sorted(files)
    assert not any(batch.holds(name) for name in files)
    assert batch.holds("late.bin")
    assert await batch.commit() == ["late.bin"]


async def test_a_mismatch_is_refused_before_staging(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    with pytest.raises(IntegrityError):
        await batch.write(WriteRequest("x.bin", BytesReader(b"abc"), crc(b"abd")))
    assert not batch.holds("x.bin")
    assert list(backend.root.iterdir()) == []


async def test_a_batch_is_full_at_its_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(posixbatch, "MAX_FILES", 3)
    batch = backend_at(tmp_path / "pfs").batch()
    await stage_files(batch, 2)
    assert not batch.full
    await stage_files(batch, 3)
    assert batch.full
    await batch.commit()
    assert not batch.full
    monkeypatch.setattr(posixbatch, "MAX_BYTES", 1000)
    await stage_files(batch, 1, size=1000)
    assert batch.full


async def test_a_failed_sync_drops_the_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int, where: str) -> bool:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(posixcopy, "sync_filesystem", failing)
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 4)
    with pytest.raises(TransientBackendError, match="Input/output error"):
        await batch.commit()
    assert visible(backend.root) == set()
    assert temps(backend.root) == []
    assert not any(batch.holds(name) for name in files)


async def test_without_syncfs_each_file_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(posixcopy, "sync_filesystem", lambda fd, where: False)
    monkeypatch.setattr(os, "fsync", counting)
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 6)
    synced.clear()
    await batch.commit()
    assert len(synced) == 6 + 3  # each file, then each of the three directories once
    assert visible(backend.root) == set(files)


def test_sync_filesystem_syncs(tmp_path: Path) -> None:
    from tierd.daemon.backends.posix import writeback

    (tmp_path / "f").write_bytes(b"x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert writeback.sync_filesystem(fd, str(tmp_path)) is (writeback._syncfs is not None)
    finally:
        os.close(fd)


async def test_staged_files_take_no_lock_and_stay_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file staged under a temporary name is parked at once: no ``flock``, kept by the live set."""
    monkeypatch.setattr(unnamed, "MAX_OPEN", 0)  # every file staged named
    locked: list[int] = []
    real_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        locked.append(fd)
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    # io_mode set: auto's first big write into a file system probes it with a file of its own,
    # once per device and process (run alone, this test counted the probe's lock too)
    backend = backend_at(tmp_path / "pfs", io_mode="buffered")
    batch = backend.batch()
    small = {f"step/f{n}.bin": os.urandom(100) for n in range(3)}
    results = await batch.write_whole([SmallFile(name, data, crc(data)) for name, data in small.items()])
    assert [info.relpath for info in results if not isinstance(info, Exception)] == list(small)
    assert locked == []
    assert remove_stale_temps(backend.tree, 0.0) == 0  # a sweep of this process leaves them
    assert len(temps(backend.root)) == 3
    big = os.urandom(2 * MIB)  # over a chunk: written at once, locked while it is written
    await batch.write(WriteRequest("step/big.bin", BytesReader(big), crc(big)))
    assert len(locked) == 1
    assert sorted(await batch.commit()) == sorted(small)
    assert visible(backend.root) == {*small, "step/big.bin"}

"""Small files in groups: how a checkpoint is cut into groups, and what a group does when
one of its files fails, is cancelled, or has to share a small buffer budget.

Real POSIX tiers under tmp_path and an S3 tier on moto's server.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harness import crc
from tests.fixtures.s3servers import S3Server
from tierd.config import PosixTier
from tierd.daemon.backends import Backend, ByteBudget, BytesReader, PosixBackend, S3Backend, WriteRequest
from tierd.daemon.backends.base import WriteBatch
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix.backend import is_temp_name
from tierd.daemon.transfer import copyset
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.copyset import copy_checkpoint_files, in_groups
from tierd.daemon.transfer.retry import Backoff
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import PriorityPool
from tierd.errors import IntegrityError, NotFound

KIB = 1024


def spec(name: str, size: int) -> FileSpec:
    return FileSpec(name, size, "", 0)


def test_runs_of_small_files_make_groups_and_big_files_stand_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copyset, "GROUP_FILES", 3)
    monkeypatch.setattr(copyset, "GROUP_BYTES", 10 * KIB)
    monkeypatch.setattr(copyset, "GROUP_FILE_LIMIT", 4 * KIB)
    files = [spec(f"f{n}", KIB) for n in range(4)] + [spec("big", 5 * KIB)]
    files += [spec("a", 4 * KIB), spec("b", 4 * KIB), spec("c", 4 * KIB), spec("empty", 0)]
    units = in_groups(files)
    names = [u.relpath if isinstance(u, FileSpec) else [f.relpath for f in u] for u in units]
    assert names == [["f0", "f1", "f2"], "big", ["f3", "a", "b"], ["c", "empty"]]


def test_no_files_no_groups() -> None:
    assert in_groups([]) == []


def test_many_lanes_make_smaller_groups_within_half_the_budget() -> None:
    """16 lanes of 2 MiB groups held a 32 MiB budget whole (a restore from S3): now half of it."""
    mib = 1024 * KIB
    assert copyset.group_bytes(3, 32 * mib) == copyset.GROUP_BYTES  # a local hop's lanes: unchanged
    assert copyset.group_bytes(16, 32 * mib) == mib
    # never below the biggest file a group takes
    assert copyset.group_bytes(256, 32 * mib) == copyset.GROUP_FILE_LIMIT
    files = [spec(f"f{n}", 300 * KIB) for n in range(7)]
    assert [len(u) for u in in_groups(files, mib) if not isinstance(u, FileSpec)] == [3, 3, 1]


def posix_at(root: Path, budget: ByteBudget | None = None) -> PosixBackend:
    root.mkdir(parents=True, exist_ok=True)
    return PosixBackend(PosixTier(name=root.name, kind="posix", path=root), budget=budget)


def copier_for(src: Backend, dst: Backend, *, lanes: int = 4, integrity: int = 1) -> FileCopier:
    return FileCopier(
        src=src,
        dst=dst,
        slots=PriorityPool(lanes),
        priority=0,
        resume=None,
        bucket=None,
        readback=False,
        backoff=Backoff(base=0.001, cap=0.01),
        attempts=3,
        integrity_attempts=integrity,
        batch=dst.batch(),
    )


def batch_of(copier: FileCopier) -> WriteBatch:
    assert copier.batch is not None
    return copier.batch


async def put_files(src: Backend, count: int, size: int = 3000) -> dict[str, bytes]:
    files = {f"step/d{n % 3}/f{n:03d}.bin": os.urandom(size + n) for n in range(count)}
    files["step/.metadata"] = b"marker"
    for relpath, data in files.items():
        await src.write(WriteRequest(relpath, BytesReader(data), crc(data)))
    return files


def specs_of(files: dict[str, bytes]) -> list[FileSpec]:
    return [FileSpec(relpath, len(data), crc(data), n) for n, (relpath, data) in enumerate(files.items())]


def tree(root: Path) -> dict[str, bytes]:
    found = (Path(d, n) for d, _, names in os.walk(root) for n in names)
    return {str(path.relative_to(root)): path.read_bytes() for path in found}


async def test_a_file_its_group_could_not_copy_is_copied_alone(tmp_path: Path) -> None:
    src, dst = posix_at(tmp_path / "src"), posix_at(tmp_path / "dst")
    files = await put_files(src, 20)
    specs = specs_of(files)
    changed = specs[5].relpath  # rewritten after first sight: its group's read is refused
    (src.root / changed).write_bytes(b"shorter now")
    calls: list[tuple[str, type | None]] = []
    copier = copier_for(src, dst, integrity=2)
    real_copy = copier.copy

    async def copy(spec: FileSpec, progress: Any, *, failed: Any = None) -> Any:
        calls.append((spec.relpath, type(failed) if failed else None))
        (src.root / changed).write_bytes(files[changed])  # put back: the retry succeeds
        return await real_copy(spec, progress, failed=failed)

    copier.copy = copy  # type: ignore[method-assign]
    done: dict[str, object] = {}

    def report(spec: FileSpec, info: object) -> None:
        done[spec.relpath] = info

    await copy_checkpoint_files(copier, batch_of(copier), specs, concurrency=4, done=report)
    # the group's error counts as the changed file's first try; the marker always goes alone
    assert calls == [(changed, IntegrityError), ("step/.metadata", None)]
    assert set(done) == set(files)
    assert tree(dst.root) == files


async def test_a_group_error_that_cannot_be_retried_fails_the_copy(tmp_path: Path) -> None:
    src, dst = posix_at(tmp_path / "src"), posix_at(tmp_path / "dst")
    files = await put_files(src, 10)
    specs = specs_of(files)
    (src.root / specs[3].relpath).write_bytes(b"other")  # integrity_attempts=1: no second try
    copier = copier_for(src, dst)
    with pytest.raises(IntegrityError, match="holds 5 bytes"):
        await copy_checkpoint_files(copier, batch_of(copier), specs, concurrency=2)
    assert not any(is_temp_name(name) for name in tree(dst.root))
    assert tree(dst.root) == {}  # the marker never went, the staged files were dropped


async def test_a_missing_source_file_is_reported_for_that_file_only(tmp_path: Path) -> None:
    src, dst = posix_at(tmp_path / "src"), posix_at(tmp_path / "dst")
    files = await put_files(src, 4)
    gone = "step/d1/f001.bin"
    (src.root / gone).unlink()
    copier = copier_for(src, dst)
    specs = specs_of(files)
    results = await copier.copy_group([s for s in specs if s.relpath != "step/.metadata"])
    by_name = dict(zip([s.relpath for s in specs], results, strict=False))
    assert isinstance(by_name[gone], NotFound)
    assert sum(not isinstance(r, Exception) for r in results) == 3
    await batch_of(copier).commit()
    assert set(tree(dst.root)) == {s.relpath for s in specs[:4]} - {gone}


async def test_a_cancelled_group_leaves_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = posix_at(tmp_path / "src"), posix_at(tmp_path / "dst")
    files = await put_files(src, 8)
    staging, release = threading.Event(), threading.Event()
    real_stage = posixcopy.stage_files

    def slow_stage(items: Any) -> Any:
        staging.set()
        assert release.wait(10)
        return real_stage(items)

    monkeypatch.setattr(posixcopy, "stage_files", slow_stage)
    copier = copier_for(src, dst)
    task = asyncio.create_task(copier.copy_group(specs_of(files)))
    assert await asyncio.to_thread(staging.wait, 10)
    task.cancel()
    release.set()  # the trip finishes after the cancellation: what it made must go
    with pytest.raises(asyncio.CancelledError):
        await task
    await batch_of(copier).discard()
    assert tree(dst.root) == {}
    assert copier.dst.budget.used == 0


async def test_groups_share_a_small_budget_without_deadlock(tmp_path: Path, moto_server: S3Server) -> None:
    """Groups hold their bytes in the budget; writing them into S3 must not wait for more of it."""
    budget = ByteBudget(256 * KIB)
    src = posix_at(tmp_path / "src", budget)
    dst = S3Backend(moto_server.new_tier(), budget=budget)
    try:
        files = await put_files(src, 60, size=20 * KIB)
        copier = copier_for(src, dst, lanes=8)
        async with asyncio.timeout(60):
            await copy_checkpoint_files(copier, batch_of(copier), specs_of(files), concurrency=8)
        for relpath, data in files.items():
            assert await dst.hash(relpath) == crc(data)
        assert budget.used == 0
    finally:
        await dst.close()

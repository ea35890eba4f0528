"""A checkpoint's files through a WriteBatch: data committed before the marker, a file done
only once committed, nothing left behind by a failure; from a POSIX and from an S3 source.

Real backends (POSIX under tmp_path, S3 on the test suite's servers); the destination's
batch records its writes and commits so the order can be checked.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import random
import subprocess
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harness import crc
from tests.fixtures.s3servers import S3Server
from tierd.config import PosixTier
from tierd.daemon.backends import (
    Backend,
    BytesReader,
    ObjectInfo,
    PosixBackend,
    S3Backend,
    WriteRequest,
    make_backend,
)
from tierd.daemon.backends.base import Features, SmallFile
from tierd.daemon.backends.posix import batch as posixbatch
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import fstype
from tierd.daemon.backends.posix.backend import is_temp_name
from tierd.daemon.beneath import Place
from tierd.daemon.markers import MARKER_NAMES
from tierd.daemon.transfer import copyset
from tierd.daemon.transfer.copier import FileCopier
from tierd.daemon.transfer.copyset import copy_checkpoint_files, marker_last
from tierd.daemon.transfer.retry import Backoff
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import PriorityPool, TokenBucket
from tierd.errors import IntegrityError, NotFound, TierdError, TransientBackendError

CHUNK = 16 * 1024
MARKER = "step/.metadata"  # sorts first by name: its mtime and its name make it last


class RecordingBatch(posixbatch.PosixBatch):
    """A PosixBatch that logs what it was asked to write and what each commit returned."""

    def __init__(self, backend: PosixBackend) -> None:
        super().__init__(backend, backend)
        self.events: list[tuple[str, Any]] = []
        self.staged_ever: set[str] = set()
        self.committed: set[str] = set()

    async def write(self, request: WriteRequest) -> ObjectInfo:
        self.events.append(("write", request.relpath))
        info = await super().write(request)
        if self.holds(request.relpath):
            self.staged_ever.add(request.relpath)
        return info

    async def write_whole(self, files: Sequence[SmallFile]) -> Sequence[ObjectInfo | TierdError]:
        self.events.extend(("write", file.relpath) for file in files)
        results = await super().write_whole(files)
        self.staged_ever.update(file.relpath for file in files if self.holds(file.relpath))
        return results

    async def commit(self) -> list[str]:
        committed = await super().commit()
        self.committed.update(committed)
        if committed:
            self.events.append(("commit", sorted(committed)))
        return committed


@dataclass
class Done:
    """The ``done`` hook: what was reported, and whether each file was committed by then."""

    batch: RecordingBatch
    infos: dict[str, ObjectInfo | None] = field(default_factory=dict)
    early: list[str] = field(default_factory=list)

    def __call__(self, spec: FileSpec, info: ObjectInfo | None) -> None:
        assert spec.relpath not in self.infos, f"{spec.relpath} reported twice"
        self.infos[spec.relpath] = info
        if spec.relpath in self.batch.staged_ever and spec.relpath not in self.batch.committed:
            self.early.append(spec.relpath)
        self.batch.events.append(("done", spec.relpath))


@dataclass
class GatedCopier(FileCopier):
    """A FileCopier that awaits a hook before or after copying some files."""

    before: dict[str, Callable[[], Awaitable[object]]] = field(default_factory=dict)
    after: dict[str, Callable[[], Awaitable[object]]] = field(default_factory=dict)

    async def copy(
        self, spec: FileSpec, progress: Callable[[int | None], None], *, failed: TierdError | None = None
    ) -> ObjectInfo:
        if (before := self.before.get(spec.relpath)) is not None:
            await before()
        info = await super().copy(spec, progress, failed=failed)
        if (after := self.after.get(spec.relpath)) is not None:
            await after()
        return info


def posix_at(root: Path) -> PosixBackend:
    """A POSIX tier whose chunks are small, so a file of a few KiB is written at once."""
    root.mkdir(parents=True, exist_ok=True)
    return PosixBackend(PosixTier(name=root.name, kind="posix", path=root), chunk_size=CHUNK)


def copier_for(src: Backend, dst: Backend, batch: RecordingBatch, concurrency: int = 4) -> FileCopier:
    return FileCopier(
        src=src,
        dst=dst,
        slots=PriorityPool(concurrency),
        priority=0,
        resume=None,
        bucket=None,
        readback=False,
        backoff=Backoff(base=0.001, cap=0.01),
        attempts=2,
        integrity_attempts=1,
        batch=batch,
    )


async def put_files(src: Backend, count: int) -> dict[str, bytes]:
    """``count`` data files and the marker (written last) on ``src``."""
    files = {f"step/d{n % 3}/f{n}.bin": os.urandom(100 + n) for n in range(count)}
    files[MARKER] = b"metadata"
    for relpath, data in files.items():
        await src.write(WriteRequest(relpath, BytesReader(data), crc(data)))
    return files


def specs_of(files: dict[str, bytes]) -> list[FileSpec]:
    """FileSpecs in no particular order; the marker has the newest mtime."""
    specs = [FileSpec(relpath, len(data), crc(data), n) for n, (relpath, data) in enumerate(files.items())]
    random.Random(7).shuffle(specs)
    return specs


def visible(root: Path) -> dict[str, bytes]:
    found = (Path(d, n) for d, _, names in os.walk(root) for n in names if not is_temp_name(n))
    return {str(path.relative_to(root)): path.read_bytes() for path in found}


def temps(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if is_temp_name(n)]


@pytest.fixture
def dst(tmp_path: Path) -> PosixBackend:
    return posix_at(tmp_path / "dst")


@pytest.fixture
async def posix_src(tmp_path: Path) -> PosixBackend:
    return posix_at(tmp_path / "src")


async def test_the_marker_is_copied_alone_once_the_data_is_committed(
    posix_src: PosixBackend, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(posixbatch, "MAX_FILES", 3)  # several commits while the data is copied
    monkeypatch.setattr(copyset, "GROUP_FILES", 2)
    monkeypatch.setattr(copyset, "LOCAL_GROUP_FILES", 2)
    files = await put_files(posix_src, 10)
    batch = RecordingBatch(dst)
    done = Done(batch)
    await copy_checkpoint_files(
        copier_for(posix_src, dst, batch), batch, specs_of(files), concurrency=4, done=done
    )
    events = batch.events
    marker_write = events.index(("write", MARKER))
    committed_before = {p for kind, paths in events[:marker_write] if kind == "commit" for p in paths}
    assert committed_before == set(files) - {MARKER}
    assert [e for e in events if e[0] == "commit"][-1] == ("commit", [MARKER])
    assert events[-1] == ("done", MARKER)
    assert sum(kind == "commit" for kind, _ in events) >= 3
    assert done.early == []
    assert set(done.infos) == set(files)
    assert all(info is not None and info.verified_by == "stream" for info in done.infos.values())
    assert visible(dst.root) == files
    assert temps(dst.root) == []


async def test_a_file_is_done_only_once_the_commit_that_took_it_returns(
    posix_src: PosixBackend, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose copy returns while another lane's commit of it is still running waits for it."""
    monkeypatch.setattr(posixbatch, "MAX_FILES", 2)
    monkeypatch.setattr(copyset, "GROUP_FILE_LIMIT", 0)  # file by file, each gated on its own
    files = await put_files(posix_src, 2)
    first, second = "step/d0/f0.bin", "step/d1/f1.bin"
    first_staged, first_may_return = asyncio.Event(), asyncio.Event()
    first_returning = threading.Event()
    loop = asyncio.get_running_loop()
    real_commit = posixcopy.commit_staged

    def slow_commit(staged: list[Any]) -> None:
        """The commit's syncfs is under way when ``first``'s copy returns."""
        loop.call_soon_threadsafe(first_may_return.set)
        assert first_returning.wait(10)
        real_commit(staged)

    monkeypatch.setattr(posixcopy, "commit_staged", slow_commit)

    async def after_first() -> None:
        first_staged.set()
        await first_may_return.wait()
        first_returning.set()  # the copy returns right after this, with no await in between

    batch = RecordingBatch(dst)
    copier = GatedCopier(**vars(copier_for(posix_src, dst, batch)))
    copier.before = {second: first_staged.wait}  # so one commit takes both
    copier.after = {first: after_first}
    done = Done(batch)
    async with asyncio.timeout(20):
        await copy_checkpoint_files(copier, batch, specs_of(files), concurrency=2, done=done)
    assert ("commit", sorted([first, second])) in batch.events
    assert done.early == []
    assert set(done.infos) == set(files)
    assert visible(dst.root) == files


async def test_a_failed_copy_discards_what_was_staged(posix_src: PosixBackend, dst: PosixBackend) -> None:
    files = await put_files(posix_src, 6)
    specs = sorted(specs_of(files), key=lambda s: s.mtime_ns)
    bad = specs[3]
    specs[3] = FileSpec(bad.relpath, bad.size, crc(b"other bytes"), bad.mtime_ns)
    batch = RecordingBatch(dst)
    done = Done(batch)
    with pytest.raises(IntegrityError):
        await copy_checkpoint_files(copier_for(posix_src, dst, batch), batch, specs, concurrency=1, done=done)
    assert batch.staged_ever >= {s.relpath for s in specs[:3]}  # staged, then dropped
    assert done.infos == {}
    assert visible(dst.root) == {}
    assert temps(dst.root) == []
    assert not any(kind == "write" and path == MARKER for kind, path in batch.events)


async def test_a_failed_commit_leaves_nothing_under_final_names(
    posix_src: PosixBackend, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_disk(staged: list[Any]) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(posixcopy, "commit_staged", broken_disk)
    files = await put_files(posix_src, 5)
    batch = RecordingBatch(dst)
    done = Done(batch)
    with pytest.raises(TransientBackendError):
        await copy_checkpoint_files(
            copier_for(posix_src, dst, batch), batch, specs_of(files), concurrency=2, done=done
        )
    assert done.infos == {}
    assert visible(dst.root) == {}
    assert temps(dst.root) == []


async def test_files_already_there_are_skipped_and_reported(
    posix_src: PosixBackend, dst: PosixBackend
) -> None:
    files = await put_files(posix_src, 4)
    kept = "step/d1/f1.bin"
    await dst.write(WriteRequest(kept, BytesReader(files[kept]), crc(files[kept])))
    batch = RecordingBatch(dst)
    done = Done(batch)
    counted: dict[str, int] = {}

    def progress(spec: FileSpec) -> Callable[[int | None], None]:
        def count(nbytes: int | None) -> None:
            counted[spec.relpath] = 0 if nbytes is None else counted.get(spec.relpath, 0) + nbytes

        return count

    async def skip(spec: FileSpec) -> bool:
        return spec.relpath == kept

    await copy_checkpoint_files(
        copier_for(posix_src, dst, batch),
        batch,
        specs_of(files),
        concurrency=2,
        skip=skip,
        progress=progress,
        done=done,
    )
    assert done.infos[kept] is None
    assert ("write", kept) not in batch.events
    assert counted == {relpath: len(data) for relpath, data in files.items() if relpath != kept}
    assert visible(dst.root) == files


async def test_the_copier_must_write_through_the_batch(posix_src: PosixBackend, dst: PosixBackend) -> None:
    batch = RecordingBatch(dst)
    with pytest.raises(ValueError, match="batch"):
        await copy_checkpoint_files(copier_for(posix_src, dst, batch), dst.batch(), [], concurrency=1)


@pytest.fixture(params=["posix", "s3-moto", "s3-rclone"])
async def source(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A source tier of each kind."""
    kind: str = request.param
    if kind == "posix":
        yield posix_at(tmp_path / "src")
        return
    server: S3Server = request.getfixturevalue(f"{kind.removeprefix('s3-')}_server")
    backend = make_backend(server.new_tier())
    assert isinstance(backend, S3Backend)
    yield backend
    await backend.close()


async def test_copies_a_checkpoint_from_each_kind_of_source(
    source: Backend, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(posixbatch, "MAX_FILES", 4)
    files = await put_files(source, 12)
    big = "step/shard.bin"  # bigger than a chunk: written at once, never staged
    files[big] = os.urandom(dst.chunk_size + 1)
    await source.write(WriteRequest(big, BytesReader(files[big]), crc(files[big])))
    small = specs_of({relpath: data for relpath, data in files.items() if relpath != big})
    specs = [*small, FileSpec(big, len(files[big]), crc(files[big]), -1)]
    batch = RecordingBatch(dst)
    done = Done(batch)
    await copy_checkpoint_files(copier_for(source, dst, batch), batch, specs, concurrency=4, done=done)
    assert batch.events[-1] == ("done", MARKER)
    assert done.early == []
    assert big not in batch.staged_ever
    assert {relpath: info.checksum if info else None for relpath, info in done.infos.items()} == {
        relpath: crc(data) for relpath, data in files.items()
    }
    assert visible(dst.root) == files
    assert temps(dst.root) == []


class HintedPosix(PosixBackend):
    """A POSIX source that records every prefetch hint, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hints: list[list[str]] = []

    async def prefetch(self, relpaths: Sequence[str]) -> None:
        self.hints.append(list(relpaths))
        await super().prefetch(relpaths)


async def test_the_source_hears_of_small_files_a_window_ahead(
    tmp_path: Path, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copyset, "READ_AHEAD_FILES", 4)
    monkeypatch.setattr(copyset, "GROUP_FILE_LIMIT", 0)  # groups are never hinted
    monkeypatch.setattr(copyset, "READ_AHEAD_MAX_SIZE", 105)  # f5 and up count as big: never hinted
    (tmp_path / "src").mkdir()
    src = HintedPosix(PosixTier(name="src", kind="posix", path=tmp_path / "src"), chunk_size=CHUNK)
    files = await put_files(src, 10)
    batch = RecordingBatch(dst)
    specs = specs_of(files)
    await copy_checkpoint_files(copier_for(src, dst, batch, concurrency=2), batch, specs, concurrency=2)
    data = [f.relpath for f in marker_last(specs)[:-1]]  # the order the lanes take them in
    small = {relpath for relpath in data if len(files[relpath]) <= 105}
    expected = [
        [r for r in data[0:8] if r in small],  # at the start: the first two windows
        [r for r in data[8:12] if r in small],  # at the second window: the one after it
    ]
    assert src.hints == [hint for hint in expected if hint]
    assert MARKER not in {r for hint in src.hints for r in hint}
    assert visible(dst.root) == files


async def test_grouped_files_are_not_hinted_while_groups_have_every_lane(
    tmp_path: Path, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copyset, "LOCAL_GROUP_LANES", 2)  # so two lanes are every lane between local tiers
    (tmp_path / "src").mkdir()
    src = HintedPosix(PosixTier(name="src", kind="posix", path=tmp_path / "src"), chunk_size=CHUNK)
    files = await put_files(src, 10)
    batch = RecordingBatch(dst)
    await copy_checkpoint_files(copier_for(src, dst, batch), batch, specs_of(files), concurrency=2)
    assert src.hints == []
    assert visible(dst.root) == files


class LocalHintedPosix(HintedPosix):
    async def local_disk(self) -> bool:
        return True


class CountingPosix(PosixBackend):
    """A POSIX destination that counts the groups it is staging at once.

    A group is in flight from its read at the source (``GroupReadingPosix``) to the end of
    its staging here; a staging waits until every group in flight is staging too. So
    ``most`` is how many groups the copy set lets run at once, however the reads are timed.
    """

    def __init__(self, *args: Any, local: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.local = local
        self.in_flight = self.staging = self.most = 0
        self._arrived = asyncio.Condition()

    async def local_disk(self) -> bool:
        return self.local

    async def stage_many(self, files: Sequence[SmallFile]) -> Sequence[tuple[Any, Place] | TierdError]:
        self.staging += 1
        self.most = max(self.most, self.staging)
        try:
            async with self._arrived:
                self._arrived.notify_all()
                await self._arrived.wait_for(lambda: self.staging == self.in_flight)
            return await super().stage_many(files)
        finally:
            self.staging -= 1
            self.in_flight -= 1


class GroupReadingPosix(LocalHintedPosix):
    """A source that counts each group it starts reading as in flight at ``groups``.

    It does not announce a group's reads itself (as a POSIX tier does): the copy set does.
    """

    features = Features(native_checksum=False, server_side_copy=False, multipart=False)

    def __init__(self, *args: Any, groups: CountingPosix, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.groups = groups

    async def read_whole(
        self, relpaths: Sequence[str], views: Sequence[memoryview]
    ) -> Sequence[TierdError | None]:
        self.groups.in_flight += 1
        return await super().read_whole(relpaths, views)


@pytest.mark.parametrize("local", [True, False])
async def test_groups_between_local_tiers_run_on_a_few_lanes_with_their_reads_hinted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: bool
) -> None:
    monkeypatch.setattr(copyset, "GROUP_FILES", 2)
    monkeypatch.setattr(copyset, "LOCAL_GROUP_FILES", 2)
    monkeypatch.setattr(copyset, "LOCAL_GROUP_LANES", 2)
    (tmp_path / "src").mkdir()
    dst = CountingPosix(
        PosixTier(name="dst", kind="posix", path=tmp_path / "dst"), chunk_size=CHUNK, local=local
    )
    src = GroupReadingPosix(
        PosixTier(name="src", kind="posix", path=tmp_path / "src"), chunk_size=CHUNK, groups=dst
    )
    (tmp_path / "dst").mkdir()
    files = await put_files(src, 40)
    batch = RecordingBatch(dst)
    specs = specs_of(files)
    await copy_checkpoint_files(copier_for(src, dst, batch, concurrency=8), batch, specs, concurrency=8)
    hinted = [relpath for hint in src.hints for relpath in hint]
    if local:
        assert dst.most == 2
        assert sorted(hinted) == sorted(set(files) - {MARKER})  # each data file once, the marker never
    else:  # an object store or a parallel file system: lanes hide round trips
        assert dst.most == 8
        assert hinted == []
    assert visible(dst.root) == files


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted under ``tmp_path`` for the test (root only), unmounted after it."""
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mountpoint)]
    if (mounted := subprocess.run(mount, capture_output=True, text=True)).returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


async def test_a_posix_tier_on_a_tmpfs_is_on_a_local_disk(tmpfs: Path) -> None:
    assert await posix_at(tmpfs / "tier").local_disk() is True


@pytest.mark.parametrize(
    ("kind", "local"), [("ext4", True), ("tmpfs", True), ("nfs4", False), ("lustre", False), ("gpfs", False)]
)
async def test_a_posix_tier_is_on_a_local_disk_only_if_its_roots_file_system_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, local: bool
) -> None:
    """The mountinfo line of the root's device decides (as in ``tests/unit/backends/test_fstype.py``)."""
    tier = posix_at(tmp_path / "tier")
    device = os.stat(tier.root).st_dev
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw\n"
        f"36 35 {os.major(device)}:{os.minor(device)} / /mnt/tier rw shared:1 - {kind} srv:/export rw\n"
        "40 1 4095:4095 / /mnt/other rw - ext4 /dev/loop0 rw\n"
    )
    monkeypatch.setattr(fstype, "is_local", functools.partial(fstype.is_local, mountinfo=mountinfo))
    assert await tier.local_disk() is local


REAL_FADVISE = os.posix_fadvise


class Advice:
    """Stands in for ``os.posix_fadvise``: records the file of each call, fails for some files."""

    def __init__(self, failing: Sequence[Path] = ()) -> None:
        self.calls: list[tuple[Path, int, int, int]] = []
        self.fds: list[int] = []
        self.failing = {path.resolve() for path in failing}

    def __call__(self, fd: int, offset: int, length: int, advice: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        self.calls.append((path, offset, length, advice))
        self.fds.append(fd)
        if path in self.failing:
            raise OSError(errno.EINVAL, "Invalid argument")
        REAL_FADVISE(fd, offset, length, advice)

    def willneed(self) -> list[Path]:
        """The files announced with ``POSIX_FADV_WILLNEED``, whole, in order."""
        return [path for path, offset, length, advice in self.calls if advice == os.POSIX_FADV_WILLNEED]


async def test_read_ahead_announces_every_file_it_can_open_and_skips_the_rest(
    posix_src: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = posix_src.root.resolve()
    for name in ("a", "b", "c"):
        (root / name).write_bytes(b"x" * 5000)
    advice = Advice(failing=[root / "a"])  # the kernel refusing one file's advice
    monkeypatch.setattr(os, "posix_fadvise", advice)
    await posix_src.prefetch(["missing", "a", "b", "gone/c", "c"])
    assert advice.calls == [(root / name, 0, 0, os.POSIX_FADV_WILLNEED) for name in ("a", "b", "c")]
    for fd in advice.fds:  # each file closed again, the refused one too
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


async def test_a_group_read_announces_every_file_before_the_first_read(
    posix_src: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One open a file: announced (``WILLNEED``) as opened, read once all are; each closed after."""
    root = posix_src.root.resolve()
    for name, size in (("a", 5000), ("b", 7000), ("c", 3000)):
        (root / name).write_bytes(name.encode() * size)
    events: list[tuple[str, Path]] = []
    advice = Advice(failing=[root / "b"])  # the kernel refusing one file's advice: read all the same
    real_preadv = os.preadv

    def announcing(fd: int, offset: int, length: int, how: int) -> None:
        events.append(("announce", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        advice(fd, offset, length, how)

    def reading(fd: int, buffers: Any, offset: int) -> int:
        events.append(("read", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "posix_fadvise", announcing)
    monkeypatch.setattr(os, "preadv", reading)
    assert posix_src.features.announced_whole_reads
    views = [memoryview(bytearray(n)) for n in (5000, 1, 7000, 3000)]
    errors = await posix_src.read_whole(["a", "missing", "b", "c"], views)
    assert errors[0] is None
    assert isinstance(errors[1], NotFound)
    assert errors[2:] == [None, None]
    assert [bytes(v) for v in (views[0], views[2], views[3])] == [b"a" * 5000, b"b" * 7000, b"c" * 3000]
    assert events == [
        *[("announce", root / name) for name in ("a", "b", "c")],
        *[("read", root / name) for name in ("a", "b", "c")],
    ]
    for fd in advice.fds:  # each file closed again
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)


class AnnouncingPosix(PosixBackend):
    """A POSIX source that says when a read-ahead it was asked for has returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.announced = asyncio.Event()

    async def prefetch(self, relpaths: Sequence[str]) -> None:
        await super().prefetch(relpaths)
        self.announced.set()


async def test_a_hop_announces_its_data_files_and_passes_over_one_the_source_lacks(
    tmp_path: Path, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed hop whose source lost a file the destination holds: its read-ahead cannot open it."""
    monkeypatch.setattr(copyset, "GROUP_FILE_LIMIT", 0)  # every file alone: all hinted, in one window
    (tmp_path / "src").mkdir()
    src = AnnouncingPosix(PosixTier(name="src", kind="posix", path=tmp_path / "src"), chunk_size=CHUNK)
    files = await put_files(src, 10)
    gone = "step/d2/f5.bin"
    await dst.write(WriteRequest(gone, BytesReader(files[gone]), crc(files[gone])))
    (src.root / gone).unlink()
    advice = Advice()
    monkeypatch.setattr(os, "posix_fadvise", advice)

    async def skip(spec: FileSpec) -> bool:
        return spec.relpath == gone

    batch = RecordingBatch(dst)
    copier = GatedCopier(**vars(copier_for(src, dst, batch)))
    copier.before = {MARKER: src.announced.wait}  # the read-ahead has returned before the hop ends
    done = Done(batch)
    async with asyncio.timeout(20):
        await copy_checkpoint_files(copier, batch, specs_of(files), concurrency=4, skip=skip, done=done)
    root = src.root.resolve()
    assert sorted(advice.willneed()) == sorted(root / r for r in files if r not in (gone, MARKER))
    assert done.infos[gone] is None
    assert set(done.infos) == set(files)
    assert visible(dst.root) == files


def test_a_marker_sharing_the_newest_mtime_still_goes_last() -> None:
    """Files written within one tick of the file system's clock share an mtime: the name decides."""
    shard, metadata = FileSpec("step/__0_0.distcp", 10, "a", 5), FileSpec("step/.metadata", 1, "b", 5)
    assert marker_last([metadata, shard])[-1] == metadata  # by name alone, '.' sorts before '_'
    assert marker_last([shard, metadata])[-1] == metadata
    # a watch's own marker (format `marker`), when the runner is told of it
    done, data = FileSpec("step/COMPLETE", 0, "c", 5), FileSpec("step/model.bin", 10, "d", 5)
    assert marker_last([done, data], MARKER_NAMES | {"COMPLETE"})[-1] == done
    assert marker_last([done, data])[-1] == data  # not a marker by name: oldest first, then by name
    touched = FileSpec("step/__1_0.distcp", 10, "e", 9)  # a shard touched after the metadata
    assert marker_last([touched, metadata, shard])[-1] == metadata


async def test_the_marker_goes_last_when_every_file_shares_one_mtime(
    posix_src: PosixBackend, dst: PosixBackend
) -> None:
    files = await put_files(posix_src, 6)
    specs = [FileSpec(s.relpath, s.size, s.checksum, 1_700_000_000_000_000_000) for s in specs_of(files)]
    batch = RecordingBatch(dst)
    await copy_checkpoint_files(copier_for(posix_src, dst, batch), batch, specs, concurrency=4)
    assert [e for e in batch.events if e[0] == "commit"][-1] == ("commit", [MARKER])
    assert visible(dst.root) == files


async def test_between_local_tiers_one_group_runs_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second group in flight only takes the GIL from the first at each system call."""
    monkeypatch.setattr(copyset, "GROUP_FILES", 2)
    monkeypatch.setattr(copyset, "LOCAL_GROUP_FILES", 2)
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    dst = CountingPosix(
        PosixTier(name="dst", kind="posix", path=tmp_path / "dst"), chunk_size=CHUNK, local=True
    )
    src = GroupReadingPosix(
        PosixTier(name="src", kind="posix", path=tmp_path / "src"), chunk_size=CHUNK, groups=dst
    )
    files = await put_files(src, 20)
    batch = RecordingBatch(dst)
    await copy_checkpoint_files(
        copier_for(src, dst, batch, concurrency=8), batch, specs_of(files), concurrency=8
    )
    assert dst.most == 1
    assert visible(dst.root) == files


class GroupSizes(RecordingBatch):
    """A RecordingBatch that notes how many files each group brought."""

    def __init__(self, backend: PosixBackend) -> None:
        super().__init__(backend)
        self.sizes: list[int] = []

    async def write_whole(self, files: Sequence[SmallFile]) -> Sequence[ObjectInfo | TierdError]:
        self.sizes.append(len(files))
        return await super().write_whole(files)


class FarPosix(PosixBackend):
    """A POSIX tier that says it is not on this node's own disks (NFS, Lustre, ...)."""

    async def local_disk(self) -> bool:
        return False


@pytest.mark.parametrize("local", [True, False])
async def test_groups_between_local_tiers_are_bigger(tmp_path: Path, local: bool) -> None:
    """On its one lane a local hop's group takes up to LOCAL_GROUP_FILES: fewer trips, less bookkeeping."""
    src = posix_at(tmp_path / "src")
    (tmp_path / "dst").mkdir()
    kind = PosixBackend if local else FarPosix
    dst = kind(PosixTier(name="dst", kind="posix", path=tmp_path / "dst"), chunk_size=CHUNK)
    files = await put_files(src, 100)
    batch = GroupSizes(dst)
    await copy_checkpoint_files(copier_for(src, dst, batch), batch, specs_of(files), concurrency=4)
    if local:
        assert batch.sizes == [100]  # the data files (the marker is copied alone, after them)
    else:
        assert sorted(batch.sizes) == [36, 64]
    assert visible(dst.root) == files


class WriteSignal(RecordingBatch):
    """A RecordingBatch that tells a thread each time a group was written."""

    def __init__(self, backend: PosixBackend) -> None:
        super().__init__(backend)
        self.wrote = threading.Event()

    async def write_whole(self, files: Sequence[SmallFile]) -> Sequence[ObjectInfo | TierdError]:
        results = await super().write_whole(files)
        self.wrote.set()
        return results


async def test_a_full_batch_is_committed_while_the_copy_goes_on(
    posix_src: PosixBackend, dst: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its syncfs waits for the disk: the one lane of a local hop stopped copying meanwhile."""
    monkeypatch.setattr(posixbatch, "MAX_FILES", 3)
    monkeypatch.setattr(copyset, "LOCAL_GROUP_FILES", 2)
    files = await put_files(posix_src, 10)
    batch = WriteSignal(dst)
    copied_meanwhile: list[bool] = []
    real_commit = posixcopy.commit_staged

    def watched_commit(staged: list[Any]) -> None:
        if not copied_meanwhile:  # the first commit waits for a write made while it runs
            writes = sum(kind == "write" for kind, _ in batch.events)
            batch.wrote.clear()
            while sum(kind == "write" for kind, _ in batch.events) == writes and batch.wrote.wait(10):
                batch.wrote.clear()
            copied_meanwhile.append(sum(kind == "write" for kind, _ in batch.events) > writes)
        real_commit(staged)

    monkeypatch.setattr(posixcopy, "commit_staged", watched_commit)
    done = Done(batch)
    specs = specs_of(files)
    await copy_checkpoint_files(copier_for(posix_src, dst, batch, 1), batch, specs, concurrency=1, done=done)
    assert copied_meanwhile == [True]
    assert done.early == []  # nothing reported before the commit that made it durable returned
    assert [e for e in batch.events if e[0] == "commit"][-1] == ("commit", [MARKER])
    assert visible(dst.root) == files


async def test_a_capped_local_hop_keeps_the_usual_groups(tmp_path: Path) -> None:
    """Under a bandwidth cap the bytes and the progress advance a group at a time."""
    src = posix_at(tmp_path / "src")
    dst = posix_at(tmp_path / "dst")
    files = await put_files(src, 100)
    batch = GroupSizes(dst)
    copier = copier_for(src, dst, batch)
    copier.bucket = TokenBucket(1 << 40)
    await copy_checkpoint_files(copier, batch, specs_of(files), concurrency=4)
    assert sorted(batch.sizes) == [36, 64]
    assert visible(dst.root) == files

"""POSIX specifics the conformance suite cannot see: temp names, pruning, a missing root."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conformance.harness import CountingReader, crc
from tierd.config import PosixTier
from tierd.daemon.backends import (
    ByteBudget,
    BytesReader,
    PosixBackend,
    WriteRequest,
    concurrency,
    copy_object,
    make_backend,
)
from tierd.daemon.backends.posix import backend as posix
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import temp
from tierd.daemon.backends.posix import writes as posixwrites
from tierd.daemon.backends.posix.backend import TEMP_MARK, is_temp_name
from tierd.daemon.beneath import Dir
from tierd.errors import NotFound, TransientBackendError

MIB = 1024 * 1024
T = TypeVar("T")
# Another process writing a temporary file: it creates and locks it, then waits to be killed.
WRITER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"partial")
print("locked", flush=True)
time.sleep(60)
"""


def tier(root: Path, **kw: object) -> PosixTier:
    return PosixTier(name="pfs", kind="posix", path=root, **kw)


@pytest.fixture
def backend(tmp_path: Path) -> PosixBackend:
    root = tmp_path / "root"
    root.mkdir()
    made = make_backend(tier(root))
    assert isinstance(made, PosixBackend)
    return made


def temp_files(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if is_temp_name(name)]


async def test_nothing_visible_under_the_final_name_while_writing(backend: PosixBackend) -> None:
    final = backend.root / "run" / "x.bin"
    seen: list[tuple[bool, list[str]]] = []

    class Watching(CountingReader):
        async def read_into(self, offset: int, buf: memoryview) -> int:
            seen.append((final.exists(), temp_files(backend.root)))
            return await super().read_into(offset, buf)

    data = os.urandom(3 * 1024 * 1024)
    backend.chunk_size = 1024 * 1024
    await backend.write(WriteRequest("run/x.bin", Watching(data), crc(data)))
    assert seen
    assert all(not exists and len(temps) == 1 for exists, temps in seen)
    assert all(TEMP_MARK in temps[0] and temps[0].startswith(".x.bin") for _, temps in seen)
    assert final.read_bytes() == data
    assert temp_files(backend.root) == []


async def test_a_failing_source_leaves_no_temp_file(backend: PosixBackend) -> None:
    data = os.urandom(5 * 1024 * 1024)
    backend.chunk_size = 1024 * 1024
    with pytest.raises(TransientBackendError, match="simulated"):
        await backend.write(WriteRequest("f/x.bin", CountingReader(data, fail_at=3 * 1024 * 1024), crc(data)))
    assert temp_files(backend.root) == []
    assert not (backend.root / "f" / "x.bin").exists()


async def _cancelled_inside(
    monkeypatch: pytest.MonkeyPatch, helper: str, call: Callable[[], Coroutine[Any, Any, object]]
) -> None:
    """Start ``call``, cancel it while the I/O thread is held inside ``posixcopy.<helper>``
    (after the helper made its file), then let the thread finish; the call must end cancelled."""
    inside, go_on = threading.Event(), threading.Event()
    real = getattr(posixcopy, helper)

    def held(*args: Any, **kwargs: Any) -> Any:
        made = real(*args, **kwargs)
        inside.set()
        go_on.wait(10)
        return made

    monkeypatch.setattr(posixcopy, helper, held)
    task = asyncio.create_task(call())
    assert await asyncio.to_thread(inside.wait, 10)
    task.cancel()
    await asyncio.sleep(0)
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_write_cancelled_while_its_temp_file_is_made_leaves_none(
    backend: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A hop whose sibling file fails cancels this write; the thread making its temporary file
    # runs on regardless, and a cancelled caller that did not wait for it lost the file (and its
    # descriptor and lock) on a full disk until the next sweep.
    data = os.urandom(3 * 1024 * 1024)
    backend.chunk_size = 1024 * 1024
    request = WriteRequest("run/x.bin", CountingReader(data), crc(data))
    await _cancelled_inside(monkeypatch, "create_temp", lambda: backend.write(request))
    assert temp_files(backend.root) == []
    assert not (backend.root / "run" / "x.bin").exists()


async def test_a_stage_cancelled_while_its_file_is_staged_leaves_none(
    backend: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file of one chunk is staged for the hop's batch in one trip to the I/O pool; cancelled
    # meanwhile (a sibling's ENOSPC failed the hop), the staged file reached neither the batch
    # nor a discard, and stayed (test_full_disk's big files, 1 run in 15 under load).
    data = os.urandom(100_000)
    request = WriteRequest("run/x.bin", CountingReader(data), crc(data))
    await _cancelled_inside(monkeypatch, "stage_whole", lambda: backend.stage(request))
    assert temp_files(backend.root) == []
    assert not (backend.root / "run" / "x.bin").exists()


async def test_delete_prunes_emptied_directories_but_never_the_root(backend: PosixBackend) -> None:
    for name in ("run/step1/a.bin", "run/step1/sub/b.bin", "run/step2/c.bin"):
        await backend.write(WriteRequest(name, BytesReader(b"x"), crc(b"x")))
    await backend.delete("run/step1/sub/b.bin")
    assert not (backend.root / "run/step1/sub").exists()
    assert (backend.root / "run/step1").is_dir()
    await backend.delete("run/step1/a.bin")
    assert not (backend.root / "run/step1").exists()
    await backend.delete("run/step2/c.bin")
    assert backend.root.is_dir()
    assert list(backend.root.iterdir()) == []


async def test_a_missing_root_is_transient_and_never_created(tmp_path: Path) -> None:
    backend = PosixBackend(tier(tmp_path / "unmounted"))
    with pytest.raises(TransientBackendError, match="not mounted"):
        await backend.write(WriteRequest("x.bin", BytesReader(b"x"), crc(b"x")))
    with pytest.raises(TransientBackendError, match="not mounted"):
        [info async for info in backend.list()]
    with pytest.raises(NotFound):
        await backend.stat("x.bin")
    assert not (tmp_path / "unmounted").exists()


async def test_list_skips_temp_files_symlinks_and_stat_refuses_directories(backend: PosixBackend) -> None:
    await backend.write(WriteRequest("d/real.bin", BytesReader(b"abc"), crc(b"abc")))
    (backend.root / "d" / f".real.bin{TEMP_MARK}0123").write_bytes(b"partial")
    (backend.root / "d" / "link.bin").symlink_to(backend.root / "d" / "real.bin")
    assert [i.relpath async for i in backend.list()] == ["d/real.bin"]
    with pytest.raises(NotFound):
        await backend.stat("d")
    with pytest.raises(NotFound):
        await backend.open_reader("d")


async def test_long_names_still_get_a_temp_name(backend: PosixBackend) -> None:
    name = "n" * 250
    await backend.write(WriteRequest(f"long/{name}", BytesReader(b"abc"), crc(b"abc")))
    assert (backend.root / "long" / name).read_bytes() == b"abc"


def test_location_is_the_path(backend: PosixBackend) -> None:
    assert backend.location("a/b.bin") == str(backend.root / "a" / "b.bin")
    assert not backend.features.native_checksum
    assert not backend.features.multipart


def other_writer(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "locked\n"
    return proc


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL: the process's locks go with it."""
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


async def test_a_write_removes_what_a_killed_write_of_the_same_name_left(backend: PosixBackend) -> None:
    run = backend.root / "run"
    run.mkdir()
    killed, other = run / f".x.bin{TEMP_MARK}0123456789ab", run / f".y.bin{TEMP_MARK}0123456789ab"
    kill(other_writer(killed))
    other.write_bytes(b"partial")  # another name's leftover waits for the periodic sweep
    age(killed, 10)
    age(other, 10)
    await backend.write(WriteRequest("run/x.bin", BytesReader(b"abc"), crc(b"abc")))
    assert temp_files(backend.root) == [other.name]
    assert (run / "x.bin").read_bytes() == b"abc"


async def test_a_temp_file_another_process_is_writing_is_kept(backend: PosixBackend) -> None:
    run = backend.root / "run"
    run.mkdir()
    live = run / f".x.bin{TEMP_MARK}0123456789ab"
    writer = other_writer(live)
    try:
        age(live, 7200)  # however old it looks
        await backend.write(WriteRequest("run/x.bin", BytesReader(b"abc"), crc(b"abc")))
        assert await backend.abort_stale_uploads(3600) == 0
        assert temp_files(backend.root) == [live.name]
    finally:
        kill(writer)
    assert await backend.abort_stale_uploads(3600) == 1  # its writer is gone now


@pytest.mark.parametrize("locks", [True, False], ids=["flock", "no-locks"])
async def test_concurrent_writes_of_one_name_keep_each_others_temp_files(
    backend: PosixBackend, monkeypatch: pytest.MonkeyPatch, locks: bool
) -> None:
    if not locks:

        def refuse(fd: int, operation: int) -> None:
            raise OSError(errno.ENOLCK, "no locks on this file system")

        monkeypatch.setattr(fcntl, "flock", refuse)
    backend.chunk_size = MIB
    first_data, second_data = os.urandom(3 * MIB), os.urandom(3 * MIB)
    paused, second_done = asyncio.Event(), asyncio.Event()

    class Pausing(CountingReader):
        async def read_into(self, offset: int, buf: memoryview) -> int:
            if offset >= MIB and not paused.is_set():
                for name in temp_files(backend.root):
                    age(backend.root / "same" / name, 7200)  # old enough for any threshold
                paused.set()
                await second_done.wait()
            return await super().read_into(offset, buf)

    first = asyncio.create_task(
        backend.write(WriteRequest("same/x.bin", Pausing(first_data), crc(first_data)))
    )
    await paused.wait()
    await backend.write(WriteRequest("same/x.bin", BytesReader(second_data), crc(second_data)))
    assert await backend.abort_stale_uploads(3600) == 0
    second_done.set()
    await first  # its temporary file survived both the second write and the sweep
    assert (backend.root / "same" / "x.bin").read_bytes() == first_data
    assert temp_files(backend.root) == []


class RecordingBudget(ByteBudget):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.taken: list[int] = []

    async def acquire(self, nbytes: int) -> int:
        taken = await super().acquire(nbytes)
        self.taken.append(taken)
        return taken


async def test_read_back_buffers_come_from_the_budget(tmp_path: Path) -> None:
    budget = RecordingBudget(posixwrites.HASH_BUFFER)
    backend = PosixBackend(tier(tmp_path, verify="readback"), budget=budget, chunk_size=MIB)
    data = os.urandom(3 * MIB + 1)
    info = await backend.write(WriteRequest("r/x.bin", BytesReader(data), crc(data)))
    assert info.verified_by == "readback"
    assert await backend.hash("r/x.bin") == crc(data)
    assert budget.taken.count(posixwrites.HASH_BUFFER) == 2  # the write's read-back, then hash()
    assert budget.used == 0


async def test_chunk_buffers_live_no_longer_than_their_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def late_dropping(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """An executor whose threads let go of a finished call a little after the loop resumed."""
        call = functools.partial(fn, *args, **kwargs)
        try:
            return await asyncio.to_thread(call)
        finally:
            asyncio.get_running_loop().call_later(0.05, lambda: call)

    for module in (posix, posixwrites, concurrency):
        monkeypatch.setattr(module, "blocking", late_dropping)
    budget = ByteBudget(4 * MIB)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    source = PosixBackend(tier(src), budget=budget, chunk_size=MIB)
    target = PosixBackend(tier(dst), budget=budget, chunk_size=MIB)
    sums = {}
    for n in range(4):
        data = os.urandom(8 * MIB)
        (src / f"f{n}").write_bytes(data)
        sums[f"f{n}"] = crc(data)
    del data
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await asyncio.gather(*(copy_object(source, name, target, name, sum_) for name, sum_ in sums.items()))
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < budget.limit + MIB // 2, f"{peak / MIB:.1f} MiB"


async def test_a_hop_removes_a_killed_writers_fresh_temp_file_at_once(backend: PosixBackend) -> None:
    run = backend.root / "run"
    run.mkdir()
    killed = run / f".x.bin{TEMP_MARK}0123456789ab"
    kill(other_writer(killed))  # its lock went with it, a moment ago
    assert await backend.abort_stale_uploads(0) == 0  # the sweep waits out the lock grace
    assert await backend.remove_leftovers(["run/x.bin"]) == 1
    assert temp_files(backend.root) == []


async def test_a_hop_keeps_a_temp_file_another_process_holds_locked(backend: PosixBackend) -> None:
    run = backend.root / "run"
    run.mkdir()
    live = run / f".x.bin{TEMP_MARK}0123456789ab"
    writer = other_writer(live)
    try:
        age(live, 7200)
        assert await backend.remove_leftovers(["run/x.bin"]) == 0
        assert temp_files(backend.root) == [live.name]
    finally:
        kill(writer)
    assert await backend.remove_leftovers(["run/x.bin"]) == 1


async def test_a_name_cut_in_its_temp_names_keeps_the_age_rule(backend: PosixBackend) -> None:
    """Past 200 characters two names share temp names: the other may be a live writer's on another node."""
    long_name = "n" * 230
    run = backend.root / "run"
    run.mkdir()
    leftover = run / f".{long_name[:200]}{TEMP_MARK}0123456789ab"
    leftover.write_bytes(b"partial")
    assert await backend.remove_leftovers([f"run/{long_name}"]) == 0
    age(leftover, 10)
    assert await backend.remove_leftovers([f"run/{long_name}"]) == 1


async def test_writes_after_a_hops_clean_up_reuse_its_listing(
    backend: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = backend.root / "run"
    run.mkdir()
    other = run / f".y.bin{TEMP_MARK}0123456789ab"
    other.write_bytes(b"another daemon's file, being written")
    assert await backend.remove_leftovers(["run/x.bin"]) == 0
    listings: list[Path] = []
    real = temp.temp_names_in

    def counting(directory: Dir) -> set[str]:
        listings.append(directory.path)
        return real(directory)

    monkeypatch.setattr(posixwrites, "temp_names_in", counting)
    await backend.write(WriteRequest("run/x.bin", BytesReader(b"abc"), crc(b"abc")))
    assert listings == []
    assert temp_files(backend.root) == [other.name]
    assert (run / "x.bin").read_bytes() == b"abc"

"""Directory fsyncs are shared, and never cover a rename made after they began."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from tierd.daemon.backends.posix import dirsync
from tierd.daemon.beneath import Dir, Root


def opened(path: Path) -> Dir:
    return Root(path).open()


def test_concurrent_requests_share_fsyncs_that_began_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[tuple[float, float]] = []

    def slow_fsync(directory: Dir) -> None:
        start = time.monotonic()
        time.sleep(0.02)
        runs.append((start, time.monotonic()))

    monkeypatch.setattr(Dir, "fsync", slow_fsync)
    syncer = dirsync.DirectorySyncer()
    directory = opened(tmp_path)
    calls: list[tuple[float, float]] = []
    lock = threading.Lock()

    def caller() -> None:
        asked = time.monotonic()
        syncer.sync(directory)
        with lock:
            calls.append((asked, time.monotonic()))

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 16
    assert syncer.fsyncs == len(runs) < 16
    for asked, returned in calls:
        assert any(asked <= start and end <= returned for start, end in runs)


def test_a_failed_fsync_fails_its_leader_and_the_others_try_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = 0
    first_started = threading.Event()
    release = threading.Event()

    def failing_once(directory: Dir) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            first_started.set()
            release.wait(5)
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(Dir, "fsync", failing_once)
    syncer = dirsync.DirectorySyncer()
    errors: list[BaseException] = []
    directory = opened(tmp_path)

    def caller() -> None:
        try:
            syncer.sync(directory)
        except OSError as exc:
            errors.append(exc)

    leader = threading.Thread(target=caller)
    leader.start()
    assert first_started.wait(5)
    followers = [threading.Thread(target=caller) for _ in range(3)]
    for thread in followers:
        thread.start()
    deadline = time.monotonic() + 5
    while syncer._dirs[directory.path].users < 4 and time.monotonic() < deadline:
        time.sleep(0.005)  # until the followers wait on the leader's fsync
    release.set()
    for thread in (leader, *followers):
        thread.join(5)
    assert len(errors) == 1
    assert syncer.fsyncs == 1  # one retry served all three followers
    assert syncer._dirs == {}  # nothing kept for idle directories


def test_a_real_directory_fsync_syncs_that_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[os.stat_result] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    (tmp_path / "f").write_bytes(b"x")
    with opened(tmp_path) as directory:
        synced.clear()
        dirsync.sync_directory(directory)
    assert len(synced) == 1
    assert stat.S_ISDIR(synced[0].st_mode)
    assert (synced[0].st_dev, synced[0].st_ino) == (tmp_path.stat().st_dev, tmp_path.stat().st_ino)


@pytest.mark.parametrize(("code", "raised"), [(errno.EINVAL, False), (errno.EIO, True)])
def test_a_refused_directory_fsync_is_tolerated_only_as_einval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, raised: bool
) -> None:
    def refusing_fsync(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    directory = opened(tmp_path)
    monkeypatch.setattr(os, "fsync", refusing_fsync)
    if raised:
        with pytest.raises(OSError, match=os.strerror(code)) as caught:
            directory.fsync()
        assert caught.value.errno == code
    else:
        directory.fsync()  # some network file systems refuse directory fsync

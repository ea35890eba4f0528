"""The recorded owner, group and mode given to real files and directories (``posix.owner``)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harness import crc
from tierd.config import PosixTier
from tierd.daemon.backends import BytesReader, PosixBackend, WriteRequest
from tierd.daemon.backends.base import Ownership
from tierd.daemon.backends.posix import unnamed
from tierd.daemon.backends.posix.owner import apply_to_dir, apply_to_fd

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="O_PATH and /proc/self/fd are Linux's"),
    pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another owner needs root"),
]

JOB = 1234


def shape(path: Path) -> tuple[int, int, int]:
    """(uid, gid, permission bits) of ``path``, its symlink not followed."""
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


@pytest.fixture
def temp_file(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A file created as the write path creates one: 0600, root's, open read-write."""
    path = tmp_path / ".ckpt.bin.tierd-tmp-0"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    yield fd, path
    os.close(fd)


def test_a_file_gets_its_recorded_owner_group_and_mode(temp_file: tuple[int, Path]) -> None:
    fd, path = temp_file
    assert shape(path) == (0, 0, 0o600)
    apply_to_fd(fd, Ownership(JOB, JOB + 1, 0o640))
    assert shape(path) == (JOB, JOB + 1, 0o640)


def test_setuid_and_setgid_are_never_given_to_a_file(temp_file: tuple[int, Path]) -> None:
    fd, path = temp_file
    apply_to_fd(fd, Ownership(JOB, JOB, 0o6755 | stat.S_ISVTX))
    assert shape(path) == (JOB, JOB, 0o755 | stat.S_ISVTX)


def test_no_recorded_owner_changes_nothing(temp_file: tuple[int, Path]) -> None:
    fd, path = temp_file
    apply_to_fd(fd, None)
    assert shape(path) == (0, 0, 0o600)


@pytest.mark.parametrize("flags", [os.O_RDONLY, getattr(os, "O_PATH", 0)], ids=["rdonly", "o_path"])
def test_a_directory_gets_its_owner_and_mode_and_keeps_setgid(tmp_path: Path, flags: int) -> None:
    directory = tmp_path / "step_100"
    directory.mkdir(mode=0o700)
    fd = os.open(directory, flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        apply_to_dir(fd, Ownership(JOB, JOB, 0o750))
        assert shape(directory) == (JOB, JOB, 0o750)
        apply_to_dir(fd, Ownership(JOB, JOB, 0o6770))  # a shared group tree: setgid stays, setuid goes
        assert shape(directory) == (JOB, JOB, 0o2770)
        apply_to_dir(fd, None)
        assert shape(directory) == (JOB, JOB, 0o2770)
    finally:
        os.close(fd)


def test_an_o_path_directory_is_changed_through_its_descriptor_not_a_symlink(tmp_path: Path) -> None:
    """The ``/proc/self/fd`` route reaches the opened directory itself, whatever its name now is."""
    path = tmp_path / "step_100"
    path.mkdir(mode=0o700)
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    try:
        path.rename(tmp_path / "moved")
        path.symlink_to(victim)  # swapped after it was opened
        apply_to_dir(fd, Ownership(JOB, JOB, 0o755))
    finally:
        os.close(fd)
    assert shape(victim) == (0, 0, 0o700)
    assert shape(tmp_path / "moved") == (JOB, JOB, 0o755)


def test_a_file_is_changed_through_the_descriptor_it_was_written_by(temp_file: tuple[int, Path]) -> None:
    """No ``fcntl`` asks whether a file's descriptor is ``O_PATH``: it never is (one call less a file)."""
    fd, path = temp_file
    called: list[int] = []
    real = fcntl.fcntl

    def spying(*args: Any) -> Any:
        called.append(args[0])
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fcntl, "fcntl", spying)
        apply_to_fd(fd, Ownership(JOB, JOB, 0o644))
    assert called == []
    assert shape(path) == (JOB, JOB, 0o644)


CHILD = textwrap.dedent(
    """
    import json, os, sys
    from structlog.testing import capture_logs
    from tierd.daemon.backends.base import Ownership
    from tierd.daemon.backends.posix.owner import apply_to_dir, apply_to_fd

    directory = int(sys.argv[1])  # open before the privileges went: its path may be root's only
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)  # a daemon that is not root
    with capture_logs() as logs:
        for name in ("a", "b"):
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=directory)
            apply_to_fd(fd, Ownership(1234, 1234, 0o644))
            os.close(fd)
        os.mkdir("d", 0o700, dir_fd=directory)
        fd = os.open("d", os.O_PATH | os.O_DIRECTORY, dir_fd=directory)
        apply_to_dir(fd, Ownership(1234, 1234, 0o755))
        os.close(fd)
    print(json.dumps([entry["event"] for entry in logs]))
    """
)


def test_a_daemon_that_is_not_root_keeps_0600_and_says_so_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, 65534, 65534)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[4])}
    directory = os.open(out, os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(directory)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            pass_fds=[directory],
            cwd="/",
        )
    finally:
        os.close(directory)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["owner_not_applied"]
    assert shape(out / "a") == shape(out / "b") == (65534, 65534, 0o600)
    assert shape(out / "d") == (65534, 65534, 0o700)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another owner needs root")
@pytest.mark.parametrize("size", [3, 20 * 1024 * 1024 + 1], ids=["whole", "chunked"])
@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batched"])
async def test_a_copy_is_created_0600_and_gets_its_owner_and_mode_only_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, batched: bool
) -> None:
    # io_mode set: auto's first big write into a file system probes it with a file of its own
    # (once per device and process, so whether this test saw it hung on the tests before it).
    backend = PosixBackend(PosixTier(name="pfs", kind="posix", path=tmp_path, io_mode="direct"))
    backend.expect_directories({"run": Ownership(1234, 1235, 0o750)})
    if batched:  # a staged file has no name (posix.unnamed): the tier's first one probes how to link it
        warm = backend.batch()
        await warm.write(WriteRequest("warm/w.bin", BytesReader(b"w"), crc(b"w")))
        await warm.commit()
    created: list[int] = []
    renamed: list[tuple[int, int, int]] = []  # its owner and mode when it gets its final name
    real_open, real_rename, real_link = os.open, os.rename, unnamed._link

    def spy_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if flags & os.O_CREAT or flags & os.O_TMPFILE == os.O_TMPFILE:
            created.append(mode)
        return real_open(path, flags, mode, **kwargs)

    def spy_rename(src: Any, dst: Any, **kwargs: Any) -> None:
        st = os.stat(src, dir_fd=kwargs.get("src_dir_fd"), follow_symlinks=False)
        renamed.append((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
        real_rename(src, dst, **kwargs)

    def spy_link(fd: int, directory: Any, name: str, method: str) -> None:
        st = os.fstat(fd)
        renamed.append((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
        real_link(fd, directory, name, method)

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "rename", spy_rename)
    monkeypatch.setattr(unnamed, "_link", spy_link)
    data = os.urandom(size)
    owner = Ownership(1234, 1235, 0o640)
    if batched:
        batch = backend.batch()
        await batch.write(WriteRequest("run/x.bin", BytesReader(data), crc(data), owner=owner))
        await batch.commit()
    else:
        await backend.write(WriteRequest("run/x.bin", BytesReader(data), crc(data), owner=owner))
    assert created == [0o600]
    assert renamed == [(1234, 1235, 0o640)]
    st = (tmp_path / "run" / "x.bin").stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 1235, 0o640)
    run = (tmp_path / "run").stat()
    assert (run.st_uid, run.st_gid, stat.S_IMODE(run.st_mode)) == (1234, 1235, 0o750)

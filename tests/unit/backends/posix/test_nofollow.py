"""Reads of a POSIX tier never follow a symlink below its root nor wait on a FIFO (``nofollow``)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.opens import OpenSpy
from tierd.config import PosixTier
from tierd.daemon.backends import make_backend
from tierd.daemon.backends.posix.backend import PosixBackend
from tierd.daemon.nofollow import Opener, open_regular, read_regular
from tierd.errors import NotFound, PermanentBackendError

pytestmark = pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="inotify and O_PATH are Linux's")

SECRET = b"only root may read this\n" * 20_000  # larger than a whole read at open


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``tier/ok/file``, ``tier/link`` -> secret, ``tier/dir`` -> outside, ``tier/pipe`` (FIFO)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_bytes(SECRET)
    tier = tmp_path / "tier"
    (tier / "ok").mkdir(parents=True)
    (tier / "ok" / "file").write_bytes(b"fine")
    (tier / "link").symlink_to(outside / "file")
    (tier / "dir").symlink_to(outside)
    os.mkfifo(tier / "pipe")
    return tier


@pytest.fixture
def spy(tree: Path) -> Iterator[OpenSpy]:
    watcher = OpenSpy(tree.parent / "outside" / "file", tree / "pipe")
    yield watcher
    watcher.close()


def _errno(path: Path, root: Path | None) -> int | None:
    """The errno ``open_regular`` fails with (None if it opened the file)."""
    try:
        os.close(open_regular(path, root))
    except OSError as exc:
        return exc.errno
    return None


def test_open_regular(tree: Path, spy: OpenSpy) -> None:
    fd = open_regular(tree / "ok" / "file", tree)
    try:
        assert os.read(fd, 10) == b"fine"
    finally:
        os.close(fd)
    assert _errno(tree / "link", tree) == errno.ELOOP
    assert _errno(tree / "link", None) == errno.ELOOP
    assert _errno(tree / "dir" / "file", tree) == errno.ENOTDIR
    assert _errno(tree / "pipe", tree) == errno.ENOENT
    assert _errno(tree / "ok", tree) == errno.ENOENT
    assert _errno(tree.parent / "outside" / "file", tree) == errno.EXDEV
    assert _errno(tree / "ok" / ".." / "link", tree) == errno.EINVAL
    assert spy.opened() == set()  # neither the FIFO nor the secret
    with pytest.raises(OSError, match="longer than 3 bytes"):
        read_regular(tree / "ok" / "file", 3)
    assert read_regular(tree / "ok" / "file", 4, tree) == b"fine"


def test_opener_stat_opens_nothing_and_follows_no_symlink(tree: Path, spy: OpenSpy) -> None:
    with Opener(tree) as opener:
        assert opener.stat(tree / "ok" / "file").st_size == 4
        assert stat.S_ISLNK(opener.stat(tree / "link").st_mode)  # the link itself, not the secret
        assert stat.S_ISFIFO(opener.stat(tree / "pipe").st_mode)
        with pytest.raises(NotADirectoryError) as through:
            opener.stat(tree / "dir" / "file")
        assert through.value.errno == errno.ENOTDIR
        with pytest.raises(FileNotFoundError):
            opener.stat(tree / "ok" / "gone")
    assert spy.opened() == set()


@pytest.fixture
def backend(tree: Path) -> PosixBackend:
    return PosixBackend(PosixTier(name="t0", kind="posix", path=tree))


@pytest.mark.parametrize("relpath", ["link", "dir/file"])
async def test_backend_reads_refuse_symlinks(backend: PosixBackend, spy: OpenSpy, relpath: str) -> None:
    with pytest.raises(PermanentBackendError):
        await backend.open_reader(relpath)
    with pytest.raises(PermanentBackendError):
        await backend.hash(relpath)
    (error,) = await backend.read_whole([relpath], [memoryview(bytearray(len(SECRET)))])
    assert isinstance(error, PermanentBackendError)
    await backend.prefetch([relpath])
    if relpath == "link":
        with pytest.raises(NotFound):
            await backend.stat(relpath)
    assert spy.opened() == set()
    assert [info.relpath async for info in backend.list()] == ["ok/file"]


async def test_tier0_backend_refuses_hard_links(tree: Path, spy: OpenSpy) -> None:
    os.link(tree.parent / "outside" / "file", tree / "ok" / "linked")
    tier = PosixTier(name="t0", kind="posix", path=tree)
    tier0 = make_backend(tier, written_by_jobs=True)
    with pytest.raises(PermanentBackendError, match="hard link"):
        await tier0.open_reader("ok/linked")
    with pytest.raises(PermanentBackendError, match="hard link"):
        await tier0.hash("ok/linked")
    (error,) = await tier0.read_whole(["ok/linked"], [memoryview(bytearray(len(SECRET)))])
    assert isinstance(error, PermanentBackendError)
    await tier0.prefetch(["ok/linked"])
    assert spy.read() == set()  # opened (it is the same inode), found linked, closed unread
    assert await make_backend(tier).hash("ok/linked")  # a durable tier's files may be linked


async def test_backend_reads_never_wait_on_a_fifo(backend: PosixBackend) -> None:
    with pytest.raises(NotFound, match="not a regular file"):
        await backend.open_reader("pipe")
    with pytest.raises(NotFound):
        await backend.hash("pipe")
    (error,) = await backend.read_whole(["pipe"], [memoryview(bytearray(4))])
    assert isinstance(error, NotFound)
    await backend.prefetch(["pipe"])
    reader = await backend.open_reader("ok/file")
    await reader.close()


def _interleaved(tmp_path: Path, dirs: int, files: int) -> tuple[Path, list[Path]]:
    """``tier/step/rank<i % dirs>/part_<i>``, listed in the order a checkpoint's files come."""
    tier = tmp_path / "tier"
    paths = []
    for i in range(files):
        path = tier / "step" / f"rank{i % dirs}" / f"part_{i}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * i)
        paths.append(path)
    return tier, paths


def test_opener_walks_each_directory_once_however_files_interleave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files of four directories in turn: the root, ``step`` and each ``rank`` opened once, then a file each.

    Keeping only the last directory open walked from the root again for every file
    (four opens a file here): 32 opens instead of 14.
    """
    tier, paths = _interleaved(tmp_path, dirs=4, files=8)
    opened: list[str] = []
    real_open = os.open

    def counting(path: str | Path, flags: int, *args: object, **kwargs: object) -> int:
        opened.append(os.fspath(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    with Opener(tier) as opener:
        for i, path in enumerate(paths):
            fd = opener.open(path)
            assert os.fstat(fd).st_size == i
            os.close(fd)
    assert len(opened) == 1 + 1 + 4 + 8


def test_opener_keeps_a_bounded_number_of_directories_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deeper than it keeps, and more directories than it keeps: every file opens, no descriptor stays."""
    monkeypatch.setattr(Opener, "MAX_DIRECTORIES", 3)
    tier, paths = _interleaved(tmp_path, dirs=5, files=10)
    deep = tier.joinpath(*[f"d{i}" for i in range(8)], "file")
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"deep")
    before = len(os.listdir("/proc/self/fd"))
    with Opener(tier) as opener:
        for path in [*paths, deep, *paths]:
            fd = opener.open(path)
            os.close(fd)
            assert len(os.listdir("/proc/self/fd")) <= before + 3
    assert len(os.listdir("/proc/self/fd")) == before

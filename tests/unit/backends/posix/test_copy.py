"""How a POSIX write fills its temp file: in the kernel, through buffers, or whole."""

from __future__ import annotations

import errno
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conformance.harness import crc
from tierd.config import PosixTier
from tierd.daemon.backends import BytesReader, PosixBackend, WriteRequest, copy_object
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import writeback
from tierd.daemon.backends.posix.backend import WHOLE_READ_LIMIT, is_temp_name
from tierd.daemon.backends.posix.reader import PosixReader
from tierd.daemon.backends.posix.temp import TempFile
from tierd.daemon.beneath import Root
from tierd.errors import IntegrityError, TransientBackendError

MIB = 1024 * 1024
CopyFileRange = Callable[..., int]


def backend_at(root: Path, **kw: object) -> PosixBackend:
    """A tier writing big files by O_DIRECT where it can (how it chooses: ``test_iomode``)."""
    root.mkdir(parents=True, exist_ok=True)
    kw.setdefault("io_mode", "direct")
    return PosixBackend(PosixTier(name=root.name, kind="posix", path=root, **kw), chunk_size=MIB)


def leftovers(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if is_temp_name(name)]


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every copy_file_range call's (offset, count), passed on to the real one."""
    calls: list[tuple[int, int]] = []
    real: CopyFileRange = os.copy_file_range

    def spy(src: int, dst: int, count: int, offset_src: int, offset_dst: int) -> int:
        calls.append((offset_src, count))
        return real(src, dst, count, offset_src, offset_dst)

    monkeypatch.setattr(os, "copy_file_range", spy)
    return calls


@pytest.fixture
def no_direct_io(monkeypatch: pytest.MonkeyPatch) -> None:
    """A destination file system that takes no O_DIRECT (tmpfs before Linux 6.6, some FUSE)."""
    monkeypatch.setattr(posixcopy, "open_direct", lambda temp: -1)


@pytest.mark.usefixtures("no_direct_io")
async def test_a_local_file_is_copied_in_the_kernel_where_direct_io_is_refused(
    tmp_path: Path, kernel_calls: list[tuple[int, int]]
) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(70 * MIB + 5)  # three kernel chunks, the last one short
    (src.root / "x.bin").write_bytes(data)
    info = await copy_object(src, "x.bin", dst, "run/x.bin", crc(data))
    assert (dst.root / "run" / "x.bin").read_bytes() == data
    assert info.checksum == crc(data)
    assert info.verified_by == "stream"
    assert sorted(offset for offset, _ in kernel_calls)[:3] == [0, 32 * MIB, 64 * MIB]
    assert leftovers(dst.root) == []


@pytest.mark.usefixtures("no_direct_io")
async def test_a_refused_kernel_copy_falls_back_to_buffers_and_is_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0

    def cross_device(*args: object) -> int:
        nonlocal calls
        calls += 1
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", cross_device)
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    files = {f"f{n}.bin": os.urandom(3 * MIB + n) for n in range(2)}
    for name, data in files.items():
        (src.root / name).write_bytes(data)
        await copy_object(src, name, dst, name, crc(data))
        assert (dst.root / name).read_bytes() == data
    assert 1 <= calls <= dst.chunks_per_file  # the first file's chunks found out; the second never tried
    assert leftovers(dst.root) == []


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform")
async def test_a_local_file_goes_to_disk_directly_rather_than_through_the_kernel_copy(
    tmp_path: Path, kernel_calls: list[tuple[int, int]], direct_writes: list[tuple[int, int]]
) -> None:
    _skip_without_direct_io(tmp_path)
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(3 * MIB + 5)
    (src.root / "x.bin").write_bytes(data)
    info = await copy_object(src, "x.bin", dst, "x.bin", crc(data))
    assert (dst.root / "x.bin").read_bytes() == data
    assert info.verified_by == "stream"
    assert kernel_calls == []
    assert sorted(direct_writes) == [(0, MIB), (MIB, MIB), (2 * MIB, MIB)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/dev/shm is Linux's tmpfs")
async def test_a_file_on_another_file_system_is_copied(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system here")
    other = shm / f"tierd-test-{os.getpid()}"
    try:
        src, dst = backend_at(other), backend_at(tmp_path / "dst")
        data = os.urandom(5 * MIB)
        (src.root / "x.bin").write_bytes(data)
        await copy_object(src, "x.bin", dst, "x.bin", crc(data))
        assert (dst.root / "x.bin").read_bytes() == data
    finally:
        for path in other.glob("*"):
            path.unlink()
        other.rmdir()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "kernel"])
async def test_a_source_changed_since_first_sight_is_refused(
    tmp_path: Path, kernel_calls: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    if not direct:
        monkeypatch.setattr(posixcopy, "open_direct", lambda temp: -1)
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = bytearray(os.urandom(40 * MIB))
    expected = crc(bytes(data))
    data[33 * MIB] ^= 1
    (src.root / "x.bin").write_bytes(data)
    with pytest.raises(IntegrityError, match="source CRC64NVME"):
        await copy_object(src, "x.bin", dst, "x.bin", expected)
    assert bool(kernel_calls) == (not dst._direct)
    assert not (dst.root / "x.bin").exists()
    assert leftovers(dst.root) == []


async def test_a_source_that_shrank_is_refused(tmp_path: Path) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(40 * MIB)
    (src.root / "x.bin").write_bytes(data)
    reader = await src.open_reader("x.bin")
    os.truncate(src.root / "x.bin", 35 * MIB)
    try:
        with pytest.raises(IntegrityError, match="did the file shrink"):
            await dst.write(WriteRequest("x.bin", reader, crc(data)))
    finally:
        await reader.close()
    assert not (dst.root / "x.bin").exists()
    assert leftovers(dst.root) == []


@pytest.mark.parametrize("size", [0, 1, MIB], ids=["empty", "one-byte", "one-chunk"])
async def test_a_file_of_one_chunk_is_placed_whole(tmp_path: Path, size: int) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(size)
    (src.root / "x.bin").write_bytes(data)
    info = await copy_object(src, "x.bin", dst, "a/b/x.bin", crc(data))
    assert (dst.root / "a" / "b" / "x.bin").read_bytes() == data
    assert info.size == size
    assert info.verified_by == "stream"


@pytest.mark.parametrize("verify", ["native", "readback"])
async def test_a_small_file_that_does_not_match_creates_nothing(tmp_path: Path, verify: str) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst", verify=verify)
    (src.root / "x.bin").write_bytes(b"changed since detection")
    with pytest.raises(IntegrityError, match="source CRC64NVME"):
        await copy_object(src, "x.bin", dst, "new/x.bin", crc(b"as it was at first sight"))
    with pytest.raises(IntegrityError, match="source CRC64NVME"):
        await dst.write(WriteRequest("new/y.bin", BytesReader(b"abc"), crc(b"abd")))
    assert not (dst.root / "new").exists()  # not even its directory


async def test_a_small_file_from_a_source_that_shrank_is_refused(tmp_path: Path) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(WHOLE_READ_LIMIT + 4096)  # one chunk, but too big to be read at open
    (src.root / "x.bin").write_bytes(data)
    reader = await src.open_reader("x.bin")
    os.truncate(src.root / "x.bin", 100)
    try:
        with pytest.raises(IntegrityError, match="did the file shrink"):
            await dst.write(WriteRequest("x.bin", reader, crc(data)))
    finally:
        await reader.close()
    assert list(dst.root.iterdir()) == []


async def test_a_tiny_file_is_read_whole_and_closed_when_opened(tmp_path: Path) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(WHOLE_READ_LIMIT)
    (src.root / "x.bin").write_bytes(data)
    reader = await src.open_reader("x.bin")
    assert reader.size == len(data)
    assert isinstance(reader, PosixReader)
    assert reader.fileno() == -1  # nothing left open
    os.unlink(src.root / "x.bin")  # the bytes were read with the open
    info = await dst.write(WriteRequest("x.bin", reader, crc(data)))
    assert info.verified_by == "stream"
    assert (dst.root / "x.bin").read_bytes() == data
    await reader.close()


async def test_a_tiny_file_that_shrank_while_opened_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(4096)
    (src.root / "x.bin").write_bytes(data)
    real_pread = os.pread
    monkeypatch.setattr(
        os, "pread", lambda fd, n, offset: real_pread(fd, n, offset)[:100]
    )  # truncated meanwhile
    reader = await src.open_reader("x.bin")
    with pytest.raises(IntegrityError, match="did the file shrink"):
        await dst.write(WriteRequest("x.bin", reader, crc(data)))
    assert list(dst.root.iterdir()) == []


async def test_a_small_file_on_a_missing_root_is_transient(tmp_path: Path) -> None:
    dst = PosixBackend(PosixTier(name="gone", kind="posix", path=tmp_path / "gone"))
    with pytest.raises(TransientBackendError, match="not mounted"):
        await dst.write(WriteRequest("x.bin", BytesReader(b"x"), crc(b"x")))
    assert not (tmp_path / "gone").exists()


@pytest.fixture
def direct_fds(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """Every descriptor the real ``posixcopy.open_direct`` hands out."""
    fds: set[int] = set()
    real_open = posixcopy.open_direct

    def open_direct(temp: TempFile) -> int:
        fd = real_open(temp)
        fds.add(fd)
        return fd

    monkeypatch.setattr(posixcopy, "open_direct", open_direct)
    return fds


@pytest.fixture
def direct_writes(monkeypatch: pytest.MonkeyPatch, direct_fds: set[int]) -> list[tuple[int, int]]:
    """(offset, length) of every pwrite through an O_DIRECT descriptor, passed on to the real one."""
    writes: list[tuple[int, int]] = []
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        if fd in direct_fds:
            writes.append((offset, len(data)))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    return writes


def _skip_without_direct_io(directory: Path) -> None:
    probe = directory / "direct-probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644))
    except OSError:
        pytest.skip(f"{directory}'s file system takes no O_DIRECT")
    finally:
        probe.unlink(missing_ok=True)


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform")
async def test_chunks_from_a_buffer_go_to_disk_directly_and_the_tail_through_the_cache(
    tmp_path: Path, direct_writes: list[tuple[int, int]]
) -> None:
    _skip_without_direct_io(tmp_path)
    dst = backend_at(tmp_path / "dst")
    data = os.urandom(2 * MIB + 4096 + 100)  # two whole chunks, then an aligned part and a tail
    info = await dst.write(WriteRequest("x.bin", BytesReader(data), crc(data)))
    assert (dst.root / "x.bin").read_bytes() == data
    assert info.verified_by == "stream"
    assert sorted(direct_writes) == [(0, MIB), (MIB, MIB), (2 * MIB, 4096)]
    assert dst._direct
    assert leftovers(dst.root) == []


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform")
async def test_a_file_system_refusing_direct_io_is_written_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_writes: list[tuple[int, int]]
) -> None:
    opened_direct = 0
    real_open = os.open

    def no_direct_open(path: str, flags: int, *args: int, **kwargs: int) -> int:
        nonlocal opened_direct
        if flags & os.O_DIRECT:
            opened_direct += 1
            raise OSError(errno.EINVAL, "Invalid argument")  # as tmpfs before Linux 6.6
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_direct_open)
    dst = backend_at(tmp_path / "dst")
    for n in range(2):
        data = os.urandom(3 * MIB + n)
        await dst.write(WriteRequest(f"f{n}.bin", BytesReader(data), crc(data)))
        assert (dst.root / f"f{n}.bin").read_bytes() == data
    assert opened_direct == 1  # refused once, not tried again
    assert not dst._direct
    assert direct_writes == []
    assert leftovers(dst.root) == []


@pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="no O_DIRECT on this platform")
async def test_a_direct_write_refused_by_the_file_system_is_done_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_fds: set[int]
) -> None:
    _skip_without_direct_io(tmp_path)
    real_pwrite = os.pwrite

    def refusing_pwrite(fd: int, data: memoryview, offset: int) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", refusing_pwrite)
    dst = backend_at(tmp_path / "dst")
    data = os.urandom(3 * MIB + 7)
    await dst.write(WriteRequest("x.bin", BytesReader(data), crc(data)))
    assert (dst.root / "x.bin").read_bytes() == data
    assert not dst._direct
    assert leftovers(dst.root) == []


def test_start_writeback_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 8192)
    fd = os.open(path, os.O_RDWR)
    try:
        writeback.start_writeback(fd, 0, 8192)
    finally:
        os.close(fd)
    writeback.start_writeback(fd, 0, 8192)  # a closed descriptor: EBADF, ignored
    if sys.platform.startswith("linux"):
        assert writeback._sync_file_range is not None


def test_temporary_names_are_random_without_a_kernel_call_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve random hex digits a name, drawn from the kernel 4 KiB at a time (one call, not 600)."""
    draws: list[int] = []
    real = secrets.token_bytes

    def counting(n: int) -> bytes:
        draws.append(n)
        return real(n)

    monkeypatch.setattr(secrets, "token_bytes", counting)
    place = Root(tmp_path).place("dir/ckpt.bin")
    temps = [TempFile.create(place) for _ in range(600)]
    try:
        suffixes = {t.name.removeprefix(".ckpt.bin.tierd-tmp-") for t in temps}
        assert len(suffixes) == 600
        assert all(len(s) == 12 and int(s, 16) >= 0 for s in suffixes)
        assert len(draws) <= 2
    finally:
        for temp in temps:
            temp.discard()
    assert os.listdir(tmp_path / "dir") == []

"""A big file's chunks are read around the page cache (``O_DIRECT``), exactly, with fallbacks."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.common import drop_from_cache
from tests.conformance.harness import crc
from tierd.config import PosixTier
from tierd.daemon.backends import PosixBackend, copy_object
from tierd.daemon.backends.posix import directread
from tierd.daemon.backends.posix.reader import PosixReader

MIB = 1024 * 1024
#: Three chunks of the test tiers (1 MiB), and a tail that is not a whole number of pages.
SIZE = 3 * MIB + 4097
Preadv = Callable[..., int]


def backend_at(root: Path) -> PosixBackend:
    root.mkdir(parents=True, exist_ok=True)
    tier = PosixTier(name=root.name, kind="posix", path=root, io_mode="direct")
    return PosixBackend(tier, chunk_size=MIB)


def write_cold(path: Path, data: bytes) -> None:
    """``data`` in ``path``, on the disk and out of the page cache."""
    path.write_bytes(data)
    drop_from_cache([path])


def cached(path: Path) -> int:
    """Bytes of ``path`` in the page cache; skips where the kernel cannot say (no ``cachestat``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        found = directread.cached_bytes(fd, 0, path.stat().st_size)
    finally:
        os.close(fd)
    if found is None:
        pytest.skip("the kernel has no cachestat(2) (Linux 6.5 and later) to tell what the page cache holds")
    return found


def is_direct(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


@pytest.fixture
def direct_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(offset, length) of every ``preadv`` through an ``O_DIRECT`` descriptor, passed on."""
    calls: list[tuple[int, int]] = []
    real: Preadv = os.preadv

    def spy(fd: int, buffers: list[memoryview], offset: int, *flags: int) -> int:
        if is_direct(fd):
            calls.append((offset, sum(len(b) for b in buffers)))
        return real(fd, buffers, offset, *flags)

    monkeypatch.setattr(os, "preadv", spy)
    return calls


async def test_big_chunks_are_read_around_the_page_cache_byte_exact(
    tmp_path: Path, direct_reads: list[tuple[int, int]]
) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(SIZE)
    write_cold(src.root / "x.bin", data)
    info = await copy_object(src, "x.bin", dst, "x.bin", crc(data))
    assert (dst.root / "x.bin").read_bytes() == data
    assert info.checksum == crc(data)
    assert sorted(direct_reads) == [(0, MIB), (MIB, MIB), (2 * MIB, MIB)]  # the 4097-byte tail: not direct
    assert cached(src.root / "x.bin") < 64 * 1024  # the tail's pages at most, never the chunks


async def test_a_range_already_in_the_page_cache_is_read_from_there(
    tmp_path: Path, direct_reads: list[tuple[int, int]]
) -> None:
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(SIZE)
    (src.root / "x.bin").write_bytes(data)  # as a training job leaves it: in the page cache
    if cached(src.root / "x.bin") < SIZE - 4096:
        pytest.skip("the page cache dropped the file just written (memory pressure)")
    await copy_object(src, "x.bin", dst, "x.bin", crc(data))
    assert (dst.root / "x.bin").read_bytes() == data
    assert direct_reads == []


async def test_a_read_refused_by_the_file_system_falls_back_to_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some FUSE file systems open ``O_DIRECT`` and then refuse its reads (EINVAL)."""
    refused: list[int] = []
    real: Preadv = os.preadv

    def refusing(fd: int, buffers: list[memoryview], offset: int, *flags: int) -> int:
        if is_direct(fd):
            refused.append(offset)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset, *flags)

    monkeypatch.setattr(os, "preadv", refusing)
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(SIZE)
    write_cold(src.root / "x.bin", data)
    dst.chunks_per_file = 1  # one read at a time: the first refusal is the last
    await copy_object(src, "x.bin", dst, "x.bin", crc(data))
    assert (dst.root / "x.bin").read_bytes() == data
    assert refused == [0]


async def test_a_file_system_refusing_to_open_direct_is_read_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refusing(path: str, flags: int, *args: int, **kw: object) -> int:
        if flags & os.O_DIRECT and str(path).startswith("/proc/self/fd/"):
            raise OSError(errno.EINVAL, "Invalid argument", path)
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)
    src, dst = backend_at(tmp_path / "src"), backend_at(tmp_path / "dst")
    data = os.urandom(SIZE)
    write_cold(src.root / "x.bin", data)
    reader = await src.open_reader("x.bin")
    assert isinstance(reader, PosixReader)
    assert not reader._direct
    await reader.close()
    await copy_object(src, "x.bin", dst, "x.bin", crc(data))
    assert (dst.root / "x.bin").read_bytes() == data


async def test_only_a_file_bigger_than_a_chunk_gets_a_direct_descriptor(tmp_path: Path) -> None:
    src = backend_at(tmp_path / "src")
    (src.root / "one.bin").write_bytes(os.urandom(MIB))
    (src.root / "two.bin").write_bytes(os.urandom(MIB + 1))
    one, two = await src.open_reader("one.bin"), await src.open_reader("two.bin")
    assert isinstance(one, PosixReader)
    assert isinstance(two, PosixReader)
    try:
        assert (one._direct_fd, two._direct_fd >= 0) == (-1, True)
        assert is_direct(two._direct_fd)
        assert os.fstat(two._direct_fd).st_ino == os.fstat(two.fileno()).st_ino
    finally:
        await one.close()
        await two.close()


@pytest.mark.parametrize("offset", [0, 4096, 100])
async def test_reads_at_any_offset_and_into_any_buffer_are_exact(tmp_path: Path, offset: int) -> None:
    """Aligned reads go direct; an unaligned offset, buffer or the file's end go through the cache."""
    src = backend_at(tmp_path / "src")
    data = os.urandom(SIZE)
    write_cold(src.root / "x.bin", data)
    reader = await src.open_reader("x.bin")
    try:
        for shift in (0, 1):  # a page-aligned buffer, then one that is not
            buf = memoryview(mmap.mmap(-1, 4 * MIB + 4096))[shift:]  # page-aligned at 0
            got = await reader.read_into(offset, buf[: 3 * MIB + 4097])
            assert bytes(buf[:got]) == data[offset : offset + got]
            assert got == min(3 * MIB + 4097, SIZE - offset)
    finally:
        await reader.close()

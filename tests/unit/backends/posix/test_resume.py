"""A POSIX write of a big file resumes from the verified prefix a killed write left (``posix.resume``)."""

from __future__ import annotations

import errno
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from awscrt import checksums
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from tests.conformance.harness import CountingReader, crc
from tierd.config import PosixTier
from tierd.daemon import checksum
from tierd.daemon.backends import PosixBackend, WriteRequest, copy_object
from tierd.daemon.backends.posix import copy as posixcopy
from tierd.daemon.backends.posix import resume
from tierd.daemon.backends.posix.backend import is_temp_name
from tierd.daemon.backends.posix.temp import TEMP_MARK, TempFile

MIB = 1024 * 1024
SIZE = 8 * MIB + 5
DATA = os.urandom(SIZE)


@given(data=st.binary(max_size=4096), cut=st.integers(min_value=0, max_value=4096))
@settings(max_examples=200, deadline=None)
def test_the_crcs_of_two_parts_combine_to_the_whole(data: bytes, cut: int) -> None:
    cut = min(cut, len(data))
    first, second = int(checksums.crc64nvme(data[:cut])), int(checksums.crc64nvme(data[cut:]))
    assert checksum.combine(first, second, len(data) - cut) == int(checksums.crc64nvme(data))


def test_the_crcs_of_a_big_files_parts_combine_at_random_cuts() -> None:
    for cut in (0, 1, MIB, 4 * MIB + 17, SIZE - 1, SIZE):
        combined = checksum.combine(crc64(DATA[:cut]), crc64(DATA[cut:]), SIZE - cut)
        assert checksum.encode(combined) == crc(DATA)


def crc64(data: bytes) -> int:
    return int(checksums.crc64nvme(data))


@pytest.fixture
def backend(tmp_path: Path) -> PosixBackend:
    root = tmp_path / "pfs"
    (root / "run").mkdir(parents=True)
    made = PosixBackend(PosixTier(name="pfs", kind="posix", path=root), chunk_size=MIB)
    made.resume_min_size = 4 * MIB
    return made


def killed_write(backend: PosixBackend, pieces: list[tuple[int, bytes]], tag: str = "0123456789ab") -> Path:
    """A temp file of run/x.bin as a killed write leaves it: these (offset, bytes) written, no lock."""
    path = backend.root / "run" / f".x.bin{TEMP_MARK}{tag}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for offset, piece in pieces:
            os.pwrite(fd, piece, offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


async def hop_write(backend: PosixBackend) -> tuple[CountingReader, list[MutableMapping[str, Any]]]:
    """What a hop does: remove leftovers (keeping a big one), then write run/x.bin."""
    reader = CountingReader(DATA)
    with capture_logs() as logs:
        assert await backend.remove_leftovers(["run/x.bin"]) == 0
        await backend.write(WriteRequest("run/x.bin", reader, crc(DATA)))
    assert (backend.root / "run" / "x.bin").read_bytes() == DATA
    assert [n for n in os.listdir(backend.root / "run") if is_temp_name(n)] == []
    return reader, logs


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def test_a_killed_writes_prefix_is_kept_and_only_the_rest_copied(backend: PosixBackend) -> None:
    killed_write(backend, [(0, DATA[: 5 * MIB + 300])])  # 5 chunks and part of the sixth
    reader, logs = await hop_write(backend)
    assert [e["bytes_kept"] for e in events(logs, "copy_resumed")] == [5 * MIB]
    assert reader.bytes_read == SIZE - 5 * MIB


async def test_a_corrupted_prefix_byte_starts_the_copy_over(backend: PosixBackend) -> None:
    bad = bytearray(DATA[: 6 * MIB])
    bad[3 * MIB + 7] ^= 0x01
    killed_write(backend, [(0, bytes(bad))])
    reader, logs = await hop_write(backend)
    assert [e["bytes_kept"] for e in events(logs, "copy_resume_mismatch")] == [6 * MIB]
    assert reader.bytes_read == SIZE + (SIZE - 6 * MIB)  # the rest once, then all of it


async def test_a_hole_in_the_middle_keeps_only_what_is_before_it(backend: PosixBackend) -> None:
    """Chunks go 4 at a time: chunks 0, 1 and 3 done, 2 not yet, when the write was killed."""
    killed_write(backend, [(0, DATA[: 2 * MIB]), (3 * MIB, DATA[3 * MIB : 4 * MIB])])
    reader, logs = await hop_write(backend)
    assert [e["bytes_kept"] for e in events(logs, "copy_resumed")] == [2 * MIB]
    assert reader.bytes_read == SIZE - 2 * MIB


async def test_a_file_under_the_threshold_starts_over_and_loses_the_leftover(backend: PosixBackend) -> None:
    killed_write(backend, [(0, DATA[: 5 * MIB])])
    backend.resume_min_size = 64 * MIB
    reader, logs = await hop_write(backend)
    assert events(logs, "copy_resumed") == []
    assert reader.bytes_read == SIZE


async def test_a_write_from_a_local_file_resumes_in_the_kernel(
    backend: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(posixcopy, "open_direct", lambda temp: -1)
    source = PosixBackend(PosixTier(name="nvme", kind="posix", path=backend.root.parent), chunk_size=MIB)
    (backend.root.parent / "x.bin").write_bytes(DATA)
    killed_write(backend, [(0, DATA[: 3 * MIB])])
    assert await backend.remove_leftovers(["run/x.bin"]) == 0
    with capture_logs() as logs:
        await copy_object(source, "x.bin", backend, "run/x.bin", crc(DATA))
    assert [e["bytes_kept"] for e in events(logs, "copy_resumed")] == [3 * MIB]
    assert (backend.root / "run" / "x.bin").read_bytes() == DATA


def test_kept_prefix_refuses_a_longer_file_and_one_starting_with_a_hole(backend: PosixBackend) -> None:
    longer = killed_write(backend, [(0, DATA + b"more")])
    fd = os.open(longer, os.O_RDONLY)
    try:
        assert resume.kept_prefix(fd, SIZE, MIB) == 0
        assert resume.kept_prefix(fd, SIZE + 4, MIB) == 8 * MIB
    finally:
        os.close(fd)
    os.unlink(longer)
    holed = killed_write(backend, [(MIB, DATA[MIB : 3 * MIB])])
    fd = os.open(holed, os.O_RDONLY)
    try:
        assert resume.kept_prefix(fd, SIZE, MIB) == 0
    finally:
        os.close(fd)


def test_a_temp_file_this_process_writes_is_never_adopted(backend: PosixBackend) -> None:
    live = TempFile.create(backend.tree.place("run/x.bin"))
    try:
        os.pwrite(live.fd, DATA[: 2 * MIB], 0)
        assert TempFile.adopt(live.dir, live.name) is None
        assert resume.open_resumable(live.dir, live.name, SIZE, MIB) is None
        assert live.path.exists()
    finally:
        live.discard()


async def test_a_hop_keeps_the_newest_big_leftover_and_removes_the_others(backend: PosixBackend) -> None:
    older = killed_write(backend, [(0, DATA[: 6 * MIB])])
    os.utime(older, (1_000_000_000, 1_000_000_000))
    newer = killed_write(backend, [(0, DATA[: 3 * MIB])], "ba9876543210")
    with capture_logs() as logs:
        assert await backend.remove_leftovers(["run/x.bin"]) == 1
        assert not older.exists()
        await backend.write(WriteRequest("run/x.bin", CountingReader(DATA), crc(DATA)))
    assert [e["bytes_kept"] for e in events(logs, "copy_resumed")] == [3 * MIB]
    assert (backend.root / "run" / "x.bin").read_bytes() == DATA
    assert not newer.exists()


async def test_no_resume_where_the_file_system_reports_no_holes(
    backend: PosixBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.lseek

    def no_hole_reporting(fd: int, pos: int, whence: int) -> int:
        if whence in (os.SEEK_HOLE, os.SEEK_DATA):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, pos, whence)

    monkeypatch.setattr(os, "lseek", no_hole_reporting)
    killed_write(backend, [(0, DATA[: 5 * MIB])])
    reader, logs = await hop_write(backend)
    assert events(logs, "copy_resumed") == []
    assert reader.bytes_read == SIZE

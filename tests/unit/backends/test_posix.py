"""POSIX specifics the conformance suite cannot see: temp names, pruning, a missing root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conformance.harness import CountingReader, crc
from tierd.config import PosixTier
from tierd.daemon.backends import BytesReader, PosixBackend, make_backend
from tierd.daemon.backends.posix import TEMP_MARK, is_temp_name
from tierd.errors import NotFound, TransientBackendError


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
    await backend.write("run/x.bin", Watching(data), expected_checksum=crc(data))
    assert seen
    assert all(not exists and len(temps) == 1 for exists, temps in seen)
    assert all(TEMP_MARK in temps[0] and temps[0].startswith(".x.bin") for _, temps in seen)
    assert final.read_bytes() == data
    assert temp_files(backend.root) == []


async def test_a_failing_source_leaves_no_temp_file(backend: PosixBackend) -> None:
    data = os.urandom(5 * 1024 * 1024)
    backend.chunk_size = 1024 * 1024
    with pytest.raises(TransientBackendError, match="simulated"):
        await backend.write(
            "f/x.bin", CountingReader(data, fail_at=3 * 1024 * 1024), expected_checksum=crc(data)
        )
    assert temp_files(backend.root) == []
    assert not (backend.root / "f" / "x.bin").exists()


async def test_delete_prunes_emptied_directories_but_never_the_root(backend: PosixBackend) -> None:
    for name in ("run/step1/a.bin", "run/step1/sub/b.bin", "run/step2/c.bin"):
        await backend.write(name, BytesReader(b"x"), expected_checksum=crc(b"x"))
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
        await backend.write("x.bin", BytesReader(b"x"), expected_checksum=crc(b"x"))
    with pytest.raises(TransientBackendError, match="not mounted"):
        [info async for info in backend.list()]
    with pytest.raises(NotFound):
        await backend.stat("x.bin")
    assert not (tmp_path / "unmounted").exists()


async def test_list_skips_temp_files_symlinks_and_stat_refuses_directories(backend: PosixBackend) -> None:
    await backend.write("d/real.bin", BytesReader(b"abc"), expected_checksum=crc(b"abc"))
    (backend.root / "d" / f".real.bin{TEMP_MARK}0123").write_bytes(b"partial")
    (backend.root / "d" / "link.bin").symlink_to(backend.root / "d" / "real.bin")
    assert [i.relpath async for i in backend.list()] == ["d/real.bin"]
    with pytest.raises(NotFound):
        await backend.stat("d")
    with pytest.raises(NotFound):
        await backend.open_reader("d")


async def test_long_names_still_get_a_temp_name(backend: PosixBackend) -> None:
    name = "n" * 250
    await backend.write(f"long/{name}", BytesReader(b"abc"), expected_checksum=crc(b"abc"))
    assert (backend.root / "long" / name).read_bytes() == b"abc"


def test_location_is_the_path(backend: PosixBackend) -> None:
    assert backend.location("a/b.bin") == str(backend.root / "a" / "b.bin")
    assert not backend.features.native_checksum
    assert not backend.features.multipart

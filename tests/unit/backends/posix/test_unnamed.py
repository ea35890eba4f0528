"""Small files staged with no name (O_TMPFILE), linked under their final names at the commit."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.conformance.harness import crc
from tests.unit.backends.posix.test_batch import backend_at, stage_files, temps, visible
from tierd.daemon.backends import BytesReader, WriteRequest
from tierd.daemon.backends.base import SmallFile
from tierd.daemon.backends.posix import unnamed
from tierd.daemon.beneath import Dir


def entries(root: Path) -> set[str]:
    """Every name under ``root``, directories left out."""
    return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}


async def test_staged_files_have_no_name_until_their_commit(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    before = unnamed.open_count()
    files = await stage_files(batch, 10)
    assert entries(backend.root) == set()  # not even a temporary name
    assert unnamed.open_count() == before + 10
    assert sorted(await batch.commit()) == sorted(files)
    assert entries(backend.root) == set(files)
    assert all((backend.root / name).read_bytes() == data for name, data in files.items())
    assert all((backend.root / name).stat().st_mode & 0o777 == 0o644 & ~_umask() for name in files)
    assert unnamed.open_count() == before


async def test_a_discarded_batch_leaves_nothing_open(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    before = unnamed.open_count()
    small = {f"step/f{n}.bin": os.urandom(100) for n in range(4)}
    await batch.write_whole([SmallFile(name, data, crc(data)) for name, data in small.items()])
    assert unnamed.open_count() == before + 4
    await batch.discard()
    assert unnamed.open_count() == before
    assert entries(backend.root) == set()


async def test_a_commit_replaces_a_file_already_there(tmp_path: Path) -> None:
    backend = backend_at(tmp_path / "pfs")
    (backend.root / "step").mkdir()
    (backend.root / "step" / "f.bin").write_bytes(b"an older, wrong copy")
    batch = backend.batch()
    await batch.write(WriteRequest("step/f.bin", BytesReader(b"right"), crc(b"right")))
    assert (backend.root / "step" / "f.bin").read_bytes() == b"an older, wrong copy"
    assert await batch.commit() == ["step/f.bin"]
    assert (backend.root / "step" / "f.bin").read_bytes() == b"right"
    assert entries(backend.root) == {"step/f.bin"}


async def test_without_o_tmpfile_files_are_staged_under_temporary_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(directory: object) -> int:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(unnamed, "_open_unnamed", refused)
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 5)
    assert len(temps(backend.root)) == 5
    assert visible(backend.root) == set()
    await batch.commit()
    assert entries(backend.root) == set(files)


async def test_past_the_open_files_bound_files_are_staged_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unnamed, "MAX_OPEN", unnamed.open_count() + 2)
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 5)
    assert len(temps(backend.root)) == 3
    await batch.commit()
    assert entries(backend.root) == set(files)


async def test_linked_through_proc_where_an_empty_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before Linux 6.10 only a privileged caller may ``linkat`` with ``AT_EMPTY_PATH``."""
    real_link = unnamed._link
    methods: list[str] = []

    def link(fd: int, directory: Dir, name: str, method: str) -> None:
        methods.append(method)
        if method == "empty":
            raise OSError(errno.ENOENT, "No such file or directory")
        real_link(fd, directory, name, method)

    monkeypatch.setattr(unnamed, "_link", link)
    backend = backend_at(tmp_path / "pfs")
    batch = backend.batch()
    files = await stage_files(batch, 3)
    assert temps(backend.root) == []
    await batch.commit()
    assert entries(backend.root) == set(files)
    assert methods == ["empty", "proc", "proc", "proc", "proc"]  # the probe's two tries, then each file


def _umask() -> int:
    from tierd.daemon.beneath import umask

    return umask()

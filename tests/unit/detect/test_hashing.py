"""First sight's read buffers: big files read through mappings of the call, none left once it ends."""

from __future__ import annotations

import mmap
import os
import weakref
from pathlib import Path

import pytest

from tierd.daemon import checksum
from tierd.daemon.backends.budget import map_aligned
from tierd.daemon.detect import hashing
from tierd.daemon.detect.detector import FileStat
from tierd.daemon.detect.hashing import hash_stable

MIB = 1024 * 1024


def _file(tier0: Path, name: str, size: int) -> FileStat:
    path = tier0 / "demo" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    st = path.stat()
    return FileStat(path, st.st_size, st.st_mtime_ns)


async def test_big_files_read_through_the_calls_mappings_and_none_outlives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heap buffer outlived its hash in an I/O thread's malloc arena (8 MiB per recording, for good)."""
    made: list[weakref.ref[mmap.mmap]] = []

    def mapped(nbytes: int) -> mmap.mmap:
        block = map_aligned(nbytes)
        made.append(weakref.ref(block))
        return block

    monkeypatch.setattr(hashing, "map_aligned", mapped)
    sizes = [9 * MIB + 3, 20 * MIB, 2 * MIB, 9 * MIB, 1000]  # past a block, blocks, one, small
    files = tuple(_file(tmp_path, f"f{i}", size) for i, size in enumerate(sizes))
    hashed = await hash_stable(files, tmp_path)
    assert [(h.relpath, h.size) for h in hashed] == [(f"demo/f{i}", s) for i, s in enumerate(sizes)]
    for h, f in zip(hashed, files, strict=True):
        assert h.checksum == checksum.hash_file(f.path)[1]
    assert 1 <= len(made) <= 4, "a mapping per big file at most (reused by the next when free)"
    assert all(ref() is None for ref in made), "a mapping outlived the call"

    made.clear()
    await hash_stable(files[-1:], tmp_path)
    assert made == [], "a small file read through a mapping"

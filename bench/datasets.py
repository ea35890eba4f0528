"""The checkpoints the benchmarks copy: written once under ``<tier0>/job/step_1``, hashed as
detection hashes them (``detect.hashing.hash_stable``), so every side starts from the same
files and the same first-sight checksums.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierd.daemon.beneath import Root
from tierd.daemon.detect.hashing import HashedFile, hash_stable
from tierd.daemon.detect.record import Detection
from tierd.daemon.detect.tree import stat_file

__all__ = ["RUN_NAME", "STEP_DIR", "Dataset", "make_big", "make_small"]

MIB = 1024 * 1024
RUN_NAME = "bench"
STEP_DIR = "job/step_1"
WRITE_BLOCK = 16 * MIB


@dataclass(frozen=True)
class Dataset:
    """A checkpoint under ``<tier0>/job/step_1`` and the checksums detection recorded for it."""

    kind: str
    tier0: Path
    files: tuple[HashedFile, ...]
    layout: str

    @property
    def source(self) -> Path:
        """The checkpoint directory."""
        return self.tier0 / STEP_DIR

    @property
    def paths(self) -> list[Path]:
        """Every file of the checkpoint."""
        return [self.tier0 / f.relpath for f in self.files]

    @property
    def total_bytes(self) -> int:
        """Bytes of every file."""
        return sum(f.size for f in self.files)

    def detection(self) -> Detection:
        """The record detection would write for this checkpoint."""
        return Detection(RUN_NAME, 1, "dcp", STEP_DIR, self.files, "bench", "detected", "bench checkpoint")

    def record_spec(self) -> dict[str, Any]:
        """The detection as plain data, for a catalog recorded by another tree's tierd (``bench.sides``)."""
        det = self.detection()
        fields = ("run", "step", "format", "relpath", "actor", "action", "reason")
        return {
            "detection": {name: getattr(det, name) for name in fields},
            "files": [dataclasses.asdict(f) for f in self.files],
        }

    def describe(self) -> dict[str, Any]:
        """The dataset's fields for a result line."""
        return {"files": len(self.files), "bytes": self.total_bytes, "layout": self.layout}


def _write_file(path: Path, size: int, pool: bytes, rng: random.Random) -> None:
    """``size`` bytes cut from ``pool`` at random offsets (distinct per block), fsynced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < size:
            length = min(WRITE_BLOCK, size - written)
            start = rng.randrange(0, len(pool) - length + 1)
            written += os.write(fd, pool[start : start + length])
        os.fsync(fd)
    finally:
        os.close(fd)


def _hash(tier0: Path, paths: Sequence[Path]) -> tuple[HashedFile, ...]:
    """The first-sight checksums, taken the way detection takes them."""
    root = Root(tier0)
    stats = tuple(s for p in paths if (s := stat_file(p, root)) is not None)
    if len(stats) != len(paths):
        missing = sorted(str(p) for p in paths if stat_file(p, root) is None)
        raise RuntimeError(f"files vanished right after they were written: {missing}")
    return asyncio.run(hash_stable(stats, tier0))


def make_big(tier0: Path, total_bytes: int, shards: int) -> Dataset:
    """A DCP-like checkpoint: ``shards`` equal ``__<rank>_0.distcp`` files and a ``.metadata``."""
    tier0 = tier0.resolve()
    rng = random.Random(1)
    pool = os.urandom(2 * WRITE_BLOCK)
    shard = max(1, total_bytes // shards)
    step = tier0 / STEP_DIR
    paths = [step / f"__{rank}_0.distcp" for rank in range(shards)]
    for path in paths:
        _write_file(path, shard, pool, rng)
    metadata = step / ".metadata"  # written last: the completion marker
    _write_file(metadata, 256 * 1024, pool, rng)
    layout = f"{shards} x {shard / 2**30:.3g} GiB shards + 256 KiB .metadata"
    return Dataset("big", tier0, _hash(tier0, [*paths, metadata]), layout)


def make_small(tier0: Path, count: int, subdirs: int = 8) -> Dataset:
    """``count`` files of 4-64 KiB in ``subdirs`` subdirectories, and a ``.metadata`` last."""
    tier0 = tier0.resolve()
    rng = random.Random(2)
    pool = os.urandom(4 * MIB)
    step = tier0 / STEP_DIR
    paths = []
    for i in range(count):
        path = step / f"rank{i % subdirs}" / f"part_{i:05d}.bin"
        _write_file(path, rng.randrange(4, 65) * 1024, pool, rng)
        paths.append(path)
    metadata = step / ".metadata"
    _write_file(metadata, 64 * 1024, pool, rng)
    layout = f"{count} files of 4-64 KiB in {subdirs} subdirectories + 64 KiB .metadata"
    return Dataset("small", tier0, _hash(tier0, [*paths, metadata]), layout)

"""Resuming a half-copied big file into a POSIX tier against copying it over from scratch.

One file of ``TIERD_BENCH_RESUME_MIB`` (1024; 128 quick) MiB of random bytes on a POSIX
tier ``nvme`` is copied into another, ``pfs``, both directories on this machine's disk
(``$TIERD_BENCH_DIR``), in-process through the daemon's own ``PosixBackend`` at its
defaults (8 MiB chunks, 4 in flight, ``O_DIRECT``), the way a hop does it:
``remove_leftovers`` then ``copy_object`` (the final fsync included).

- tierd's side (``resume``): ``pfs`` first holds the temporary file a killed write left
  with the first ``TIERD_BENCH_RESUME_PERCENT`` (50) percent of the file, in whole chunks,
  and no lock; the write keeps it (re-hashes it, checks the combined CRC) and copies only
  the rest. Each run checks the log said ``copy_resumed`` with those bytes kept.
- the baseline (``from scratch``): the same copy with no temporary file left.

Before each run of either side: ``sync``, and the source and any temporary file are
evicted from the page cache, so the prefix is re-read from the disk. Sides alternate over
``TIERD_BENCH_RESUME_ROUNDS`` (3; 1 quick) rounds; the medians are reported. The backend's
size threshold (``resume_min_size``) is lowered to one chunk, so smaller files can be measured.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from structlog.testing import capture_logs

from bench.common import bench_root, drop_from_cache, emit, env_int, filesystem_type, note, quick
from bench.harness import sync, tierd_source
from tierd.config import PosixTier
from tierd.daemon import checksum
from tierd.daemon.backends import PosixBackend, copy_object
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.posix.backend import CHUNK_SIZE
from tierd.daemon.backends.posix.temp import TEMP_MARK

RELPATH = "job/step_1/shard0.distcp"


def _make_source(path: Path, size: int) -> str:
    """``size`` random bytes at ``path``; returns their CRC64NVME."""
    path.parent.mkdir(parents=True, exist_ok=True)
    crc = checksum.Crc64()
    with path.open("wb") as out:
        for offset in range(0, size, CHUNK_SIZE):
            piece = os.urandom(min(CHUNK_SIZE, size - offset))
            crc.update(piece)
            out.write(piece)
    return crc.hexdigest()


def _leave_killed_write(source: Path, final: Path, length: int) -> Path:
    """The temporary file a write killed after ``length`` bytes leaves beside ``final`` (durable)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.parent / f".{final.name}{TEMP_MARK}0123456789ab"
    with source.open("rb") as src, temp.open("wb") as out:
        while length > 0:
            piece = src.read(min(CHUNK_SIZE, length))
            out.write(piece)
            length -= len(piece)
        out.flush()
        os.fsync(out.fileno())
    return temp


async def _copy(root: Path, expected: str) -> tuple[float, int]:
    """One hop's write of the file; (seconds, bytes kept by a resume)."""
    src = PosixBackend(PosixTier(name="nvme", kind="posix", path=root / "nvme"))
    dst = PosixBackend(PosixTier(name="pfs", kind="posix", path=root / "pfs"))
    dst.resume_min_size = min(dst.resume_min_size, CHUNK_SIZE + 1)
    with capture_logs() as logs:
        started = time.perf_counter()
        await dst.remove_leftovers([RELPATH])
        await copy_object(src, RELPATH, dst, RELPATH, expected)
        elapsed = time.perf_counter() - started
    kept = [int(e["bytes_kept"]) for e in logs if e["event"] == "copy_resumed"]
    return elapsed, sum(kept)


def _run(root: Path, expected: str, prefix: int) -> float:
    """One run: leave a killed write of ``prefix`` bytes (if any), evict caches, copy, clean up."""
    source, final = root / "nvme" / RELPATH, root / "pfs" / RELPATH
    temps = [_leave_killed_write(source, final, prefix)] if prefix else []
    sync()
    drop_from_cache([source, *temps])
    seconds, kept = asyncio.run(_copy(root, expected))
    if kept != prefix:
        raise RuntimeError(f"kept {kept} bytes of a {prefix}-byte prefix")
    shutil.rmtree(root / "pfs" / "job")
    return seconds


def main() -> None:
    size = env_int("TIERD_BENCH_RESUME_MIB", 128 if quick() else 1024) * MIB
    percent = env_int("TIERD_BENCH_RESUME_PERCENT", 50)
    rounds = env_int("TIERD_BENCH_RESUME_ROUNDS", 1 if quick() else 3)
    prefix = size * percent // 100 // CHUNK_SIZE * CHUNK_SIZE
    root = Path(tempfile.mkdtemp(prefix="resume-", dir=bench_root()))
    try:
        (root / "pfs").mkdir()
        expected = _make_source(root / "nvme" / RELPATH, size)
        note(f"resume: a {size // MIB} MiB file, {prefix // MIB} MiB kept, on {filesystem_type(root)}")
        resumed: list[float] = []
        scratch: list[float] = []
        load_before = os.getloadavg()[0]
        for n in range(rounds):
            resumed.append(_run(root, expected, prefix))
            scratch.append(_run(root, expected, 0))
            note(f"round {n + 1}: resume {resumed[-1]:.2f} s, from scratch {scratch[-1]:.2f} s")
        emit(
            f"copy_resume_{size // MIB}MiB_{percent}pct",
            statistics.median(resumed),
            "the same PosixBackend write from scratch (no temporary file left)",
            statistics.median(scratch),
            bytes=size,
            bytes_kept=prefix,
            rounds=rounds,
            tierd_runs=[round(s, 4) for s in resumed],
            baseline_runs=[round(s, 4) for s in scratch],
            page_cache="source and temporary file evicted before each run",
            filesystem=filesystem_type(root),
            loadavg_1m_before_after=[round(load_before, 2), round(os.getloadavg()[0], 2)],
            tierd_source=tierd_source(),
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

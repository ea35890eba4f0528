"""Detection latency and checksum throughput.

``detect_latency``: a running DetectService (watchdog + SQLite catalog) watches a root; for
each of 200 steps the "job" writes a DCP-shaped step (three shards and ``.metadata.tmp``)
and renames ``.metadata.tmp`` to ``.metadata``. Latency is from that rename to the commit
of the catalog transaction (the service wakes the pipeline right after it commits).
Compared with the goal: p99 under 100 ms.

``detect_checksum_cold`` / ``_warm``: hashing 1 GiB in four files the way detection does
(CRC64-NVME, files in parallel on the I/O pool) against plain ``os.read`` loops over the
same files with the same parallelism. Cold: each run starts after
``posix_fadvise(DONTNEED)`` evicted the files from the page cache. Warm: both read from it.
tierd's side hashes the files once, untimed, before the timed run (then evicts them for a
cold run): a running daemon's I/O threads have hashed before.

tierd's side of each runs in a fresh child process (``spawn``), so ``peak_rss_bytes`` is
that of detection alone: not of this process, which imports torch to build the DCP step.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from bench.common import drop_from_cache, emit, percentile, vm_hwm_bytes
from tierd.config import Config
from tierd.daemon.beneath import Root
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.context import Context
from tierd.daemon.detect.hashing import hash_stable
from tierd.daemon.detect.service import DetectService
from tierd.daemon.detect.tree import stat_file
from tierd.logs import configure_logging

STEPS = 200
SHARD_BYTES = 256 * 1024
HASH_FILES = 4
HASH_FILE_BYTES = 256 * 1024 * 1024
READ_BLOCK = 8 * 1024 * 1024
ROUNDS = 3

T = TypeVar("T")


def _measured(fn: Callable[..., T], *args: Any) -> tuple[T, int]:
    """In the child: ``fn(*args)`` and the child's peak RSS.

    ``VmHWM``, not ``ru_maxrss``: Linux carries the latter over from the parent across exec.
    """
    configure_logging("warning", "json")
    result = fn(*args)
    peak = vm_hwm_bytes()
    assert peak is not None
    return result, peak


def in_child(fn: Callable[..., T], *args: Any) -> tuple[T, int]:
    """``fn(*args)`` in a fresh interpreter, with that interpreter's peak RSS."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measured, fn, *args).result()


def _config(base: Path) -> Config:
    tiers = [{"name": n, "kind": "posix", "path": str(base / n)} for n in ("nvme", "pfs", "object")]
    catalog_dir = Path(os.environ.get("TIERD_BENCH_CATALOG_DIR") or base)
    return Config(
        catalog={"url": f"sqlite:///{catalog_dir / f'catalog-{os.getpid()}.db'}"},
        watch=[{"path": str(base / "nvme" / "job"), "run": "bench", "format": "dcp"}],
        tiers=tiers,
    )


def _template(base: Path) -> dict[str, bytes]:
    """A real single-rank DCP step (``.metadata`` naming three shards), as bytes."""
    import pickle

    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, MetadataIndex

    shards = {f"__{r}_0.distcp": os.urandom(SHARD_BYTES) for r in range(3)}
    storage = {MetadataIndex(f"item{r}"): _StorageInfo(name, 0, SHARD_BYTES) for r, name in enumerate(shards)}
    metadata = Metadata(state_dict_metadata={f"item{r}": BytesStorageMetadata() for r in range(3)})
    metadata.storage_data = storage
    return {**shards, ".metadata.tmp": pickle.dumps(metadata)}


def _write_step(root: Path, step: int, files: dict[str, bytes]) -> Path:
    directory = root / f"step_{step}"
    directory.mkdir(parents=True)
    for name, data in files.items():
        with open(directory / name, "wb") as f:
            f.write(data)
    return directory


def _latency(base: Path, files: dict[str, bytes]) -> list[float]:
    return asyncio.run(_detect_steps(base, files))


async def _detect_steps(base: Path, files: dict[str, bytes]) -> list[float]:
    config = _config(base)
    db = Database(config.catalog.url)
    upgrade(db)
    ctx = Context(config=config, db=db)
    service = DetectService(ctx)
    await service.start()
    await service.reconciled.wait()
    root = config.watch[0].path
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    try:
        for step in range(1, STEPS + 1):
            directory = await loop.run_in_executor(None, _write_step, root, step, files)
            ctx.pipeline_wakeup.clear()
            os.rename(directory / ".metadata.tmp", directory / ".metadata")
            started = time.perf_counter()
            await asyncio.wait_for(ctx.pipeline_wakeup.wait(), 10)
            latencies.append(time.perf_counter() - started)
    finally:
        await service.stop(5)
        db.dispose()
    return latencies


def _plain_read(path: Path) -> int:
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while chunk := os.read(fd, READ_BLOCK):
            total += len(chunk)
    finally:
        os.close(fd)
    return total


def _hash_files(paths: list[Path], base: Path, cold: bool) -> float:
    """Seconds to hash ``paths`` as detection does, in a process that has hashed before."""
    return asyncio.run(_timed_hash(paths, base, cold))


async def _timed_hash(paths: list[Path], base: Path, cold: bool) -> float:
    stats = tuple(s for p in paths if (s := stat_file(p, Root(base))) is not None)
    await hash_stable(stats, base)  # as in a running daemon: threads and their heaps in use
    if cold:
        drop_from_cache(paths)
    started = time.perf_counter()
    await hash_stable(stats, base)
    return time.perf_counter() - started


def _read_files(paths: list[Path]) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        list(pool.map(_plain_read, paths))
    return time.perf_counter() - started


def _throughput(base: Path) -> None:
    data_dir = base / "hash"
    data_dir.mkdir()
    paths = []
    block = os.urandom(16 * 1024 * 1024)
    for i in range(HASH_FILES):
        path = data_dir / f"shard{i}.bin"
        with open(path, "wb") as f:
            for _ in range(HASH_FILE_BYTES // len(block)):
                f.write(block)
        paths.append(path)
    total = HASH_FILES * HASH_FILE_BYTES
    peaks: list[int] = []

    def tierd_side() -> float:
        seconds, peak = in_child(_hash_files, paths, base, mode == "cold")
        peaks.append(peak)
        return seconds

    def baseline_side() -> float:
        return _read_files(paths)

    measure: dict[str, Callable[[], float]] = {"tierd": tierd_side, "baseline": baseline_side}
    for mode in ("cold", "warm"):
        times: dict[str, list[float]] = {"tierd": [], "baseline": []}
        peaks.clear()
        for round_ in range(ROUNDS):
            order = ["tierd", "baseline"] if round_ % 2 == 0 else ["baseline", "tierd"]
            for name in order:
                if mode == "cold":
                    drop_from_cache(paths)
                else:
                    _read_files(paths)
                times[name].append(measure[name]())
        tierd, baseline = statistics.median(times["tierd"]), statistics.median(times["baseline"])
        emit(
            f"detect_checksum_{mode}",
            tierd,
            f"parallel os.read of the same {HASH_FILES} files, {len(paths)} threads ({mode} page cache)",
            baseline,
            peak_rss=max(peaks),
            peak_rss_of="a child process hashing the files as detection does",
            bytes=total,
            rounds=ROUNDS,
            statistic="median",
            tierd_gib_per_s=round(total / tierd / 2**30, 3),
            baseline_gib_per_s=round(total / baseline / 2**30, 3),
        )


def main() -> None:
    """Run both benchmarks in a scratch directory and print their JSON lines."""
    configure_logging("warning", "json")
    base = Path(tempfile.mkdtemp(prefix="tierd-bench-detect-", dir=os.environ.get("TIERD_BENCH_DIR")))
    try:
        latencies, peak = in_child(_latency, base, _template(base))
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        emit(
            "detect_latency",
            p99,
            "goal: p99 from marker rename to committed row under 100 ms",
            0.1,
            peak_rss=peak,
            peak_rss_of="a child process running DetectService on a SQLite catalog",
            steps=len(latencies),
            files_per_step=4,
            p50_seconds=round(p50, 6),
            p99_seconds=round(p99, 6),
            max_seconds=round(max(latencies), 6),
        )
        _throughput(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

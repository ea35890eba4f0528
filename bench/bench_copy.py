"""The NVMe -> parallel-FS hop against ``cp -r`` followed by ``sync``.

Both tiers are POSIX directories on this machine's disk (``$TIERD_BENCH_DIR``, default
``<repo>/var/bench``). Two checkpoints: ``copy_hop_big`` (4 x 1 GiB DCP shards and a
``.metadata``) and ``copy_hop_small`` (5,000 files of 4-64 KiB in 8 subdirectories).

tierd's side is the real daemon (``python -m tierd run``, tiers ``nvme`` -> ``pfs``, both
at their defaults; the results' ``tierd_path`` gives them) with the checkpoint recorded in
a fresh catalog beforehand, timed from its ``hop_started`` to its ``replica_verified`` log
line; every byte is hashed against the first-sight CRC64NVME and made durable (an fsync
per big file, one ``syncfs`` per batch of small files, an fsync per directory) before the
replica is ``verified``. The baseline is ``cp -r`` of the same directory then
``sync`` (timed together). With ``--against REV`` REV's daemon runs the same hop in every
round too (``bench.sides``). Before each run of either side: ``sync``, then the source is
evicted from the page cache (``TIERD_BENCH_CACHE=warm`` reads it in instead); the
destination is removed after each run. The sides run in turn, the order rotated each
round; the medians are reported.
Goals: tierd at most cp+sync's time (issue 25), the daemon's peak RSS (VmHWM) under 150 MB.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common import bench_root, emit, note
from bench.datasets import STEP_DIR, Dataset, make_big, make_small
from bench.harness import Settings, Timed, Trash, prepare_cache, sync, timed
from bench.hop import HopResult, run_hop
from bench.results import RSS_GOAL, Runs, interleaved
from bench.sides import Side
from tierd.config import PosixTier
from tierd.daemon.backends.budget import MIB
from tierd.daemon.backends.posix import batch as posixbatch
from tierd.daemon.backends.posix.writes import CHUNKS_PER_FILE
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.transfer import copyset

#: ``python -m bench --against REV`` runs REV's daemon beside this tree's, every round.
AGAINST = True
TIME_GOAL = 1.0
ROUNDS = 3  # the big checkpoint: ~25 s a side
SMALL_ROUNDS = 5  # the small one: a few seconds a side, and noisier


def _tiers(base: Path) -> list[dict[str, Any]]:
    return [
        {"name": "nvme", "kind": "posix", "path": str(base / "nvme")},
        {"name": "pfs", "kind": "posix", "path": str(base / "pfs")},
    ]


def _tierd_run(
    base: Path, dataset: Dataset, settings: Settings, side: Side, label: str, trash: Trash
) -> HopResult:
    """One hop by ``side``'s daemon; checks the destination holds every file, then discards it."""
    hop = run_hop(base / "daemon" / label, dataset, _tiers(base), side=side, profile=settings.profile(label))
    copied = sum(p.is_file() for p in (base / "pfs" / STEP_DIR).rglob("*"))
    if copied != len(dataset.files):
        raise RuntimeError(f"{label}: the destination holds {copied} files, not {len(dataset.files)}")
    trash.discard(base / "pfs" / "job")
    trash.discard(base / "daemon" / label)
    return hop


def _baseline_run(base: Path, dataset: Dataset, trash: Trash) -> Timed:
    """``cp -r`` then ``sync``; discards the copy afterwards."""
    target = base / "cp" / "job"
    target.mkdir(parents=True)
    run = timed(["sh", "-c", 'cp -r "$0" "$1" && sync', str(dataset.source), str(target / "step_1")])
    trash.discard(base / "cp")
    return run


def _diskstats(path: Path) -> tuple[int, ...]:
    """The counters of the block device holding ``path`` (``/proc/diskstats``; zeros if absent).

    (reads, sectors read, writes, sectors written, ms busy, flushes). Every process's I/O on
    that device counts (other benchmarks, other agents' tests), and a tierd run's includes
    its daemon starting and stopping: read them beside the load, side by side per round.
    """
    dev = os.stat(path).st_dev
    key = (os.major(dev), os.minor(dev))
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if (int(f[0]), int(f[1])) == key:
            flushes = int(f[17]) if len(f) > 17 else 0
            return int(f[3]), int(f[5]), int(f[7]), int(f[9]), int(f[12]), flushes
    return (0,) * 6


def _disk_note(before: tuple[int, ...], after: tuple[int, ...]) -> str:
    """What the device did during one run: requests, their mean size, busy time."""
    reads, rsect, writes, wsect, busy, flushes = (a - b for a, b in zip(after, before, strict=True))
    read_kib, write_kib = rsect / 2 / max(reads, 1), wsect / 2 / max(writes, 1)  # sectors of 512 bytes
    return (
        f"disk: {reads} reads of {read_kib:.0f} KiB, {writes} writes of {write_kib:.0f} KiB "
        f"({wsect * 512 / 2**30:.2f} GiB), {flushes} flushes, busy {busy} ms"
    )


def _bench(base: Path, dataset: Dataset, settings: Settings, trash: Trash) -> None:
    runs = Runs(TIME_GOAL, RSS_GOAL, settings.against)
    runner: list[float] = []
    sides = {side.name: side for side in settings.sides}
    for round_, name in interleaved(runs.contestants, settings.rounds):
        sync()
        prepare_cache(dataset.paths, settings.cache)
        disk = _diskstats(base)
        if name == "baseline":
            run = _baseline_run(base, dataset, trash)
            runs.add_baseline(run)
            disk_note = _disk_note(disk, _diskstats(base))
            note(f"copy {dataset.kind} round {round_}: cp+sync {run.seconds:.2f}s, {disk_note}")
            continue
        hop = _tierd_run(base, dataset, settings, sides[name], f"{name}-{dataset.kind}-{round_}", trash)
        note(f"copy {dataset.kind} round {round_}: {name} {_disk_note(disk, _diskstats(base))}")
        if name == "tierd":
            runs.add_tierd(hop.seconds, hop.cpu, hop.peak_rss_bytes)
            runner.append(hop.runner_seconds)
        else:
            runs.add_against(hop.seconds, hop.cpu, hop.peak_rss_bytes)
        cpu = f", CPU {hop.cpu.total:.2f}s" if hop.cpu else ""
        note(f"copy {dataset.kind} round {round_}: {name} {hop.seconds:.2f}s{cpu} ({sides[name].source})")
    t, b = runs.medians
    emit(
        f"copy_hop_{dataset.kind}",
        t,
        "cp -r SRC DST && sync (coreutils), same source directory and file system",
        b,
        peak_rss=max(runs.peaks),
        **runs.summary(dataset, settings, base),
        tierd_path=_tierd_path(),
        tierd_timing="daemon log hop_started -> replica_verified (replica state committed)",
        tierd_runner_seconds=round(statistics.median(runner), 6),
        checksums="tierd: CRC64NVME of every byte vs first sight, durable before verified; cp: none",
    )


def _tierd_path() -> str:
    """The hop as the bench configures it: every tier setting at its default."""
    pfs = PosixTier(name="pfs", kind="posix", path=Path("/"))
    budget = PipelineOptions().memory_budget // MIB
    return (
        f"python -m tierd run: PipelineService hop nvme -> pfs (posix, concurrency {pfs.concurrency} files "
        f"x {CHUNKS_PER_FILE} chunks, verify {pfs.verify}, {budget} MiB buffer budget; big files in "
        "reused aligned huge-page buffers, read by O_DIRECT unless the page cache holds them; "
        f"written by io_mode {pfs.io_mode} (O_DIRECT or the page cache, measured "
        "at the first big write; copy_file_range where the tier refuses O_DIRECT), "
        f"files up to {copyset.GROUP_FILE_LIMIT // MIB} MiB in groups of up to {copyset.GROUP_FILES} files "
        f"(read in one trip, staged in one trip; between local file systems {copyset.LOCAL_GROUP_LANES} "
        f"group of up to {copyset.LOCAL_GROUP_FILES} files at a time, opening its files and announcing "
        "them with POSIX_FADV_WILLNEED before reading the first), "
        f"small files committed in batches of up to {posixbatch.MAX_FILES})"
    )


def main() -> None:
    """Make both checkpoints in a scratch directory, run both comparisons, clean up."""
    settings = Settings.from_env(ROUNDS)
    base = Path(tempfile.mkdtemp(prefix="copy-", dir=bench_root()))
    try:
        for kind in settings.kinds:
            tier0 = base / "nvme"
            if kind == "big":
                dataset = make_big(tier0, settings.big_bytes, settings.big_shards)
                rounds = settings.rounds
            else:
                dataset = make_small(tier0, settings.small_files)
                rounds = settings.small_rounds("TIERD_BENCH_COPY_SMALL_ROUNDS", SMALL_ROUNDS)
            (base / "pfs").mkdir(exist_ok=True)
            trash = Trash(base / "trash", keep=kind == "small")
            _bench(base, dataset, replace(settings, rounds=rounds), trash)
            trash.empty()
            shutil.rmtree(tier0)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

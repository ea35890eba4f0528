"""What the benchmarks share: their settings, page-cache control and timed baseline commands.

The checkpoints are made by ``bench.datasets``, the daemon runs a hop in ``bench.hop``,
results are gathered by ``bench.results``, the other tree of ``--against`` comes from
``bench.sides``, and ``rclone serve s3`` from ``bench.s3endpoint``.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import drop_from_cache, env_float, env_int, quick, vm_hwm_bytes
from bench.hop import PROFILERS, Profile
from bench.results import Cpu
from bench.sides import Side, against_from_env, this_tree

__all__ = [
    "Settings",
    "Timed",
    "Trash",
    "prepare_cache",
    "sync",
    "tierd_source",
    "timed",
]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """Sizes and rounds, from ``TIERD_BENCH_*`` (``TIERD_BENCH_QUICK=1``: a smoke run)."""

    big_bytes: int
    big_shards: int
    small_files: int
    rounds: int
    cache: str
    profile_dir: Path | None
    kinds: tuple[str, ...] = ("big", "small")
    profiler: str = "cprofile"
    against: Side | None = None

    @classmethod
    def from_env(cls, rounds: int) -> Settings:
        """The settings for a benchmark whose full run takes ``rounds`` rounds per side."""
        small = quick()
        cache = os.environ.get("TIERD_BENCH_CACHE", "cold")
        if cache not in ("cold", "warm"):
            raise ValueError(f"TIERD_BENCH_CACHE must be cold or warm, not {cache!r}")
        profile = os.environ.get("TIERD_BENCH_PROFILE_DIR")
        profiler = os.environ.get("TIERD_BENCH_PROFILER", "cprofile")
        if profiler not in PROFILERS:
            raise ValueError(f"TIERD_BENCH_PROFILER must be one of {', '.join(PROFILERS)}, not {profiler!r}")
        return cls(
            big_bytes=int(env_float("TIERD_BENCH_BIG_GIB", 0.25 if small else 4.0) * 2**30),
            big_shards=env_int("TIERD_BENCH_BIG_SHARDS", 4),
            small_files=env_int("TIERD_BENCH_SMALL_FILES", 500 if small else 5000),
            rounds=env_int("TIERD_BENCH_ROUNDS", 1 if small else rounds),
            cache=cache,
            profile_dir=Path(profile).resolve() if profile else None,
            kinds=_kinds(os.environ.get("TIERD_BENCH_KINDS", "big,small")),
            profiler=profiler,
            against=against_from_env(),
        )

    @property
    def sides(self) -> list[Side]:
        """The tierd trees measured: this one, and the ``against`` tree when there is one."""
        return [this_tree(), *([self.against] if self.against else [])]

    def profile(self, label: str) -> Profile | None:
        """Where the run ``label`` writes its profile (``$TIERD_BENCH_PROFILE_DIR``), if anywhere."""
        if self.profile_dir is None:
            return None
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        suffix = {"cprofile": ".prof", "strace": ".strace"}.get(self.profiler, ".stacks")
        return Profile(self.profile_dir / f"{label}{suffix}", self.profiler)

    def small_rounds(self, variable: str, default: int) -> int:
        """Rounds for the small checkpoint: ``$variable``, else ``default`` (1 for a smoke run)."""
        return env_int(variable, default if self.rounds > 1 else 1)

    @property
    def cache_note(self) -> str:
        """How each run starts, for the result lines."""
        if self.cache == "cold":
            return (
                "cold: sync, then posix_fadvise(DONTNEED) on every source file, before each run of each side"
            )
        return "warm: sync, then every source file read into the page cache, before each run of each side"


def _kinds(value: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in value.split(",") if k.strip())
    if not kinds or any(k not in ("big", "small") for k in kinds):
        raise ValueError(f"TIERD_BENCH_KINDS must list big and/or small, not {value!r}")
    return kinds


def tierd_source() -> str:
    """The commit measured, with a digest of uncommitted changes under ``tierd/``."""
    return this_tree().source


# Page cache and timing --------------------------------------------------------------------


class Trash:
    """Where a benchmark puts the trees it is done with, deleted only when it ends.

    This project's VMs run ext4 without a journal. There, for a minute or more after
    thousands of files are deleted, every file created pays for a scan past the recently
    deleted inodes (ext4's ``recently_deleted``): ``cp`` + ``sync`` of the 5,000 small files
    took 0.8 s on a fresh disk and 2 to 4 s right after the previous copy was deleted, and
    rclone's CPU per PutObject grew likewise. So with ``keep`` (a checkpoint of many files)
    a finished tree is renamed aside, which frees no inode, and deleted by ``empty``; without
    it (a few big files, whose space is needed) it is deleted at once.
    """

    def __init__(self, root: Path, *, keep: bool) -> None:
        self.root = root
        self.keep = keep
        self._count = 0

    def discard(self, path: Path) -> None:
        """Take ``path`` (a directory) out of the way; missing is fine."""
        if not path.exists():
            return
        if not self.keep:
            shutil.rmtree(path)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._count += 1
        path.rename(self.root / str(self._count))

    def empty(self) -> None:
        """Delete everything discarded so far."""
        shutil.rmtree(self.root, ignore_errors=True)


def sync() -> None:
    """Write back every dirty page, so no run pays for the previous run's writeback."""
    os.sync()


def prepare_cache(paths: Sequence[Path], mode: str) -> None:
    """``cold``: evict ``paths`` from the page cache; ``warm``: read them all into it."""
    if mode == "cold":
        drop_from_cache(list(paths))
        return
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(8 * MIB):
                pass


@dataclass(frozen=True)
class Timed:
    """Wall time, CPU time (user + system, its children included) and ``VmHWM`` of a command."""

    seconds: float
    cpu: Cpu
    peak_rss_bytes: int


def _children_cpu() -> Cpu:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Cpu(usage.ru_utime, usage.ru_stime)


def timed(argv: Sequence[str], env: dict[str, str] | None = None) -> Timed:
    """Run one command to completion (failing loudly), sampling its ``VmHWM`` meanwhile."""
    peak = 0
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, vm_hwm_bytes(proc.pid) or 0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        _, stderr = proc.communicate()
    finally:
        if proc.poll() is None:  # interrupted: do not leave it running
            proc.kill()
            proc.wait()
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(
            f"{argv[0]} exited with {proc.returncode}: {stderr.decode(errors='replace')[-2000:]}"
        )
    return Timed(seconds, _children_cpu() - cpu, peak)

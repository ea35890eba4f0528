"""The daemon running one hop, for the copy and S3 benchmarks.

tierd's side of a hop always runs in a fresh ``python -m tierd run`` process, so the peak
RSS reported (``VmHWM`` from ``/proc/<pid>/status``, read before it stops) is the daemon's
own. The checkpoint is recorded in the daemon's SQLite catalog beforehand, exactly as
detection records it (``detect.record.write_complete`` with the checksums
``detect.hashing.hash_stable`` took), by the measured tree's own tierd (``Side.record``;
once per tree and tiers, then copied for each run), so the first-sight hashing is not part
of the hop.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import stop_process, vm_hwm_bytes
from bench.datasets import Dataset
from bench.results import Cpu, process_cpu
from bench.sides import Side, this_tree
from tests.fixtures.net import free_port
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade
from tierd.daemon.detect.hashing import HashedFile
from tierd.daemon.detect.record import write_complete

__all__ = ["PROFILERS", "HopResult", "Load", "Profile", "run_hop"]

HOST = "127.0.0.1"
NODE = "bench"
#: What runs beside a hop (``run_hop(load=...)``): given the daemon's API URL and its catalog.
Load = Callable[[str, Database], AbstractContextManager[object]]
#: ``cprofile``: the whole daemon under cProfile (event-loop thread only, slows it down);
#: ``py-spy``: py-spy attached from ``hop_started`` to ``replica_verified``, every thread
#: sampled at 250 Hz without stopping the daemon (``--nonblocking``), raw collapsed stacks
#: (read them with ``python -m bench.stacks``); ``py-spy-gil``: the same, sampling only the
#: thread holding the GIL (where the Python CPU goes); ``strace``: ``strace -c -f`` over the
#: same span, a count of every system call of every thread (slows the hop down; counts only).
PROFILERS = ("cprofile", "py-spy", "py-spy-gil", "strace")


@dataclass(frozen=True)
class Profile:
    """Where to write a hop's profile, and with which of ``PROFILERS``."""

    path: Path
    profiler: str = "cprofile"


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


def _events(log: Path) -> list[dict[str, Any]]:
    events = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


def _state(catalog: Path, checkpoint_id: int, tier: str) -> tuple[str, str | None]:
    """The replica's state and error, read with plain SQL (either side's schema has them)."""
    with contextlib.closing(sqlite3.connect(f"file:{catalog}?mode=ro", uri=True, timeout=30)) as conn:
        row = conn.execute(
            "SELECT state, error FROM replicas WHERE checkpoint_id = ? AND tier = ?", (checkpoint_id, tier)
        ).fetchone()
    assert row is not None, f"no replica of checkpoint {checkpoint_id} on {tier}"
    return str(row[0]), row[1]


def _config(catalog: Path, tiers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node": NODE,
        "catalog": {"url": f"sqlite:///{catalog}"},
        "api": {"listen": f"{HOST}:{free_port()}"},
        "drain_timeout_seconds": 10,
        "log": {"level": os.environ.get("TIERD_BENCH_LOG_LEVEL", "info"), "format": "json"},
        "tiers": tiers,
    }


#: Catalogs recorded so far: (tree, the checkpoint's files, tiers) -> (template file, checkpoint id).
_templates: dict[tuple[Path, tuple[HashedFile, ...], str], tuple[Path, int]] = {}


def _recorded(side: Side, dataset: Dataset, config: dict[str, Any], catalog: Path, store: Path) -> int:
    """Copy into ``catalog`` the side's catalog holding ``dataset`` (recorded once, kept in ``store``)."""
    key = (side.root, dataset.files, json.dumps(config["tiers"], sort_keys=True))
    template, checkpoint_id = _templates.get(key, (Path(), 0))
    if not template.is_file():
        store.mkdir(parents=True, exist_ok=True)
        template = store / f"{side.name}-{len(_templates)}.db"
        template.unlink(missing_ok=True)
        checkpoint_id = side.record(template, config, dataset.record_spec())
        _templates[key] = (template, checkpoint_id)
    shutil.copyfile(template, catalog)
    return checkpoint_id


def run_hop(
    workdir: Path,
    dataset: Dataset,
    tiers: list[dict[str, Any]],
    *,
    side: Side | None = None,
    timeout: float = 600.0,
    profile: Profile | None = None,
    load: Load | None = None,
) -> HopResult:
    """Start ``side``'s daemon (default: this tree's) on a catalog holding ``dataset``; wait for tier 1.

    ``tiers[0]`` must be ``dataset.tier0``. The catalog goes in ``workdir``, or in
    ``$TIERD_BENCH_CATALOG_DIR`` when set (to keep its fsyncs off the tiers' disk) and is
    removed from there afterwards. With ``load`` (this tree only) the daemon starts on a
    catalog without the checkpoint; ``load(api_url, db)`` is entered once it runs, and the
    checkpoint is recorded inside it (the pipeline takes it up at its next poll), so the
    whole hop runs under whatever the load does.
    """
    side = side or this_tree()
    if load is not None and side != this_tree():
        raise ValueError("a hop under load runs this tree only")
    workdir.mkdir(parents=True)
    catalog = Path(os.environ.get("TIERD_BENCH_CATALOG_DIR") or workdir) / f"catalog-{workdir.name}.db"
    data = _config(catalog, tiers)
    config_path = workdir / "tierd.yaml"
    config_path.write_text(yaml.safe_dump(data))
    log = workdir / "daemon.log"
    try:
        if load is None:
            checkpoint_id = _recorded(side, dataset, data, catalog, workdir.parent / ".catalogs")
            proc = _start(side, config_path, log, profile)
            try:
                dst = tiers[1]["name"]
                peak, cpu = _wait_verified(proc, catalog, checkpoint_id, dst, log, timeout, profile)
            finally:
                stop_process(proc)
        else:
            peak, cpu = _run_loaded(side, dataset, data, config_path, log, load, timeout)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{catalog}{suffix}").unlink(missing_ok=True)
    return _hop_result(log, peak, cpu)


def _run_loaded(
    side: Side,
    dataset: Dataset,
    data: dict[str, Any],
    config_path: Path,
    log: Path,
    load: Load,
    timeout: float,
) -> tuple[int, Cpu | None]:
    """The daemon started on an empty catalog, the checkpoint recorded while ``load`` runs."""
    config = Config(**data)
    db = Database(config.catalog.url)
    try:
        upgrade(db)
        proc = _start(side, config_path, log, None)
        try:
            with load(f"http://{data['api']['listen']}", db):
                _, checkpoint_id = write_complete(db, config, dataset.detection())
                catalog = Path(data["catalog"]["url"].removeprefix("sqlite:///"))
                return _wait_verified(proc, catalog, checkpoint_id, config.tiers[1].name, log, timeout, None)
        finally:
            stop_process(proc)
    finally:
        db.dispose()


def _start(side: Side, config_path: Path, log: Path, profile: Profile | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "tierd", "run", "--config", str(config_path)]
    if profile is not None and profile.profiler == "cprofile":
        argv[1:1] = ["-m", "cProfile", "-o", str(profile.path)]
    return side.spawn(argv, log)


def _attach(pid: int, profile: Profile) -> subprocess.Popen[bytes] | None:
    """The profiler that attaches to a running daemon, recording ``pid`` until interrupted."""
    if profile.profiler.startswith("py-spy"):
        binary = os.environ.get("TIERD_BENCH_PYSPY") or shutil.which("py-spy")
        if not binary:
            raise RuntimeError("TIERD_BENCH_PROFILER=py-spy: no py-spy on PATH (set TIERD_BENCH_PYSPY)")
        argv = [binary, "record", "--pid", str(pid), "--rate", "250", "--threads", "--nonblocking"]
        argv += ["--format", "raw", "--output", str(profile.path)]
        if profile.profiler == "py-spy-gil":
            argv.append("--gil")
    elif profile.profiler == "strace":
        argv = ["strace", "-c", "-f", "-p", str(pid), "-o", str(profile.path)]
    else:
        return None
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _detach(profiler: subprocess.Popen[bytes]) -> None:
    """Interrupt an attached profiler (it writes its file then) and wait for it."""
    stop_process(profiler, signal.SIGINT, timeout=60)


#: The daemon's log events that start, finish and fail a hop, as they appear in its JSON lines.
_STARTED, _VERIFIED, _FAILED = b'"hop_started"', b'"replica_verified"', b'"replica_failed"'


def _wait_verified(
    proc: subprocess.Popen[bytes],
    catalog: Path,
    checkpoint_id: int,
    tier: str,
    log: Path,
    timeout: float,
    profile: Profile | None,
) -> tuple[int, Cpu | None]:
    """Follow the daemon's log until the hop ends: (daemon's VmHWM, CPU while copying).

    Reading the new lines of a file is all the watching costs: polling the catalog through
    the ORM every few milliseconds took CPU (and garbage collections) from a daemon that
    has two cores to share. The catalog is read once, to confirm the ``verified`` state.
    """
    deadline = time.monotonic() + timeout
    cpu_start: Cpu | None = None
    profiler: subprocess.Popen[bytes] | None = None
    events: set[bytes] = set()
    partial = b""
    try:
        with log.open("rb") as lines:
            while True:
                *complete, partial = (partial + lines.read()).split(b"\n")
                events.update(e for line in complete for e in (_STARTED, _VERIFIED, _FAILED) if e in line)
                if cpu_start is None and _STARTED in events:
                    cpu_start = process_cpu(proc.pid)
                    profiler = _attach(proc.pid, profile) if profile is not None else None
                if _VERIFIED in events and _state(catalog, checkpoint_id, tier)[0] == "verified":
                    cpu_end = process_cpu(proc.pid)
                    peak = vm_hwm_bytes(proc.pid)
                    assert peak is not None, "the daemon exited before its peak RSS was read"
                    return peak, None if cpu_start is None else cpu_end - cpu_start
                if _FAILED in events or proc.poll() is not None or time.monotonic() > deadline:
                    state, error = _state(catalog, checkpoint_id, tier)
                    tail = log.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"hop to {tier} ended {state} ({error}); daemon log:\n{tail}")
                time.sleep(0.02)
    finally:
        if profiler is not None:
            _detach(profiler)


def _hop_result(log: Path, peak: int, cpu: Cpu | None) -> HopResult:
    events = _events(log)
    started = next(e for e in events if e.get("event") == "hop_started")
    verified = next(e for e in events if e.get("event") == "replica_verified")
    begin = datetime.fromisoformat(started["timestamp"])
    end = datetime.fromisoformat(verified["timestamp"])
    return HopResult((end - begin).total_seconds(), peak, float(verified["seconds"]), cpu, log)

"""A 1 GiB POSIX-to-POSIX hop with and without 50 API clients hammering the daemon (issue 23, item 8).

The API and the copy run in one asyncio process: what the API takes (the event loop, the
GIL, catalog connections) the copy waits for. tierd's side is the real daemon
(``python -m tierd run``, tiers ``nvme`` -> ``pfs`` at their defaults) on a catalog that also
holds ``SEED_CHECKPOINTS`` checkpoints of ``SEED_FILES`` files each, recorded by another node
and verified everywhere (the pipeline has nothing to do for them; the clients read them).
Each run starts the daemon with the 1 GiB checkpoint on tier 0 but not recorded, starts the
clients (none for the baseline side), lets them run ``WARMUP_SECONDS``, then records the
checkpoint as detection would; the pipeline takes it up at its next poll. The hop is timed
from the daemon's ``hop_started`` to its ``replica_verified`` log line, as in ``bench_copy``.

Load: ``bench.api_clients`` in a process of its own, ``TIERD_BENCH_APILOAD_CLIENTS`` (50)
clients with a ``TIERD_BENCH_APILOAD_TIMEOUT`` (1 s) timeout, each sending
``GET /v1/checkpoints`` and ``GET /v1/checkpoints/{id}`` in turn, the next at once. A 503 with
``Retry-After`` is honoured unless ``TIERD_BENCH_APILOAD_RETRY_AFTER=ignore``. What they got
(statuses, timeouts, connection errors) is in ``load_runs``.

``tierd_seconds`` is the hop under load, ``baseline_seconds`` the same hop alone; sides
alternate; before each run ``sync`` and the source evicted from the page cache. Goal:
``ratio`` <= 1.5. ``TIERD_BENCH_APILOAD_GIB`` (1), ``TIERD_BENCH_ROUNDS`` (3).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO, bench_root, emit, env_float, env_int, note, quick
from bench.datasets import Dataset, make_big
from bench.harness import Settings, Timed, prepare_cache, sync
from bench.hop import run_hop
from bench.results import RSS_GOAL, Cpu, Runs
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File, Replica, Run, utcnow

TIME_GOAL = 1.5
ROUNDS = 3
SEED_CHECKPOINTS = 200
SEED_FILES = 50
WARMUP_SECONDS = 3.0
TIERS = ("nvme", "pfs")


def _tiers(base: Path) -> list[dict[str, Any]]:
    return [{"name": name, "kind": "posix", "path": str(base / name)} for name in TIERS]


def seed(db: Database) -> None:
    """``SEED_CHECKPOINTS`` checkpoints of another node, verified on every tier."""
    created = utcnow() - timedelta(days=1)
    with db.session() as session:
        run = Run(name="dashboard")
        for index in range(SEED_CHECKPOINTS):
            path = f"dashboard/step_{index:06d}"
            ckpt = Checkpoint(
                run=run,
                step=index * 100,
                path=path,
                format="dcp",
                node="trainer",
                created_at=created + timedelta(seconds=index),
                completed_at=created + timedelta(seconds=index + 1),
                total_bytes=SEED_FILES * 2**20,
                file_count=SEED_FILES,
            )
            for number in range(SEED_FILES):
                ckpt.files.append(
                    File(
                        relpath=f"{path}/__{number}_0.distcp",
                        size=2**20,
                        mtime_ns=0,
                        checksum_algo="crc64nvme",
                        checksum="AAAAAAAAAAA=",
                    )
                )
            for tier_index, tier in enumerate(TIERS):
                ckpt.replicas.append(
                    Replica(tier=tier, tier_index=tier_index, state="verified", location=path)
                )
            session.add(ckpt)


def _wait_ready(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the daemon at {url} was not ready within {timeout} s")


class ApiLoad:
    """The load beside one hop: the seeded catalog and ``clients`` API clients (0: none)."""

    def __init__(self, clients: int, timeout: float, ignore_retry_after: bool) -> None:
        self.clients, self.timeout, self.ignore_retry_after = clients, timeout, ignore_retry_after
        self.results: list[dict[str, Any]] = []
        self.recorded_at: datetime | None = None

    @contextmanager
    def __call__(self, url: str, db: Database) -> Iterator[None]:
        seed(db)
        _wait_ready(url)
        if not self.clients:
            time.sleep(WARMUP_SECONDS)
            self.recorded_at = datetime.now(UTC)
            yield
            return
        argv = [
            sys.executable,
            "-m",
            "bench.api_clients",
            url,
            f"--clients={self.clients}",
            f"--timeout={self.timeout}",
            f"--ids=1-{SEED_CHECKPOINTS}",
        ]
        if self.ignore_retry_after:
            argv.append("--ignore-retry-after")
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            time.sleep(WARMUP_SECONDS)
            self.recorded_at = datetime.now(UTC)
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"the API clients failed: {err.decode(errors='replace')[-2000:]}")
        self.results.append(json.loads(out.decode().strip().splitlines()[-1]))


def _recorded_to_verified(load: ApiLoad, log: Path) -> float:
    """Seconds from the checkpoint's recording to its ``replica_verified`` log line.

    It includes the wait for the pipeline's next poll (up to 10 s, either side) and what
    the load did to scheduling and claiming, which the hop's own time leaves out.
    """
    assert load.recorded_at is not None
    for line in log.read_text(errors="replace").splitlines():
        if '"replica_verified"' in line:
            verified = datetime.fromisoformat(json.loads(line)["timestamp"])
            return (verified - load.recorded_at).total_seconds()
    raise RuntimeError(f"no replica_verified line in {log}")


def _bench(base: Path, dataset: Dataset, settings: Settings) -> None:
    clients = env_int("TIERD_BENCH_APILOAD_CLIENTS", 50)
    ignore = os.environ.get("TIERD_BENCH_APILOAD_RETRY_AFTER", "honour") == "ignore"
    loaded = ApiLoad(clients, env_float("TIERD_BENCH_APILOAD_TIMEOUT", 1.0), ignore)
    alone = ApiLoad(0, 1.0, ignore)
    runs = Runs(TIME_GOAL, RSS_GOAL)
    end_to_end: dict[str, list[float]] = {"loaded": [], "alone": []}
    for round_ in range(settings.rounds):
        order = ["loaded", "alone"] if round_ % 2 == 0 else ["alone", "loaded"]
        for side in order:
            sync()
            prepare_cache(dataset.paths, settings.cache)
            label = f"{side}-{round_}"
            load = loaded if side == "loaded" else alone
            hop = run_hop(base / "daemon" / label, dataset, _tiers(base), load=load)
            end_to_end[side].append(_recorded_to_verified(load, hop.log))
            shutil.rmtree(base / "pfs" / "job", ignore_errors=True)
            shutil.rmtree(base / "daemon" / label, ignore_errors=True)
            if side == "loaded":
                runs.add_tierd(hop.seconds, hop.cpu, hop.peak_rss_bytes)
                note(
                    f"apiload round {round_}: under load {hop.seconds:.2f}s; clients got {loaded.results[-1]}"
                )
            else:
                runs.add_baseline(Timed(hop.seconds, hop.cpu or Cpu(0.0, 0.0), hop.peak_rss_bytes))
                note(f"apiload round {round_}: alone {hop.seconds:.2f}s")
    t, b = runs.medians
    emit(
        "copy_hop_under_api_load",
        t,
        f"the same hop with no API client (the catalog seeded alike: {SEED_CHECKPOINTS} checkpoints "
        f"x {SEED_FILES} files)",
        b,
        peak_rss=max(runs.peaks),
        **runs.summary(dataset, settings, base),
        load=f"{clients} clients (bench.api_clients), {loaded.timeout} s timeout, "
        "GET /v1/checkpoints and /v1/checkpoints/{id} in turn",
        load_runs=loaded.results,
        recorded_to_verified_runs={side: [round(x, 3) for x in runs_] for side, runs_ in end_to_end.items()},
        tierd_timing="daemon log hop_started -> replica_verified, under load",
        baseline_timing="daemon log hop_started -> replica_verified, alone (baseline_cpu: the daemon's)",
    )


def main() -> None:
    """Make the checkpoint in a scratch directory, run the comparison, clean up."""
    settings = Settings.from_env(ROUNDS)
    gib = env_float("TIERD_BENCH_APILOAD_GIB", 0.25 if quick() else 1.0)
    base = Path(tempfile.mkdtemp(prefix="apiload-", dir=bench_root()))
    try:
        dataset = make_big(base / "nvme", int(gib * 2**30), env_int("TIERD_BENCH_APILOAD_SHARDS", 1))
        (base / "pfs").mkdir()
        _bench(base, dataset, settings)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

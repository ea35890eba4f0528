"""The API's list and status calls on a catalog of 1,000,000 file rows (issue 17: p99 <= 50 ms).

The catalog is ``bench.retention_catalog``'s (10 runs x 1,000 steps, 100 files each, four tiers,
every replica verified), loaded with ``COPY`` into a fresh database of the fleet bench's
PostgreSQL. One real daemon (``python -m tierd run``, another node name than the checkpoints',
so start-up does not compare a million recorded files with its empty tier 0) serves it; one
client on a kept-alive connection sends each call ``TIERD_BENCH_API_CALLS`` (300) times after
20 untimed ones, one after another, and reports p50 and p99 per call.
"""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.common import emit, env_int, note, percentile, quick, vm_hwm_bytes
from bench.retention_catalog import TIERS, Shape, fill_catalog
from tests.fixtures.daemon import Daemon
from tests.fixtures.net import free_port
from tests.fixtures.pgserver import PostgresServer
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade

__all__ = ["measure_api"]

GOAL_SECONDS = 0.050
WARMUP = 20


def _calls(shape: Shape, rng: random.Random) -> dict[str, Any]:
    """Each call's name and a function giving its next path."""
    checkpoints = shape.checkpoints
    return {
        "api_list": lambda: "/v1/checkpoints?limit=50",
        "api_list_run": lambda: f"/v1/checkpoints?run=run-{rng.randint(1, shape.runs):02d}&limit=50",
        "api_list_deep": lambda: f"/v1/checkpoints?limit=50&offset={rng.randint(0, checkpoints - 50)}",
        "api_status_checkpoint": lambda: f"/v1/checkpoints/{rng.randint(1, checkpoints)}",
        "api_runs": lambda: "/v1/runs",
        "api_fleet": lambda: "/v1/fleet",
        "api_readyz": lambda: "/readyz",
    }


def _start_daemon(url: str, root: Path) -> tuple[Daemon, str]:
    tiers = [{"name": name, "kind": "posix", "path": str(root / "tiers" / name)} for name in TIERS]
    for tier in tiers:
        Path(tier["path"]).mkdir(parents=True, exist_ok=True)
    listen = f"127.0.0.1:{free_port()}"
    config = {
        "node": "bench-api",
        "catalog": {"url": url},
        "api": {"listen": listen},
        "log": {"level": "warning", "format": "json"},
        "tiers": tiers,
        "retention": {"interval": 3600},
    }
    path = root / "tierd.yaml"
    path.write_text(yaml.safe_dump(config))
    daemon = Daemon(path, root / "daemon.log", exec=True, own_group=True)
    daemon.start()
    return daemon, f"http://{listen}"


def _wait_ready(client: httpx.Client, daemon: Daemon) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if not daemon.alive():
            raise RuntimeError(f"the daemon exited:\n{daemon.tail()}")
        time.sleep(0.5)
    raise RuntimeError(f"the daemon was not ready within 300 s:\n{daemon.tail()}")


def _time_call(client: httpx.Client, path_of: Any, calls: int) -> tuple[list[float], int]:
    """Seconds per call, and the status of the last one."""
    status = 0
    for _ in range(WARMUP):
        status = client.get(path_of()).status_code
    times = []
    for _ in range(calls):
        path = path_of()
        started = time.perf_counter()
        answer = client.get(path)
        times.append(time.perf_counter() - started)
        status = answer.status_code
    return times, status


def measure_api(server: PostgresServer, root: Path) -> None:
    """Build the catalog, serve it, time each call; one result line per call."""
    root.mkdir(parents=True, exist_ok=True)
    shape = Shape(runs=2, steps=100) if quick() else Shape()
    url = server.new_database()
    db = Database(url)
    try:
        upgrade(db)
        note(f"api: loading {shape.checkpoints * shape.files:,} file rows")
        built = fill_catalog(db, shape, datetime.now(UTC))
    finally:
        db.dispose()
    note(f"api: catalog built in {built.seconds:.0f}s; starting the daemon")
    daemon, base = _start_daemon(url, root)
    calls = env_int("TIERD_BENCH_API_CALLS", 30 if quick() else 300)
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            _wait_ready(client, daemon)
            for name, path_of in _calls(shape, random.Random(17)).items():
                load_before = os.getloadavg()[0]
                times, status = _time_call(client, path_of, calls)
                p99 = percentile(times, 99)
                emit(
                    name,
                    p99,
                    "goal: p99 <= 50 ms",
                    GOAL_SECONDS,
                    peak_rss=vm_hwm_bytes(daemon.pid) if daemon.pid else None,
                    status=status,
                    calls=calls,
                    p50_ms=round(percentile(times, 50) * 1000, 2),
                    p99_ms=round(p99 * 1000, 2),
                    max_ms=round(max(times) * 1000, 2),
                    goal_met=p99 <= GOAL_SECONDS and status == 200,
                    file_rows=shape.checkpoints * shape.files,
                    checkpoints=shape.checkpoints,
                    loadavg_1m_before_after=[round(load_before, 2), round(os.getloadavg()[0], 2)],
                )
    finally:
        daemon.stop()

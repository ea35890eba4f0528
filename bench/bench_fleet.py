"""A fleet at scale on this one machine: 32 daemons on one PostgreSQL, 200 DCP steps of 32 shards.

Issue 17's scale run. Each daemon (``python -m tierd run``, ``tests.fixtures.fleet``) has its own
node-local tier 0 and they share a POSIX ``pfs`` tier; all use one PostgreSQL started for the run
(initdb, ``fsync`` on). Every ``TIERD_BENCH_FLEET_INTERVAL`` seconds (2: the cadence this
2-core machine sustains with 32 daemons, which need about 2.4 CPU-seconds a step, PostgreSQL
and the writer besides; at 1 s the backlog grows by every step) the "job" writes one step:
rank r's shard (``__r_0.distcp``, ``TIERD_BENCH_FLEET_SHARD_BYTES``) on node r, then the
coordinator's real DCP ``.metadata`` (a pickled ``Metadata`` naming all 32 shards, written to
``.metadata.tmp`` and renamed) on node 0. Reported:

- ``fleet_step_verified``: seconds from the step's last file written (the ``.metadata`` rename)
  to its ``pfs`` replica ``verified`` in the catalog (p50, p99, max), read by one query every
  100 ms (counted and taken out of the query rates);
- ``catalog_*``: transactions per second (``pg_stat_database`` ``xact_commit`` +
  ``xact_rollback``) and rows read and written per second, while steps arrive and while the
  fleet idles; PostgreSQL connections to the database (``pg_stat_activity``), the most seen;
- ``fleet_idle``: each daemon's CPU (utime + stime from ``/proc``) over
  ``TIERD_BENCH_FLEET_IDLE_SECONDS`` once everything is verified, and its RSS;
- ``api_*`` (``bench.fleet_api``): the API's list and status calls on a catalog of 1,000,000
  file rows, p50/p99 against the 50 ms goal;
- ``busy_daemon_cpu_*``: the daemons' CPU (all of them) while steps arrive, per step and
  in cores;
- ``busy_top_statements``: the statements that took PostgreSQL the most time while steps
  arrived (``pg_stat_statements``): where the catalog's load comes from;
  ``busy_most_run_statements`` those run most often, ``busy_statements_per_shard`` how many
  statements the fleet ran per shard, and ``idle_top_statements`` what the idle fleet runs.

``TIERD_BENCH_FLEET_NODES`` (32) and ``TIERD_BENCH_FLEET_STEPS`` (200) shrink it;
``TIERD_BENCH_QUICK`` runs 4 nodes and 5 steps; ``TIERD_BENCH_FLEET_PARTS`` (``scale,api``)
runs one half. About 9 minutes in all.
"""

from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.common import bench_root, emit, env_float, env_int, note, percentile, quick
from bench.fleet_api import measure_api
from bench.harness import tierd_source
from bench.results import OtherLoad
from bench.retention_idle import daemon_cpu
from tests.fixtures.fleet import Fleet, FleetSpec, PostgresSwitch, build_fleet
from tests.fixtures.pgserver import PostgresServer, pg_available, postgres_server
from tests.integration.fleet_jobs import dcp_metadata

POLL = 0.1
MAX_CONNECTIONS = "1000"
SETTLE = 15.0


@dataclass
class Catalog:
    """The bench's own connection: step states, statistics, and how many queries it sent."""

    url: str
    conn: Any = None
    own_queries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.conn = psycopg.connect(self.url.replace("postgresql+psycopg", "postgresql"), autocommit=True)

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with self.lock:
            self.own_queries += 1
            return list(self.conn.execute(sql, args).fetchall())

    def step_states(self) -> tuple[set[int], set[int]]:
        """The steps recorded complete, and those verified on ``pfs``."""
        rows = self.query(
            "SELECT c.step, c.state = 'complete', "
            "coalesce(bool_or(r.tier = 'pfs' AND r.state = 'verified'), false) "
            "FROM checkpoints c LEFT JOIN replicas r ON r.checkpoint_id = c.id GROUP BY c.id"
        )
        return {int(r[0]) for r in rows if r[1]}, {int(r[0]) for r in rows if r[2]}

    def stats(self) -> dict[str, int]:
        row = self.query(
            "SELECT xact_commit + xact_rollback, tup_returned + tup_fetched, "
            "tup_inserted + tup_updated + tup_deleted "
            "FROM pg_stat_database WHERE datname = current_database()"
        )[0]
        return {"transactions": int(row[0]), "rows_read": int(row[1]), "rows_written": int(row[2])}

    def reset_statements(self) -> None:
        """Start ``pg_stat_statements`` counting afresh (the extension is loaded by ``main``)."""
        with self.lock:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.query("SELECT pg_stat_statements_reset()")

    def top_statements(self, count: int = 8, *, by: str = "total_exec_time") -> list[dict[str, Any]]:
        """The statements that took the most time (or ``by="calls"``: ran most) since the reset."""
        rows = self.query(
            "SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 200) "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            f"WHERE d.datname = current_database() ORDER BY {by} DESC LIMIT %s",
            count,
        )
        return [
            {"calls": int(c), "total_ms": round(float(t)), "rows": int(r), "query": str(q)}
            for c, t, r, q in rows
        ]

    def statement_calls(self) -> int:
        """Statements the database ran since the reset (the bench's own included)."""
        return int(
            self.query(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d "
                "ON d.oid = s.dbid WHERE d.datname = current_database()"
            )[0][0]
        )

    def connections(self) -> int:
        return int(
            self.query("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")[0][0]
        )


def write_step(fleet: Fleet, step: int, shard: bytes, metadata: bytes) -> float:
    """Every rank's shard on its node, then the coordinator's ``.metadata``; when the last landed."""
    for node in fleet.nodes:
        directory = node.watch_dir / f"step_{step}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"__{node.index}_0.distcp").write_bytes(shard[:-8] + step.to_bytes(8, "big"))
    coordinator = fleet.nodes[0].watch_dir / f"step_{step}"
    (coordinator / ".metadata.tmp").write_bytes(metadata)
    os.replace(coordinator / ".metadata.tmp", coordinator / ".metadata")
    return time.monotonic()


class Watcher(threading.Thread):
    """Polls the catalog for verified steps and PostgreSQL's connection count."""

    def __init__(self, catalog: Catalog) -> None:
        super().__init__(name="fleet-watcher", daemon=True)
        self.catalog = catalog
        self.verified_at: dict[int, float] = {}
        self.complete_at: dict[int, float] = {}
        self.max_connections = 0
        self.stop = threading.Event()

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(POLL):
            now = time.monotonic()
            complete, verified = self.catalog.step_states()
            for step in complete - set(self.complete_at):
                self.complete_at[step] = now
            for step in verified - set(self.verified_at):
                self.verified_at[step] = now
            if tick % 10 == 0:
                self.max_connections = max(self.max_connections, self.catalog.connections())
            tick += 1


def _drain(watcher: Watcher, steps: int, limit: float = 180.0, stalled: float = 30.0) -> None:
    """Wait until every step is verified, at most ``limit`` s, or ``stalled`` s without progress."""
    deadline, last, moved = time.monotonic() + limit, (-1, -1), time.monotonic()
    while len(watcher.verified_at) < steps and time.monotonic() < deadline:
        now_seen = (len(watcher.complete_at), len(watcher.verified_at))
        if now_seen != last:
            last, moved = now_seen, time.monotonic()
        elif time.monotonic() - moved > stalled:
            note(f"fleet: no progress for {stalled:.0f}s: {now_seen[0]} complete, {now_seen[1]} verified")
            return
        time.sleep(0.5)


def _rates(before: dict[str, int], after: dict[str, int], seconds: float, own: int) -> dict[str, float]:
    transactions = after["transactions"] - before["transactions"] - own
    return {
        "transactions_per_second": round(transactions / seconds, 1),
        "rows_read_per_second": round((after["rows_read"] - before["rows_read"]) / seconds, 1),
        "rows_written_per_second": round((after["rows_written"] - before["rows_written"]) / seconds, 1),
        "seconds": round(seconds, 1),
    }


def run_steps(
    fleet: Fleet, catalog: Catalog, steps: int, interval: float, shard_bytes: int
) -> dict[str, Any]:
    """Write the steps at ``interval``; wait for each to be verified on pfs; latencies and rates."""
    metadata = dcp_metadata([shard_bytes] * len(fleet.nodes))
    shard = os.urandom(shard_bytes)
    watcher = Watcher(catalog)
    catalog.reset_statements()
    pids = [n.pid for n in fleet.nodes]
    cpu_before = sum(sum(daemon_cpu(pid)) for pid in pids)
    before, own, started = catalog.stats(), catalog.own_queries, time.monotonic()
    watcher.start()
    written: dict[int, float] = {}
    for step in range(1, steps + 1):
        written[step] = write_step(fleet, step, shard, metadata)
        if step % 20 == 0:
            note(f"fleet: {step} steps written, {len(watcher.verified_at)} verified")
        time.sleep(max(0.0, started + step * interval - time.monotonic()))  # the job's cadence
    _drain(watcher, steps)
    watcher.stop.set()
    watcher.join()
    seconds = time.monotonic() - started
    after = catalog.stats()
    cpu = sum(sum(daemon_cpu(pid)) for pid in pids) - cpu_before
    latencies = [watcher.verified_at[s] - written[s] for s in written if s in watcher.verified_at]
    to_complete = [watcher.complete_at[s] - written[s] for s in written if s in watcher.complete_at]
    return {
        "latencies": latencies,
        "complete_p50_seconds": round(percentile(to_complete, 50), 3) if to_complete else None,
        "complete_p99_seconds": round(percentile(to_complete, 99), 3) if to_complete else None,
        "complete_steps": len(to_complete),
        "unverified_steps": sorted(set(written) - set(watcher.verified_at))[:20],
        "busy": _rates(before, after, seconds, catalog.own_queries - own),
        "busy_top_statements": catalog.top_statements(),
        "busy_most_run_statements": catalog.top_statements(by="calls"),
        "busy_statements_per_shard": round(
            (catalog.statement_calls() - catalog.own_queries + own) / (steps * len(fleet.nodes)), 1
        ),
        "busy_daemon_cpu_seconds_per_step": round(cpu / steps, 3),
        "busy_daemon_cpu_share_of_cores": round(cpu / seconds, 2),
        "max_connections": watcher.max_connections,
    }


def measure_idle(fleet: Fleet, catalog: Catalog, seconds: float) -> dict[str, Any]:
    """Each daemon's CPU over ``seconds`` with nothing to do, its RSS, and the catalog's rates."""
    pids = [n.pid for n in fleet.nodes]
    cpu_before = [sum(daemon_cpu(pid)) for pid in pids]
    catalog.reset_statements()
    before, own, started = catalog.stats(), catalog.own_queries, time.monotonic()
    connections = catalog.connections()
    time.sleep(seconds)
    window = time.monotonic() - started
    rates = _rates(before, catalog.stats(), window, catalog.own_queries - own)
    top = catalog.top_statements(5)
    shares = [(sum(daemon_cpu(pid)) - b) / window for pid, b in zip(pids, cpu_before, strict=True)]
    rss = [_rss(pid) for pid in pids]
    return {
        "idle_cpu_share_of_core_median": round(statistics.median(shares), 4),
        "idle_cpu_share_of_core_max": round(max(shares), 4),
        "idle_cpu_share_of_core_all": [round(s, 4) for s in shares],
        "rss_bytes_median": int(statistics.median(rss)),
        "rss_bytes_max": max(rss),
        "idle_catalog": rates,
        "idle_top_statements": top,
        "idle_connections": connections,
        "window_seconds": round(window, 1),
    }


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _scale(server: PostgresServer, root: Path) -> None:
    nodes = 4 if quick() else env_int("TIERD_BENCH_FLEET_NODES", 32)
    steps = 5 if quick() else env_int("TIERD_BENCH_FLEET_STEPS", 200)
    interval = env_float("TIERD_BENCH_FLEET_INTERVAL", 2.0)
    shard_bytes = env_int("TIERD_BENCH_FLEET_SHARD_BYTES", 64 * 1024)
    idle = env_float("TIERD_BENCH_FLEET_IDLE_SECONDS", 10.0 if quick() else 30.0)
    url = server.new_database()
    spec = FleetSpec(
        nodes=nodes, with_s3=False, watch={"nodes": nodes, "format": "dcp", "settle_seconds": 1}, exec=True
    )
    fleet = build_fleet(root / "fleet", url, spec)
    catalog = Catalog(url)
    load = OtherLoad()
    try:
        note(f"fleet: starting {nodes} daemons")
        started = time.monotonic()
        fleet.start(timeout=600)
        note(f"fleet: {nodes} daemons ready in {time.monotonic() - started:.0f}s; {steps} steps")
        busy = run_steps(fleet, catalog, steps, interval, shard_bytes)
        time.sleep(SETTLE)
        idle_result = measure_idle(fleet, catalog, idle)
        problems = {n.name: n.problems()[-3:] for n in fleet.nodes if n.problems()}
    finally:
        fleet.stop()
        catalog.conn.close()
    latencies = busy.pop("latencies")
    emit(
        "fleet_step_verified",
        percentile(latencies, 50) if latencies else float("nan"),
        "none: seconds from a step's last file written to its pfs replica verified",
        0.0,
        peak_rss=idle_result["rss_bytes_max"],
        nodes=nodes,
        steps=steps,
        shards_per_step=nodes,
        shard_bytes=shard_bytes,
        step_interval_seconds=interval,
        verified_steps=len(latencies),
        latency_p50_seconds=round(percentile(latencies, 50), 3) if latencies else None,
        latency_p99_seconds=round(percentile(latencies, 99), 3) if latencies else None,
        latency_max_seconds=round(max(latencies), 3) if latencies else None,
        catalog_busy=busy.pop("busy"),
        postgres_connections_max=busy.pop("max_connections"),
        **busy,
        **idle_result,
        daemon_problems=problems,
        loadavg_1m_after=round(os.getloadavg()[0], 2),
        tierd_source=tierd_source(),
        **load.result(),
    )


def main() -> None:
    if not pg_available():
        note("fleet: skipped, PostgreSQL is not installed")
        return
    root = bench_root() / "fleet"
    shutil.rmtree(root, ignore_errors=True)  # a step left by an earlier run would be detected again
    with postgres_server(None, durable=True) as server:
        # PostgreSQL's default of 100 connections is not enough for 32 daemons: allow plenty,
        # and report how many the fleet used.
        PostgresSwitch.of(server).set_and_restart(
            max_connections=MAX_CONNECTIONS, shared_preload_libraries="pg_stat_statements"
        )
        parts = os.environ.get("TIERD_BENCH_FLEET_PARTS", "scale,api").split(",")
        if "scale" in parts:
            _scale(server, root)
        if "api" in parts:
            measure_api(server, root / "api")

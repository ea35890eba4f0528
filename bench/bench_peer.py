"""Peer replication against the parallel FS, in the same run: four daemons, one PostgreSQL.

Issue 29's benchmark. Four daemons (``python -m tierd run``, ``tests.fixtures.fleet``), each
with its own tier 0 and peer directory on its own loopback address, two failure domains, and
a ``pfs`` tier on the same disk. Each round the "job" writes one DCP step: rank r's shard
(``TIERD_BENCH_PEER_BYTES`` per node: 1 GiB; ``TIERD_BENCH_QUICK``: 64 MiB) on node r, then
the coordinator's real ``.metadata`` on node 0. Reported (``peer_safe``), from the step's
last file written, polled every 50 ms in the catalog:

- ``safe_p50/p99_seconds``: until the step is safe against one node's loss (every part
  verified on another node, or on ``pfs``), and ``via_peers``: how many rounds got there by
  peer copies alone (the goal: under half the PFS hop's time);
- ``pfs_p50/p99_seconds``: until the step's ``pfs`` replica is verified;
- ``daemon_cpu_seconds_per_gib``: the four daemons' CPU (utime + stime) over the rounds, per
  GiB written: every node both sends and receives, and also hashes its part at first sight
  and copies it to ``pfs``, so this is the whole daemon's cost per GiB, not the peer
  transfer's alone; ``idle_cpu_seconds``: the four daemons' CPU over ``IDLE`` seconds once
  every copy is settled (what the peer tier costs an idle fleet, beside its pipeline), and
  ``idle_catalog_transactions_per_node_minute`` the catalog transactions meanwhile
  (``pg_stat_database``, per node and minute: a backend reports its counts up to 10 s late,
  hence the minute); ``idle_statements_per_node_minute`` the statements they ran and
  ``idle_most_run_statements`` which (``pg_stat_statements``, loaded for the run);
- ``peak_rss_bytes``: the largest of the daemons' own peaks (``VmHWM``; goal: under 150 MB),
  each daemon's in ``peak_rss_bytes_by_node``; ``ready_rss_bytes``: the largest peak once
  every daemon is up, before any step (what the imports and start-up take, beside what
  moving the bytes adds); ``cpu_seconds_by_node``: each daemon's CPU over the rounds;
- ``sender_cpu_seconds_per_gib``, ``receiver_cpu_seconds_per_gib``, ``copy_seconds_per_gib``:
  what a peer copy alone costs each side, a sender and a receiving daemon in processes of
  their own (``peer_copy``: the shard size, at most 256 MiB, four times), once the fleet
  has stopped.

``TIERD_BENCH_PEER_ROUNDS`` (3) rounds: about 10 minutes at full size on a loaded machine.
After each, the step is deleted on every tier
(``DELETE /v1/checkpoints/{id}``, the POSIX tiers' ``delete_delay`` 0) and the next round waits
until its files are gone: the disk holds one round's data at a time (1 GiB per node is 12 GiB:
tier 0, the PFS and the peer copies).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import httpx
import psycopg
import yaml

from bench.common import bench_root, emit, env_int, note, percentile, quick, vm_hwm_bytes
from bench.harness import tierd_source
from bench.peer_copy import copy_cost
from bench.results import OtherLoad
from bench.retention_idle import daemon_cpu
from tests.fixtures.fleet import Fleet, FleetSpec, PostgresSwitch, build_fleet
from tests.fixtures.pgserver import pg_available, postgres_server
from tests.integration.fleet_jobs import dcp_metadata, shard_name

NODES = 4
POLL = 0.05
IDLE = 60.0
LIMIT = 900.0
GIB = 1024**3
#: The largest file ``peer_copy`` sends (four times: 1 GiB in all at full size).
COPY_BYTES = 256 * 1024 * 1024

#: A step's parts that are not yet safe against one node's loss (0 with every part recorded: safe).
UNSAFE_PARTS = """
SELECT count(*) FROM parts p WHERE p.checkpoint_id = %s
AND NOT EXISTS (SELECT 1 FROM peer_copies c
  WHERE c.part_id = p.id AND c.state = 'verified' AND c.holder <> p.node)
AND NOT EXISTS (SELECT 1 FROM part_replicas r
  WHERE r.part_id = p.id AND r.tier = 'pfs' AND r.state = 'verified')
"""
STEP = "SELECT c.id FROM checkpoints c WHERE c.step = %s AND c.state = 'complete'"
PARTS = "SELECT count(*) FROM parts WHERE checkpoint_id = %s"
ON_PFS = "SELECT count(*) FROM replicas WHERE checkpoint_id = %s AND tier = 'pfs' AND state = 'verified'"


def write_step(fleet: Fleet, step: int, part_bytes: int) -> float:
    """Each rank's shard on its node, then the coordinator's ``.metadata``; when the last landed."""
    block = os.urandom(1024 * 1024)
    for node in fleet.nodes:
        directory = node.watch_dir / f"step_{step}"
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / shard_name(node.index)).open("wb") as out:
            for _ in range(part_bytes // len(block)):
                out.write(block)
            out.write(step.to_bytes(8, "big") * (node.index + 1))
    sizes = [part_bytes + 8 * (i + 1) for i in range(NODES)]
    coordinator = fleet.nodes[0].watch_dir / f"step_{step}"
    (coordinator / ".metadata.tmp").write_bytes(dcp_metadata(sizes))
    os.replace(coordinator / ".metadata.tmp", coordinator / ".metadata")
    return time.monotonic()


def follow(conn: Any, step: int, written: float) -> tuple[float, float, bool]:
    """Seconds from ``written`` to safe and to verified on ``pfs``; whether peers made it safe first."""
    safe = pfs = None
    peers_first = False
    deadline = written + LIMIT
    while pfs is None or safe is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"step {step}: not safe and on pfs within {LIMIT:.0f} s")
        row = conn.execute(STEP, (step,)).fetchone()
        if row is not None and conn.execute(PARTS, (row[0],)).fetchone()[0] == NODES:
            now = time.monotonic() - written
            on_pfs = conn.execute(ON_PFS, (row[0],)).fetchone()[0] > 0
            if safe is None and conn.execute(UNSAFE_PARTS, (row[0],)).fetchone()[0] == 0:
                safe, peers_first = now, not on_pfs
            if pfs is None and on_pfs:
                pfs = now
        time.sleep(POLL)
    return safe, pfs, peers_first


def deletable_at_once(fleet: Fleet) -> None:
    """Give every node's POSIX tiers ``delete_delay: 0`` (before the fleet starts)."""
    for node in fleet.nodes:
        path = node.root / "tierd.yaml"
        data = yaml.safe_load(path.read_text())
        for tier in data["tiers"]:
            if tier["kind"] == "posix":
                tier["delete_delay"] = 0
        path.write_text(yaml.safe_dump(data))


def drop_step(fleet: Fleet, conn: Any, step: int) -> None:
    """Delete the step on every tier through the API; return once no file of it is left.

    The other nodes' retention is woken by an unpin (a no-op on a step never pinned), so each
    removes its own tier-0 part now rather than at its next pass.
    """
    checkpoint_id = conn.execute(STEP, (step,)).fetchone()[0]
    reason = {"reason": "bench: room for the next round"}
    for index, node in enumerate(fleet.nodes):
        path = f"{node.url}/v1/checkpoints/{checkpoint_id}" + ("" if index == 0 else "/pin")
        httpx.delete(path, params=reason, headers=node.headers, timeout=30).raise_for_status()
    places = [n.watch_dir / f"step_{step}" for n in fleet.nodes]
    deadline = time.monotonic() + LIMIT
    while any(p.exists() and any(f.is_file() for f in p.rglob("*")) for p in places) or any(
        fleet.pfs.rglob(f"step_{step}/*")
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"step {step}: not deleted within {LIMIT:.0f} s")
        time.sleep(0.5)


def _transactions(conn: Any) -> int:
    """Transactions the catalog database committed or rolled back so far (``pg_stat_database``)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return int(row[0])


def _statements(conn: Any) -> list[tuple[int, str]]:
    """The statements run since the reset, most run first: (calls, the statement's start)."""
    rows = conn.execute(
        "SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
        "AND query NOT LIKE '%pg_stat%' ORDER BY calls DESC"
    ).fetchall()
    return [(int(calls), str(query)) for calls, query in rows]


def _cpu(fleet: Fleet) -> float:
    return sum(_cpu_by_node(fleet).values())


def _cpu_by_node(fleet: Fleet) -> dict[str, float]:
    return {node.name: sum(daemon_cpu(node.pid)) for node in fleet.nodes}


def _run(root: Any, url: str) -> None:
    part_bytes = env_int("TIERD_BENCH_PEER_BYTES", 64 * 1024 * 1024 if quick() else GIB)
    rounds = env_int("TIERD_BENCH_PEER_ROUNDS", 3)
    spec = FleetSpec(
        nodes=NODES,
        with_s3=False,
        watch={"nodes": NODES, "format": "dcp", "settle_seconds": 1},
        peer={},
        domains=2,
        exec=True,
    )
    fleet = build_fleet(root / "fleet", url, spec)
    deletable_at_once(fleet)
    load = OtherLoad()
    safe: list[float] = []
    pfs: list[float] = []
    via_peers = 0
    load_before = round(os.getloadavg()[0], 2)
    try:
        fleet.start(timeout=300)
        ready = max(vm_hwm_bytes(node.pid) or 0 for node in fleet.nodes)
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            busy_cpu = 0.0
            nodes_before = _cpu_by_node(fleet)
            for step in range(1, rounds + 1):
                cpu_before = _cpu(fleet)
                written = write_step(fleet, step, part_bytes)
                seconds_safe, seconds_pfs, peers_first = follow(conn, step, written)
                busy_cpu += _cpu(fleet) - cpu_before
                note(f"peer: step {step} safe in {seconds_safe:.2f}s, on pfs in {seconds_pfs:.2f}s")
                drop_step(fleet, conn, step)
                safe.append(seconds_safe)
                pfs.append(seconds_pfs)
                via_peers += peers_first
            by_node = {k: round(v - nodes_before[k], 2) for k, v in _cpu_by_node(fleet).items()}
            time.sleep(IDLE / 2)  # the last drops and deletes settle
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
            idle_before, transactions_before = _cpu(fleet), _transactions(conn)
            time.sleep(IDLE)
            idle_cpu = _cpu(fleet) - idle_before
            idle_transactions = _transactions(conn) - transactions_before - 1  # less the reading one
            statements = _statements(conn)
        peaks = {node.name: vm_hwm_bytes(node.pid) or 0 for node in fleet.nodes}
        peak = max(peaks.values())
        problems = {n.name: n.problems()[-3:] for n in fleet.nodes if n.problems()}
    finally:
        fleet.stop()
    copy = copy_cost(root / "copy", min(part_bytes, COPY_BYTES), NODES)
    gib = rounds * NODES * part_bytes / GIB
    emit(
        "peer_safe",
        percentile(safe, 50),
        "pfs: seconds from the last shard written to the step verified on the parallel-FS tier",
        percentile(pfs, 50),
        peak_rss=peak,
        ready_rss_bytes=ready,
        nodes=NODES,
        rounds=rounds,
        part_bytes=part_bytes,
        safe_p50_seconds=round(percentile(safe, 50), 3),
        safe_p99_seconds=round(percentile(safe, 99), 3),
        pfs_p50_seconds=round(percentile(pfs, 50), 3),
        pfs_p99_seconds=round(percentile(pfs, 99), 3),
        via_peers=via_peers,
        daemon_cpu_seconds_per_gib=round(busy_cpu / gib, 3),
        cpu_seconds_by_node=by_node,
        peak_rss_bytes_by_node=peaks,
        **copy,
        idle_cpu_seconds=round(idle_cpu, 3),
        idle_catalog_transactions_per_node_minute=round(idle_transactions / NODES * 60 / IDLE, 1),
        idle_statements_per_node_minute=round(sum(c for c, _ in statements) / NODES * 60 / IDLE, 1),
        idle_most_run_statements=statements[:10],
        idle_seconds=IDLE,
        daemon_problems=problems,
        loadavg_1m_before=load_before,
        loadavg_1m_after=round(os.getloadavg()[0], 2),
        tierd_source=tierd_source(),
        **load.result(),
    )


def main() -> None:
    if not pg_available():
        note("peer: skipped, PostgreSQL is not installed")
        return
    root = bench_root() / "peer"
    shutil.rmtree(root, ignore_errors=True)  # a step left by an earlier run would be detected again
    with postgres_server(None, durable=True) as server:
        PostgresSwitch.of(server).set_and_restart(shared_preload_libraries="pg_stat_statements")
        _run(root, server.new_database())


if __name__ == "__main__":
    main()

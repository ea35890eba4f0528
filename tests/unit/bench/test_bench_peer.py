"""bench_peer's own parts: registered, and a step's parts counted unsafe until verified elsewhere."""

from __future__ import annotations

from bench import __main__ as cli
from bench import bench_peer
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Part, PartReplica, ReplicaState, Run
from tierd.daemon.catalog.peer_copies import mark_peer_copy


def test_it_is_a_benchmark_of_its_own() -> None:
    assert "peer" in cli.available()
    assert "peer" not in cli.comparable()  # one tree's fleet: no --against


def test_a_part_is_unsafe_until_verified_on_another_node_or_the_pfs(pg_db: Database) -> None:
    with pg_db.session() as s:
        run = Run(name="bench")
        s.add(run)
        s.flush()
        step = Checkpoint(run_id=run.id, step=1, path="bench/step_1", format="dcp", state="complete")
        s.add(step)
        s.flush()
        parts = [Part(checkpoint_id=step.id, node=f"node{i}") for i in range(3)]
        s.add_all(parts)
        s.flush()
        ids = [p.id for p in parts]
        checkpoint_id = step.id

    def unsafe() -> int:
        with pg_db.engine.connect() as conn:
            raw = conn.connection.driver_connection
            assert raw is not None
            return int(raw.execute(bench_peer.UNSAFE_PARTS, (checkpoint_id,)).fetchone()[0])

    assert unsafe() == 3
    with pg_db.session() as s:
        mark_peer_copy(s, ids[0], "node1", ReplicaState.VERIFIED)
        mark_peer_copy(s, ids[1], "node1", ReplicaState.VERIFIED)  # its own node: no safety
        s.add(PartReplica(part_id=ids[2], tier="pfs", state="verified"))
    assert unsafe() == 1

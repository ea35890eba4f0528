"""Per-part copies out of node-local tier 0 (SQLite and PostgreSQL), one pipeline per node.

Three nodes record a real DCP step spread over their own tier-0 directories, then each runs
its own PipelineService on the one catalog: a node's part can only be copied by that node
(no other node has its files), the shared tiers end with the union, and a shared tier's
replica is verified only once every part is there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.fixtures.pipeline_run import FAST, run_pipeline_until
from tests.unit.detect.fleet import dcp_across, node_context, reconcile, step_row
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Checkpoint, Job, Part, Replica
from tierd.daemon.catalog.part_replicas import Settled, mark_part_verified, part_replica, settle_parts
from tierd.daemon.catalog.retention import load_retention_rows
from tierd.daemon.catalog.runs import latest_checkpoint, run_summaries
from tierd.daemon.context import Context
from tierd.daemon.pipeline.scheduler import schedule_pass
from tierd.daemon.pipeline.service import PipelineService
from tierd.errors import NotFound


def _tier_states(db: Database, step: int) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    row = step_row(db, step)
    assert row is not None
    parts = {p.node: {r.tier: r.state for r in p.replicas} for p in row.parts}
    return {r.tier: r.state for r in row.replicas}, parts


async def _run(
    nodes: list[Context], until: Callable[[], bool], check: Callable[[], None], then_passes: int = 0
) -> None:
    services = [PipelineService(ctx, FAST) for ctx in nodes]
    await run_pipeline_until(services, until, timeout=60, check=check, then_passes=then_passes)


@pytest.fixture
async def three(db: Database, tmp_path: Path) -> tuple[list[Context], list[str]]:
    nodes = [node_context(db, tmp_path, f"n{i}", nodes=3) for i in range(3)]
    names = dcp_across(tmp_path / "scratch", nodes, 7)
    for ctx in nodes:
        await reconcile(ctx)
    row = step_row(db, 7)
    assert row is not None
    assert row.state == "complete"
    return nodes, names


def _every_part_before_the_step(db: Database) -> Callable[[], None]:
    def check() -> None:
        steps, parts = _tier_states(db, 7)
        for tier, state in steps.items():
            if state == "verified":
                assert all(p[tier] == "verified" for p in parts.values()), (
                    f"{tier} verified before every part"
                )

    return check


async def test_each_node_copies_its_part_and_the_shared_tiers_get_the_union(
    db: Database, three: tuple[list[Context], list[str]], tmp_path: Path
) -> None:
    nodes, names = three
    check = _every_part_before_the_step(db)
    await _run(nodes, lambda: _tier_states(db, 7)[0]["replica"] == "verified", check)
    steps, parts = _tier_states(db, 7)
    assert set(steps.values()) == {"verified"}
    assert all(set(p.values()) == {"verified"} for p in parts.values())
    for tier in ("pfs", "object", "replica"):
        assert sorted(p.name for p in (tmp_path / "shared" / tier / "demo" / "step_7").iterdir()) == names
    with db.read_session() as session:
        jobs = session.scalars(select(Job).order_by(Job.id)).all()
        hops = sorted((j.dst_tier, j.part_id is not None, j.state) for j in jobs)
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "part_verified")).all()
        verified_at = {e.detail["part"]: e.at for e in events if e.tier == "pfs"}
    assert hops == [
        ("object", False, "done"),
        ("pfs", True, "done"),
        ("pfs", True, "done"),
        ("pfs", True, "done"),
        ("replica", False, "done"),
    ]
    row = step_row(db, 7)
    assert row is not None
    marker = next(p.id for p in row.parts if p.node == "n0")  # holds .metadata, written last
    assert verified_at[marker] == max(verified_at.values()), "the marker's part landed before the data"


async def test_a_step_missing_a_part_on_a_shared_tier_is_not_durable_there(
    db: Database, three: tuple[list[Context], list[str]]
) -> None:
    nodes, _ = three
    # Once n1's part is in, two more passes of each pipeline: nothing more may happen.
    await _run(
        nodes[:2], lambda: _tier_states(db, 7)[1]["n1"]["pfs"] == "verified", lambda: None, then_passes=2
    )
    steps, parts = _tier_states(db, 7)
    assert steps["pfs"] != "verified"
    assert (parts["n0"]["pfs"], parts["n2"]["pfs"]) == ("pending", "pending"), "the marker's part went first"
    with db.read_session() as session:
        with pytest.raises(NotFound):
            latest_checkpoint(session, "demo", tiers={"pfs", "object", "replica"})
        (summary,) = run_summaries(session)
        assert "pfs" not in summary.newest_verified_step
        (retained,) = load_retention_rows(session)  # what every retention decision reads
        assert retained.replicas["pfs"] in ("pending", "copying")

    await _run(nodes[2:], lambda: _tier_states(db, 7)[1]["n2"]["pfs"] == "verified", lambda: None)
    await _run(
        nodes[:1], lambda: _tier_states(db, 7)[0]["pfs"] == "verified", _every_part_before_the_step(db)
    )
    with db.read_session() as session:
        assert latest_checkpoint(session, "demo", tiers={"pfs"}) == step_row(db, 7).id  # type: ignore[union-attr]


async def test_a_step_whose_last_part_daemon_died_before_settling_is_verified_by_a_pass(
    db: Database, three: tuple[list[Context], list[str]]
) -> None:
    """Every part verified on pfs, the step's replica still ``copying``: the last part's daemon
    died between recording its part and looking at the step. The next scheduler pass settles it.
    """
    with db.session() as session:
        row = session.scalars(select(Checkpoint).where(Checkpoint.step == 7)).one()
        for part in session.scalars(select(Part).where(Part.checkpoint_id == row.id)):
            mark_part_verified(part_replica(session, part.id, "pfs"), part.total_bytes)  # type: ignore[arg-type]
        replica = session.scalars(
            select(Replica).where(Replica.checkpoint_id == row.id, Replica.tier == "pfs")
        ).one()
        replica.state = "copying"
        cid = row.id
    tiers = [t.name for t in three[0][0].config.tiers]
    assert schedule_pass(db, tiers, node_local=["nvme"]) == 0
    assert _tier_states(db, 7)[0]["pfs"] == "copying", "settled without knowing where the replica is"
    schedule_pass(db, tiers, node_local=["nvme"], locate=lambda tier, path: f"/{tier}/{path}")
    with db.read_session() as session:
        replica = session.scalars(
            select(Replica).where(Replica.checkpoint_id == cid, Replica.tier == "pfs")
        ).one()
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "replica_verified")).all()
    assert (replica.state, replica.location) == ("verified", "/pfs/demo/step_7")
    assert [(e.checkpoint_id, e.tier) for e in events] == [(cid, "pfs")]


async def test_each_parts_verification_counts_the_parts_left_to_verify(
    db: Database, three: tuple[list[Context], list[str]]
) -> None:
    """Two or more left: nothing new to schedule (the pipeline only claims); the last settles the step."""
    with db.read_session() as session:
        cid = session.scalars(select(Checkpoint.id).where(Checkpoint.step == 7)).one()
        part_ids = list(session.scalars(select(Part.id).where(Part.checkpoint_id == cid).order_by(Part.id)))
    seen = []
    for part_id in part_ids:
        with db.session() as session:
            mark_part_verified(part_replica(session, part_id, "pfs"), 1)  # type: ignore[arg-type]
        seen.append(settle_parts(db, cid, "pfs", "/pfs/demo/step_7", actor="test"))
    assert seen == [Settled(2), Settled(1), Settled(0, settled=True)]
    assert settle_parts(db, cid, "pfs", "/pfs/demo/step_7", actor="test") == Settled(0)  # already
    assert settle_parts(db, cid, "object", "/object/demo/step_7", actor="test") == Settled(3)
    assert _tier_states(db, 7)[0]["pfs"] == "verified"

"""A multi-node step leaving node-local tier 0: each node deletes its own part (SQLite and PostgreSQL).

Three nodes record two real DCP steps spread over their own tier-0 directories, copy them
to the shared tiers with their own pipelines, then each runs its own retention service
(``keep_last: 1`` on tier 0): every node removes only its part of the old step, and the
step leaves tier 0 only when every part has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select

from tests.fixtures.parts_fleet import FleetCopy, copied_fleet, part_states, step_dir
from tests.unit.detect.fleet import step_row
from tierd.daemon.backends import make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Checkpoint, utcnow
from tierd.daemon.catalog.part_deletions import begin_part_deletion, start_part_removal
from tierd.daemon.catalog.replica_deletions import (
    Origin,
    schedule_checkpoint_deletion,
    schedule_replica_deletion,
    undelete,
)
from tierd.daemon.catalog.retention import load_retention_rows
from tierd.daemon.context import Context
from tierd.daemon.retention.eviction import eviction_candidates
from tierd.daemon.retention.service import RetentionService


def _retention(ctx: Context) -> RetentionService:
    return RetentionService(ctx, {t.name: make_backend(t) for t in ctx.config.tiers})


async def test_each_node_deletes_its_own_part_and_the_step_leaves_tier_0_with_the_last(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    n0, n1, n2 = parts_nodes
    report = await _retention(n0).run_pass()
    assert [o.result for o in report.outcomes] == ["deleted"]
    assert not step_dir(n0, 1).exists()
    assert step_dir(n1, 1).exists(), "another node's files are theirs"
    assert step_dir(n2, 1).exists()
    assert part_states(parts_db, 1) == ("deleting", {"n0": "deleted", "n1": "deleting", "n2": "deleting"})

    await _retention(n1).run_pass()  # n2 is down meanwhile: its part stays deleting
    assert not step_dir(n1, 1).exists()
    assert step_dir(n2, 1).exists()
    assert part_states(parts_db, 1) == ("deleting", {"n0": "deleted", "n1": "deleted", "n2": "deleting"})

    await _retention(n2).run_pass()  # back: it finds the deletion begun and finishes its part
    assert not step_dir(n2, 1).exists()
    assert part_states(parts_db, 1) == ("deleted", {"n0": "deleted", "n1": "deleted", "n2": "deleted"})
    assert part_states(parts_db, 2) == ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})
    assert all(step_dir(ctx, 2).exists() for ctx in parts_nodes)
    with parts_db.read_session() as session:
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "part_deleted")).all()
        assert sorted(e.detail["node"] for e in events) == ["n0", "n1", "n2"]
    row = step_row(parts_db, 1)
    assert row is not None
    assert {r.tier: r.state for r in row.replicas}["pfs"] == "verified"


async def test_a_step_pinned_after_one_node_deleted_its_part_is_kept_by_the_others(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    n0, n1, n2 = parts_nodes
    await _retention(n0).run_pass()
    with parts_db.session() as session:
        step = session.scalars(select(Checkpoint).where(Checkpoint.step == 1)).one()
        step.pinned = True
    report = await _retention(n1).run_pass()
    assert [(o.result, o.detail) for o in report.outcomes] == [("refused", "pinned")]
    assert step_dir(n1, 1).exists()
    assert step_dir(n2, 1).exists()
    # n0's part is gone, so the step's parts_fleet on tier 0 is broken; the others' parts are kept.
    assert part_states(parts_db, 1) == ("failed", {"n0": "deleted", "n1": "verified", "n2": "verified"})
    await _retention(n2).run_pass()
    assert step_dir(n2, 1).exists()


@pytest.fixture(params=["sqlite", "postgresql"])
async def slow(request: pytest.FixtureRequest) -> AsyncIterator[FleetCopy]:
    """A fleet whose deletions wait an hour, on each catalog backend."""
    fleet = await copied_fleet(request, request.param, "1h")
    yield fleet
    fleet.db.dispose()


async def test_undelete_before_the_delay_gives_back_every_part(slow: FleetCopy) -> None:
    db = slow.db
    n0, n1, n2 = slow.nodes
    for ctx in (n0, n1, n2):
        await _retention(ctx).run_pass()
    assert part_states(db, 1) == ("deleting", {"n0": "verified", "n1": "verified", "n2": "verified"})
    with db.session() as session:
        step = session.scalars(select(Checkpoint).where(Checkpoint.step == 1)).one()
        assert undelete(session, step.id, actor="test", reason="still needed") == ["nvme"]
    for ctx in (n0, n1, n2):
        await _retention(ctx).run_pass()
        assert step_dir(ctx, 1).exists()
    assert part_states(db, 1) == ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})


async def test_an_operators_delete_removes_every_nodes_part(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    with parts_db.session() as session:
        step = session.scalars(select(Checkpoint).where(Checkpoint.step == 2)).one()
        tiers = schedule_checkpoint_deletion(
            session, step.id, delays={}, now=utcnow(), actor="api:test", reason="bad run"
        )
        assert "nvme" in tiers
    for ctx in parts_nodes:
        await _retention(ctx).run_pass()
        assert not step_dir(ctx, 2).exists()
    assert part_states(parts_db, 2) == ("deleted", {"n0": "deleted", "n1": "deleted", "n2": "deleted"})


async def test_a_node_without_a_part_sees_nothing_of_the_step_on_its_own_tier(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    """What retention and eviction plan from: a node evicts only steps it holds a part of."""
    with parts_db.read_session() as session:
        holder = load_retention_rows(session, node="n1", node_local=["nvme"])
        outsider = load_retention_rows(session, node="n3", node_local=["nvme"])
    assert [sorted(r.replicas) for r in holder] == [["nvme", "object", "pfs", "replica"]] * 2
    assert [sorted(r.replicas) for r in outsider] == [["object", "pfs", "replica"]] * 2


async def test_eviction_on_a_node_counts_only_its_own_part(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    n1 = parts_nodes[1]
    snap = _retention(n1).snapshot()  # PostgreSQL: n1's view; SQLite: one node sees every step whole
    rules = _retention(n1).deleter.rules
    eviction = eviction_candidates(snap.checkpoints, "nvme", rules, bytes_to_free=1)
    (candidate,) = eviction.candidates  # step 1 (step 2 is the newest)
    row = step_row(parts_db, 1)
    assert row is not None
    own = next(p.total_bytes for p in row.parts if p.node == "n1")
    assert candidate.size_bytes == (row.total_bytes if parts_db.is_sqlite else own)
    assert own < row.total_bytes


async def test_a_removal_cut_short_then_refused_fails_that_nodes_part_only(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    """A node that died mid-removal finds the step pinned when it comes back: its part is broken."""
    n0 = parts_nodes[0]
    row = step_row(parts_db, 1)
    assert row is not None
    part = next(p.id for p in row.parts if p.node == "n0")
    replica = next(r.id for r in row.replicas if r.tier == "nvme")
    with parts_db.session() as session:
        assert schedule_replica_deletion(
            session,
            row.id,
            "nvme",
            delete_after=utcnow(),
            origin=Origin.RETENTION,
            reason="keep_last",
            policy="keep_last",
            actor="test",
        )
        assert begin_part_deletion(session, replica, part, utcnow())
        start_part_removal(session, part, "nvme")
    with parts_db.session() as session:
        session.scalars(select(Checkpoint).where(Checkpoint.id == row.id)).one().pinned = True
    report = await _retention(n0).run_pass()
    assert [(o.result, o.detail) for o in report.outcomes] == [("refused", "pinned")]
    assert part_states(parts_db, 1) == ("failed", {"n0": "failed", "n1": "verified", "n2": "verified"})

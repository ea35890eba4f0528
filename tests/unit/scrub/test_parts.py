"""Scrubbing and verifying a step written by several nodes on node-local tier 0 (SQLite and PostgreSQL).

Each node re-checks only its own part's files there (another node's files are on that node,
not missing), on its own schedule; a bad file fails that node's part, not the others'.
"""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures.parts_fleet import FleetCopy, node_context, part_states, step_dir
from tests.unit.detect.fleet import step_row
from tierd.daemon.backends import make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.scrub import scrub_progress
from tierd.daemon.context import Context
from tierd.daemon.scrub import ScrubService

LATER = utcnow() + timedelta(days=2)
ALL_VERIFIED = ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})


def _scrub(ctx: Context) -> ScrubService:
    return ScrubService(ctx, {t.name: make_backend(t) for t in ctx.config.tiers}, now=lambda: LATER)


def _checked(db: Database, step: int) -> dict[str, bool]:
    row = step_row(db, step)
    assert row is not None
    return {p.node: next(r.checked_at is not None for r in p.replicas if r.tier == "nvme") for p in row.parts}


async def test_each_node_scrubs_its_own_part_on_its_own_schedule(
    parts_db: Database, parts_nodes: list[Context]
) -> None:
    n0, n1, n2 = parts_nodes
    assert await _scrub(n0).check_round("nvme") == 2  # its parts of steps 1 and 2
    assert part_states(parts_db, 1) == ALL_VERIFIED, "another node's files are elsewhere, not missing"
    assert _checked(parts_db, 1) == {"n0": True, "n1": False, "n2": False}
    assert await _scrub(n0).check_round("nvme") == 0
    with parts_db.read_session() as session:
        mine = scrub_progress(session, "nvme", LATER - timedelta(hours=1), node="n0")
        theirs = scrub_progress(session, "nvme", LATER - timedelta(hours=1), node="n1")
    assert (mine.checked, mine.total, theirs.checked, theirs.total) == (2, 2, 0, 2)
    assert await _scrub(n1).check_round("nvme") == 2  # n0's check does not count as n1's
    assert await _scrub(n2).check_round("nvme") == 2
    assert _checked(parts_db, 2) == {"n0": True, "n1": True, "n2": True}
    assert part_states(parts_db, 2) == ALL_VERIFIED


async def test_a_bad_file_fails_only_its_nodes_part(parts_db: Database, parts_nodes: list[Context]) -> None:
    n1 = parts_nodes[1]
    shard = next(step_dir(n1, 2).iterdir())
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert await _scrub(n1).check_round("nvme") == 2
    assert part_states(parts_db, 2) == ("failed", {"n0": "verified", "n1": "failed", "n2": "verified"})
    assert part_states(parts_db, 1) == ALL_VERIFIED


async def test_verify_checks_this_nodes_part_and_says_where_the_others_are(
    parts_db: Database, parts_fleet: FleetCopy
) -> None:
    parts_nodes = parts_fleet.nodes
    row = step_row(parts_db, 2)
    assert row is not None
    outcomes = await _scrub(parts_nodes[1]).verify(row.id, actor="test")
    nvme = next(o for o in outcomes if o.tier == "nvme")
    assert nvme.result == "ok"
    assert nvme.detail == "this node's part (n1) checked; the parts of n0, n2 are not on this node"
    assert {o.tier: o.result for o in outcomes if o.tier != "nvme"} == dict.fromkeys(
        ("pfs", "object", "replica"), "ok"
    )
    outsider = node_context(parts_db, parts_fleet.root, "n3", "0")
    (skipped, *_) = await _scrub(outsider).verify(row.id, actor="test")
    assert (skipped.tier, skipped.result) == ("nvme", "skipped")
    assert skipped.detail == "no part on this node: the parts of n0, n1, n2 are on their nodes"
    assert part_states(parts_db, 2) == ALL_VERIFIED

"""A multi-node step leaving node-local tier 0: each node deletes its own part (SQLite and PostgreSQL).

Three nodes record two real DCP steps spread over their own tier-0 directories, copy them
to the shared tiers with their own pipelines, then each runs its own retention service
(``keep_last: 1`` on tier 0): every node removes only its part of the old step, and the
step leaves tier 0 only when every part has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import posix_config_dict
from tests.unit.detect.fleet import dcp_across, reconcile, step_row
from tierd.config import Config
from tierd.daemon.backends import make_backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.deletions import undelete
from tierd.daemon.catalog.models import AuditEvent, Checkpoint
from tierd.daemon.context import Context
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.retry import Backoff
from tierd.daemon.pipeline.service import PipelineService
from tierd.daemon.retention.service import RetentionService

FAST = PipelineOptions(
    poll_interval=0.02,
    lease_seconds=30,
    renew_interval=0.05,
    progress_interval=0.02,
    file_attempts=3,
    file_backoff=Backoff(base=0.001, cap=0.01),
    job_backoff=Backoff(base=0.05, cap=0.05),
)
SHARED = ("pfs", "object", "replica")


def _node(db: Database, root: Path, node: str, delay: str) -> Context:
    """Node ``node``: its own tier 0 keeping the newest step (after ``delay``), three shared tiers."""
    shared = posix_config_dict(root / "shared")
    own = root / node / "nvme"
    nvme = {"name": "nvme", "kind": "posix", "path": str(own), "retention": {"keep_last": 1}}
    tiers = [{**nvme, "delete_delay": delay}, *shared["tiers"][1:]]
    for tier in tiers:
        Path(tier["path"]).mkdir(parents=True, exist_ok=True)
    watch = {"path": str(own / "demo"), "run": "demo", "format": "auto", "settle_seconds": 0.5, "nodes": 3}
    data: dict[str, Any] = posix_config_dict(root / node, node=node, tiers=tiers, watch=[watch])
    return Context(config=Config(**data), db=db)


def _states(db: Database, step: int) -> tuple[str, dict[str, str]]:
    """The step's tier-0 replica state and each node's part state there."""
    row = step_row(db, step)
    assert row is not None
    nvme = next(r.state for r in row.replicas if r.tier == "nvme")
    return nvme, {p.node: next(r.state for r in p.replicas if r.tier == "nvme") for p in row.parts}


async def _until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(60):
        while not done():
            await asyncio.sleep(0.02)


async def _fleet(db: Database, root: Path, delay: str) -> list[Context]:
    """Three nodes with steps 1 and 2 recorded and verified on every shared tier."""
    nodes = [_node(db, root, f"n{i}", delay) for i in range(3)]
    for step in (1, 2):
        dcp_across(root / "scratch", nodes, step)
        for ctx in nodes:
            await reconcile(ctx)
    services = [PipelineService(ctx, FAST) for ctx in nodes]
    for service in services:
        await service.start()

    def copied() -> bool:
        rows = [step_row(db, step) for step in (1, 2)]
        return all(r is not None and all(x.state == "verified" for x in r.replicas) for r in rows)

    try:
        await _until(copied)
    finally:
        for service in services:
            await service.stop(5)
    return nodes


def _retention(ctx: Context) -> RetentionService:
    return RetentionService(ctx, {t.name: make_backend(t) for t in ctx.config.tiers})


def _step_dir(ctx: Context, step: int) -> Path:
    return ctx.config.watch[0].path / f"step_{step}"


@pytest.fixture
async def fleet(db: Database, tmp_path: Path) -> list[Context]:
    return await _fleet(db, tmp_path, "0")


async def test_each_node_deletes_its_own_part_and_the_step_leaves_tier_0_with_the_last(
    db: Database, fleet: list[Context]
) -> None:
    n0, n1, n2 = fleet
    report = await _retention(n0).run_pass()
    assert [o.result for o in report.outcomes] == ["deleted"]
    assert not _step_dir(n0, 1).exists()
    assert _step_dir(n1, 1).exists(), "another node's files are theirs"
    assert _step_dir(n2, 1).exists()
    assert _states(db, 1) == ("deleting", {"n0": "deleted", "n1": "deleting", "n2": "deleting"})

    await _retention(n1).run_pass()  # n2 is down meanwhile: its part stays deleting
    assert not _step_dir(n1, 1).exists()
    assert _step_dir(n2, 1).exists()
    assert _states(db, 1) == ("deleting", {"n0": "deleted", "n1": "deleted", "n2": "deleting"})

    await _retention(n2).run_pass()  # back: it finds the deletion begun and finishes its part
    assert not _step_dir(n2, 1).exists()
    assert _states(db, 1) == ("deleted", {"n0": "deleted", "n1": "deleted", "n2": "deleted"})
    assert _states(db, 2) == ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})
    assert all(_step_dir(ctx, 2).exists() for ctx in fleet)
    with db.read_session() as session:
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "part_deleted")).all()
        assert sorted(e.detail["node"] for e in events) == ["n0", "n1", "n2"]
    row = step_row(db, 1)
    assert row is not None
    assert {r.tier: r.state for r in row.replicas}["pfs"] == "verified"


async def test_a_step_pinned_after_one_node_deleted_its_part_is_kept_by_the_others(
    db: Database, fleet: list[Context]
) -> None:
    n0, n1, n2 = fleet
    await _retention(n0).run_pass()
    with db.session() as session:
        step = session.scalars(select(Checkpoint).where(Checkpoint.step == 1)).one()
        step.pinned = True
    report = await _retention(n1).run_pass()
    assert [(o.result, o.detail) for o in report.outcomes] == [("refused", "pinned")]
    assert _step_dir(n1, 1).exists()
    assert _step_dir(n2, 1).exists()
    # n0's part is gone, so the step's copy on tier 0 is broken; the others' parts are kept.
    assert _states(db, 1) == ("failed", {"n0": "deleted", "n1": "verified", "n2": "verified"})
    await _retention(n2).run_pass()
    assert _step_dir(n2, 1).exists()


async def test_undelete_before_the_delay_gives_back_every_part(db: Database, tmp_path: Path) -> None:
    n0, n1, n2 = await _fleet(db, tmp_path, "1h")
    for ctx in (n0, n1, n2):
        await _retention(ctx).run_pass()
    assert _states(db, 1) == ("deleting", {"n0": "verified", "n1": "verified", "n2": "verified"})
    with db.session() as session:
        step = session.scalars(select(Checkpoint).where(Checkpoint.step == 1)).one()
        assert undelete(session, step.id, actor="test", reason="still needed") == ["nvme"]
    for ctx in (n0, n1, n2):
        await _retention(ctx).run_pass()
        assert _step_dir(ctx, 1).exists()
    assert _states(db, 1) == ("verified", {"n0": "verified", "n1": "verified", "n2": "verified"})

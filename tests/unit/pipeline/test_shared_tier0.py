"""A shared tier 0 watched by three daemons (SQLite and PostgreSQL): recorded once, copied once.

Every daemon sees the same directory. The recording is claimed through the catalog, so one
daemon hashes and records the step; each hop is one job claimed by one daemon through the
catalog's leases, so every file reaches each tier exactly once (counted on the way in).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tests.conftest import posix_config_dict
from tests.fixtures.pipeline_run import FAST, run_pipeline_until
from tests.unit.detect.fleet import age, save_dcp_files, step_row
from tierd.config import Config, PosixTier
from tierd.daemon.backends.base import (
    Backend,
    ObjectInfo,
    WriteBatch,
    WriteRequest,
)
from tierd.daemon.backends.posix.backend import PosixBackend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Job
from tierd.daemon.context import Context
from tierd.daemon.detect.service import DetectService
from tierd.daemon.pipeline.service import PipelineService


class Counting(PosixBackend):
    """A POSIX tier counting the files written into it (by every daemon of the test)."""

    def __init__(self, *args: Any, writes: Counter[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes = writes

    def batch(self) -> WriteBatch:
        """No staging: every file goes through ``write``."""
        return WriteBatch(self)

    async def write(self, request: WriteRequest) -> ObjectInfo:
        self.writes[f"{self.name}:{request.relpath}"] += 1
        return await super().write(request)


def _daemon(db: Database, root: Path, node: str) -> Context:
    data = posix_config_dict(root, node=node)
    data["tiers"][0]["shared"] = True
    data["watch"][0]["settle_seconds"] = 0.5
    for tier in data["tiers"]:
        Path(tier["path"]).mkdir(parents=True, exist_ok=True)
    return Context(config=Config(**data), db=db)


async def test_three_daemons_on_one_directory_record_once_and_copy_each_file_once(
    db: Database, tmp_path: Path
) -> None:
    daemons = [_daemon(db, tmp_path, f"n{i}") for i in range(3)]
    step = daemons[0].config.watch[0].path / "step_5"
    save_dcp_files(step, 5, 4)
    age(step)
    await asyncio.gather(*(DetectService(ctx).reconcile() for ctx in daemons))
    for ctx in daemons:  # the others' second look: recorded meanwhile, nothing to hash
        await DetectService(ctx).reconcile()
    row = step_row(db, 5)
    assert row is not None
    assert row.state == "complete"
    assert len(row.parts) == 1
    with db.read_session() as session:
        recorded = session.scalars(select(AuditEvent).where(AuditEvent.action == "detected")).all()
    assert len(recorded) == 1, "the step was recorded by more than one daemon"

    writes: Counter[str] = Counter()
    services = []
    for ctx in daemons:
        tier0, *rest = ctx.config.tiers
        assert isinstance(tier0, PosixTier)
        backends: dict[str, Backend] = {t.name: Counting(t, writes=writes) for t in rest}
        backends[tier0.name] = PosixBackend(tier0)
        services.append(PipelineService(ctx, FAST, backends=backends))

    def copied() -> bool:
        row = step_row(db, 5)
        return row is not None and {r.state for r in row.replicas} == {"verified"}

    await run_pipeline_until(services, copied, timeout=60)
    files = sorted(p.name for p in step.iterdir())
    expected = {f"{tier}:demo/step_5/{name}" for tier in ("pfs", "object", "replica") for name in files}
    assert set(writes) == expected
    assert set(writes.values()) == {1}, f"a file was copied more than once: {writes}"
    with db.read_session() as session:
        jobs = session.scalars(select(Job)).all()
    assert sorted((j.dst_tier, j.state) for j in jobs) == [
        ("object", "done"),
        ("pfs", "done"),
        ("replica", "done"),
    ]

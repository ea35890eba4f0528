"""The DetectService in an event loop: the watchdog path, the start-up reconcile, changes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import select
from structlog.testing import capture_logs

from tests.unit.detect.layouts import LAYOUTS, crc64_b64, write_torch
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Run
from tierd.daemon.context import Context
from tierd.daemon.detect.formats import dcp
from tierd.daemon.detect.service import DetectService

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
WAIT_SECONDS = 15.0


def _steps(db: Database) -> dict[int, Checkpoint]:
    with db.read_session() as session:
        rows = session.scalars(select(Checkpoint).join(Checkpoint.run).where(Run.name == "demo")).all()
        return {r.step: r for r in rows}


async def _until(predicate: Callable[[], Any], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECONDS
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def ctx(sqlite_db: Database, make_config: Callable[..., Config]) -> Context:
    return Context(config=make_config(), db=sqlite_db)


@pytest.fixture
async def service(ctx: Context) -> AsyncIterator[DetectService]:
    svc = DetectService(ctx)
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop(5)


async def test_step_written_after_start_is_recorded(service: DetectService, ctx: Context) -> None:
    assert ctx.watcher_running
    root = ctx.config.watch[0].path
    await service.reconciled.wait()
    tmp = write_torch(root / "model_step100.pt.tmp", {"w": torch.randn(512)})
    tmp.rename(root / "model_step100.pt")
    await _until(lambda: 100 in _steps(ctx.db), "step 100 to be recorded")
    with ctx.db.read_session() as session:
        row = session.scalars(select(Checkpoint).where(Checkpoint.step == 100)).one()
        assert row.format == "torch_save"
        assert [(f.relpath, f.checksum) for f in row.files] == [
            ("demo/model_step100.pt", crc64_b64(root / "model_step100.pt"))
        ]


async def test_dcp_commit_after_start_is_recorded_once(service: DetectService, ctx: Context) -> None:
    root = ctx.config.watch[0].path
    await service.reconciled.wait()
    DCP.uncommitted(root, 5)
    # Step 6's events come after step 5's: once 6 is recorded and the watcher is idle, every
    # event of step 5 was looked at (and anything found complete recorded).
    DCP.uncommitted(root, 6)
    DCP.commit(root, 6)
    await _until(lambda: 6 in _steps(ctx.db) and service.idle, "step 6 to be recorded, then quiet")
    assert 5 not in _steps(ctx.db)
    DCP.commit(root, 5)
    await _until(lambda: 5 in _steps(ctx.db), "step 5 to be recorded")
    await service.reconcile()
    assert sorted(_steps(ctx.db)) == [5, 6]


async def test_a_deferred_step_is_recorded_by_its_own_timer_and_said_once(
    service: DetectService, ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's hand-made step: no event comes after its ``.metadata`` lands, no reconcile runs."""
    monkeypatch.setattr(dcp, "METADATA_SETTLE_NS", 1_000_000_000)
    root = ctx.config.watch[0].path
    await service.reconciled.wait()
    step = root / "step_100"
    step.mkdir()
    (step / "__0_0.distcp").write_bytes(b"x" * 4096)
    with capture_logs() as logs:
        (step / ".metadata.tmp").write_text("{}\n")
        (step / ".metadata.tmp").rename(step / ".metadata")
        await _until(lambda: 100 in _steps(ctx.db), "step 100 to be recorded")
    deferred = [e for e in logs if e["event"] == "checkpoint_deferred"]
    assert [(e["path"], e["log_level"]) for e in deferred] == [("demo/step_100", "info")]
    assert "not readable" in deferred[0]["reason"]


async def test_steps_written_while_stopped_are_found_at_start(ctx: Context) -> None:
    root = ctx.config.watch[0].path
    for step in (1, 2, 3):
        DCP.uncommitted(root, step)
        DCP.commit(root, step)
    DCP.uncommitted(root, 4)
    svc = DetectService(ctx)
    await svc.start()
    try:
        await asyncio.wait_for(svc.reconciled.wait(), WAIT_SECONDS)
        assert sorted(_steps(ctx.db)) == [1, 2, 3]
    finally:
        await svc.stop(5)
    assert not ctx.watcher_running
    again = DetectService(ctx)  # a restart records nothing twice
    await again.start()
    try:
        await asyncio.wait_for(again.reconciled.wait(), WAIT_SECONDS)
        assert sorted(_steps(ctx.db)) == [1, 2, 3]
    finally:
        await again.stop(5)


async def test_file_changed_after_detection_is_flagged(service: DetectService, ctx: Context) -> None:
    root = ctx.config.watch[0].path
    await service.reconciled.wait()
    path = write_torch(root / "iter_7.pt", {"w": torch.zeros(64)})
    await _until(lambda: 7 in _steps(ctx.db), "step 7 to be recorded")
    write_torch(path, {"w": torch.ones(99)})
    await service.reconcile()
    assert _steps(ctx.db)[7].state == "changed"
    assert len(_steps(ctx.db)) == 1


def test_service_paths_are_resolved(ctx: Context) -> None:
    svc = DetectService(ctx)
    assert all(isinstance(s.path, Path) and s.path.is_absolute() for s in svc.roots)

"""Trees a job can make that no whole path reaches: each fails its own step, never the pass.

The reconcile walks tier 0 through directory descriptors from the watched directory
(``layout``): a step nested deeper than PATH_MAX, or a directory swapped for a symlink
while it is walked, fails only that step (warned once, with the reason); the other
steps of the same reconcile are recorded and checked, and nothing outside is ever listed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import select
from structlog.testing import capture_logs

from tests.fixtures.opens import OpenSpy
from tests.unit.detect.helpers import deep_chain
from tests.unit.detect.layouts import LAYOUTS, write_torch
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Checkpoint, File
from tierd.daemon.context import Context
from tierd.daemon.detect.service import DetectService

pytestmark = pytest.mark.skipif(not hasattr(os, "O_PATH"), reason="inotify and O_PATH are Linux's")

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
SECRET = b"outside every tier: never listed, never read\n"


@pytest.fixture
def ctx(sqlite_db: Database, make_config: Callable[..., Config]) -> Context:
    return Context(config=make_config(), db=sqlite_db)


def _watched(ctx: Context) -> Path:
    return ctx.config.watch[0].path


def _steps(db: Database) -> dict[int, str]:
    with db.read_session() as session:
        return {r.step: r.state for r in session.scalars(select(Checkpoint))}


def _events(logs: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == event and e["log_level"] == "warning"]


def _dcp(ctx: Context, *steps: int) -> None:
    for step in steps:
        DCP.uncommitted(_watched(ctx), step)
        DCP.commit(_watched(ctx), step)


async def test_a_step_deeper_than_path_max_fails_alone(ctx: Context) -> None:
    """Issue 23, item 7: one deep tree stopped every reconcile (ENAMETOOLONG ended the pass)."""
    _dcp(ctx, 1, 2)
    service = DetectService(ctx)
    with deep_chain(_watched(ctx) / "step_1"), capture_logs() as logs:
        await service.reconcile()
        await service.reconcile()  # the next pass warns no more
    assert _steps(ctx.db) == {2: "complete"}
    (warned,) = _events(logs, "checkpoint_unreadable")
    assert (warned["path"], warned["format"]) == ("step_1", "dcp")
    assert warned["reason"].startswith("a path below is 4096 bytes or longer (ENAMETOOLONG) at d")
    assert len(warned["reason"]) < 300  # the path is shortened, not 4,000 characters of it


async def test_a_deep_tree_in_a_recorded_step_leaves_the_other_steps_checked(ctx: Context) -> None:
    _dcp(ctx, 1)
    weights = write_torch(_watched(ctx) / "model_step2.pt", {"w": torch.zeros(8)})
    service = DetectService(ctx)
    await service.reconcile()
    assert _steps(ctx.db) == {1: "complete", 2: "complete"}
    write_torch(weights, {"w": torch.ones(99)})  # changed after it was recorded
    with deep_chain(_watched(ctx) / "step_1"), capture_logs() as logs:
        await service.reconcile()
    assert _steps(ctx.db) == {1: "complete", 2: "changed"}
    (warned,) = _events(logs, "checkpoint_unchecked")
    assert (warned["path"], warned["step"]) == ("demo/step_1", 1)
    assert "ENAMETOOLONG" in warned["reason"]


async def test_a_directory_swapped_for_a_symlink_while_walked_is_not_followed(
    sqlite_db: Database, make_config: Callable[..., Config], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = {"path": str(tmp_path / "nvme" / "demo"), "run": "demo", "format": "dcp"}
    ctx = Context(config=make_config(watch=[watch]), db=sqlite_db)  # no other detector looks first
    _dcp(ctx, 1)
    step = _watched(ctx) / "step_1"
    (step / "sub").mkdir()
    (step / "sub" / "extra.bin").write_bytes(b"x" * 64)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "extra.bin").write_bytes(SECRET)
    swapped: list[str] = []

    def swap(path: object) -> None:
        """Right before the walk enters ``sub`` (by name or by whole path), make it a symlink out."""
        if not swapped and (path == "sub" or os.fspath(str(path)).endswith("/step_1/sub")):
            (step / "sub").rename(tmp_path / "aside")
            (step / "sub").symlink_to(outside, target_is_directory=True)
            swapped.append(os.fspath(str(path)))

    real_open, real_scandir = os.open, os.scandir

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        swap(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def scandir_(path: Any = ".") -> Any:
        swap(path)
        return real_scandir(path)

    spy = OpenSpy(outside, outside / "extra.bin")
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "scandir", scandir_)
    service = DetectService(ctx)
    try:
        with capture_logs() as logs:
            await service.reconcile()  # ``sub`` becomes a symlink as the walk reaches it
            await service.reconcile()  # then it is one from the start
        opened = spy.opened()
    finally:
        spy.close()
    assert swapped
    assert opened == set()
    assert _steps(ctx.db) == {}
    (warned,) = _events(logs, "checkpoint_unreadable")
    assert warned["path"] == "step_1"
    assert "a symlink, never followed (ENOTDIR) at sub" in warned["reason"]
    with ctx.db.read_session() as session:
        assert session.scalars(select(File)).all() == []
        (refused,) = session.scalars(select(AuditEvent).where(AuditEvent.action == "refused")).all()
    assert refused.detail["offending"] == [{"path": "demo/step_1/sub", "kind": "symlink"}]

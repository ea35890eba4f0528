"""When the waiting sweep runs: on its events, every few seconds while this node owes a part, else seldom.

Each test makes the idle poll an hour long (``WAITING_IDLE_SECONDS``), so a sweep that runs
was woken: by a notify on this node, or by another daemon's NOTIFY (PostgreSQL) heard on the
pipeline's listener.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.unit.detect.fleet import age, dcp_across, node_context, save_dcp_files, step_row
from tests.unit.detect.layouts import LAYOUTS
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.parts import Expectation
from tierd.daemon.context import Context
from tierd.daemon.detect import waiting
from tierd.daemon.detect.notify import notify_checkpoint
from tierd.daemon.detect.service import DetectService
from tierd.daemon.pipeline.listen import JobListener

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
HOUR = 3600.0


@pytest.fixture(autouse=True)
def _no_idle_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "WAITING_IDLE_SECONDS", HOUR)


@asynccontextmanager
async def _sweeping(ctx: Context) -> AsyncIterator[DetectService]:
    """A detect service of ``ctx`` running its waiting sweep only (no watcher, no reconcile)."""
    service = DetectService(ctx)
    service.waiting_loop.start("test:waiting")
    try:
        yield service
    finally:
        await service.waiting_loop.stop(5)


async def _swept(service: DetectService, after: int) -> None:
    await asyncio.wait_for(service.waiting_loop.pass_done(after), 30)


async def test_a_notify_left_waiting_wakes_the_sweep_which_polls_only_while_it_owes_a_part(
    db: Database, tmp_path: Path
) -> None:
    ctx = node_context(db, tmp_path, "n0")
    DCP.uncommitted(ctx.config.watch[0].path, 5)  # .metadata not there yet
    async with _sweeping(ctx) as service:
        idle = min(HOUR, ctx.config.reconcile_interval_seconds)  # a reconcile sweeps too
        assert service._waiting_interval() == idle
        result = await notify_checkpoint(ctx, run="demo", step=5, path="demo/step_5", fmt="dcp", actor="t")
        assert result.status == 202
        await _swept(service, 0)  # woken by the notify, not by a poll
        assert service.waiting.owing
        assert service._waiting_interval() == waiting.WAITING_POLL_SECONDS

        DCP.commit(ctx.config.watch[0].path, 5)
        await _swept(service, 1)  # the poll while the step waits on this node
        row = step_row(db, 5)
        assert row is not None
        assert row.state == "complete"
        await _swept(service, 2)  # the step no longer waits: back to the idle poll
        assert not service.waiting.owing
        assert service._waiting_interval() == idle


async def _until(done: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not done():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_part_recorded_before_its_marker_is_completed_by_the_sweep_once_the_marker_lands(
    db: Database, tmp_path: Path
) -> None:
    """The scans skip a recorded path: the marker landing beside a part is the sweep's to add.

    bench_peer's node 0 records its shard as its part, then its ``.metadata`` lands: the
    sweep, woken by the part, polls while the step waits on it.
    """
    ctx = node_context(db, tmp_path, "n0", nodes=2)
    service = DetectService(ctx)
    await service.start()
    try:
        await asyncio.wait_for(service.reconciled.wait(), 30)
        whole, step = tmp_path / "scratch", ctx.config.watch[0].path / "step_3"
        save_dcp_files(whole, 3, 2)
        step.mkdir(parents=True)
        for shard in whole.glob("*.distcp"):  # every shard here, .metadata not yet
            shutil.copy2(shard, step / shard.name)
        age(step)
        await _until(lambda: (row := step_row(db, 3)) is not None and len(row.parts) == 1, "n0's part")
        row = step_row(db, 3)
        assert row is not None
        assert row.state == "waiting"
        shutil.copy2(whole / ".metadata", step / ".metadata.tmp")
        os.replace(step / ".metadata.tmp", step / ".metadata")
        await _until(lambda: (row := step_row(db, 3)) is not None and row.state == "complete", "the step")
    finally:
        await service.stop(5)


async def test_another_daemons_part_wakes_this_nodes_sweep_by_notify(pg_db: Database, tmp_path: Path) -> None:
    nodes = [node_context(pg_db, tmp_path, f"n{i}") for i in range(2)]  # nodes: 1 on both
    names = dcp_across(tmp_path / "scratch", nodes, 9)
    heard = asyncio.Event()

    def wake_n1() -> None:
        heard.set()
        nodes[1].wake_waiting()

    listener = JobListener(pg_db.url, "n1", lambda: None, lambda: None, wake_n1)
    listener.start()
    try:
        await asyncio.wait_for(listener.listening.wait(), 10)
        async with _sweeping(nodes[1]) as service:
            expect = Expectation(files=tuple(names), source="notify")
            result = await notify_checkpoint(
                nodes[0], run="demo", step=9, path="demo/step_9", fmt=None, actor="t", expect=expect
            )
            assert result.status == 202  # n0's part: the step waits for n1's shard
            await asyncio.wait_for(heard.wait(), 10)
            await _swept(service, 0)
            row = step_row(pg_db, 9)
            assert row is not None
            assert (row.state, [p.node for p in row.parts]) == ("complete", ["n0", "n1"])
    finally:
        await listener.stop()


async def test_parts_grow_at_most_once_per_grow_seconds(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of wake-ups does not multiply the late-rank look (its reads) of each waiting step."""
    ctx = node_context(db, tmp_path, "n0")
    service = DetectService(ctx)
    grown: list[int] = []
    grow = service.waiting.grow_parts

    async def counted() -> None:
        grown.append(1)
        await grow()

    monkeypatch.setattr(service.waiting, "grow_parts", counted)
    for _ in range(3):
        await service.waiting.sweep()
    assert len(grown) == 1  # the first sweep grows
    assert service.waiting._grown_at is not None
    service.waiting._grown_at -= waiting.GROW_SECONDS
    await service.waiting.sweep()
    assert len(grown) == 2

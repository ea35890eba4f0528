"""The restore runner and service over real tiers: POSIX directories and an S3 bucket on moto."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tests.fixtures.pipeline_run import poll_until
from tests.fixtures.s3servers import S3Server
from tests.fixtures.world import posix_tier
from tests.integration.daemon_helpers import tier_dict
from tests.unit.restore.harness import FAST, Gate, RestoreWorld
from tierd.daemon.aio import blocking
from tierd.daemon.backends import close_backends
from tierd.daemon.catalog import restores
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.catalog.models import File, utcnow
from tierd.daemon.catalog.retention import load_retention_rows
from tierd.daemon.context import Context
from tierd.daemon.restore import runner as runner_module
from tierd.daemon.restore.service import RestoreService
from tierd.daemon.transfer.copyset import copy_checkpoint_files
from tierd.errors import CatalogError, Conflict, NotFound, RestoreRefused

STEP = {"__0_0.distcp": os.urandom(300_000), "__1_0.distcp": os.urandom(2_500_000), ".metadata": b"meta" * 50}
GONE_FROM_NVME = {"nvme": "deleted", "pfs": "verified", "s3": "verified"}


@pytest.fixture
async def lab(tmp_path: Path, sqlite_db: Database, moto_server: S3Server) -> AsyncIterator[RestoreWorld]:
    tiers = [
        posix_tier(tmp_path, "nvme"),
        posix_tier(tmp_path, "pfs"),
        tier_dict(moto_server.new_tier("s3")),
    ]
    made = RestoreWorld.make(tmp_path, sqlite_db, tiers)
    yield made
    await close_backends(made.world.backends)


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_restores_from_the_nearest_verified_tier_markers_last(lab: RestoreWorld) -> None:
    cid = await lab.add(1, GONE_FROM_NVME, STEP)
    target = lab.root / "restores" / "one"
    row = await lab.run(checkpoint_id=cid, target=str(target))
    assert (row.job.state, row.job.src_tier, row.job.last_error) == ("done", "pfs", None)
    assert files_under(target) == STEP
    marker_mtime = (target / ".metadata").stat().st_mtime_ns
    assert all((target / name).stat().st_mtime_ns <= marker_mtime for name in STEP)
    detail = row.job.detail
    assert (detail["files_done"], detail["bytes_done"]) == (3, sum(map(len, STEP.values())))
    assert detail["fallbacks"] == []
    assert detail["read_from"] == {"pfs": 3}
    assert ("restore_requested", None) in lab.world.actions(cid)
    assert ("restore_done", "pfs") in lab.world.actions(cid)
    assert lab.world.states(cid) == GONE_FROM_NVME


async def test_restores_from_s3_when_only_the_bucket_holds_it(lab: RestoreWorld) -> None:
    cid = await lab.add(2, {"nvme": "deleted", "pfs": "deleted", "s3": "verified"}, STEP)
    target = lab.root / "restores" / "from-s3"
    row = await lab.run(run="demo", latest=True, target=str(target))
    assert (row.job.state, row.job.src_tier, row.job.checkpoint_id) == ("done", "s3", cid)
    assert files_under(target) == STEP


async def test_a_restore_loads_its_files_as_columns_not_orm_objects(lab: RestoreWorld) -> None:
    """Asked and run, a restore builds no ``File`` entity: 5,000 of them took ~7 MB while they lived."""
    cid = await lab.add(1, GONE_FROM_NVME, STEP)
    loaded: list[object] = []

    def on_load(target: object, context: object) -> None:
        loaded.append(target)

    event.listen(File, "load", on_load)
    try:
        row = await lab.run(checkpoint_id=cid, target=str(lab.root / "restores" / "columns"))
    finally:
        event.remove(File, "load", on_load)
    assert row.job.state == "done"
    assert loaded == []


async def test_a_bad_byte_falls_back_to_the_next_tier_and_marks_the_replica_failed(lab: RestoreWorld) -> None:
    cid = await lab.add(3, GONE_FROM_NVME, STEP)
    shard = lab.world.tier_path("pfs", "demo/step00003/__1_0.distcp")
    data = bytearray(shard.read_bytes())
    data[12345] ^= 0xFF
    shard.write_bytes(bytes(data))
    target = lab.root / "restores" / "fallback"
    row = await lab.run(checkpoint_id=cid, target=str(target))
    assert row.job.state == "done"
    assert files_under(target) == STEP
    [fallback] = row.job.detail["fallbacks"]
    assert (fallback["file"], fallback["from_tier"], fallback["to_tier"]) == ("__1_0.distcp", "pfs", "s3")
    assert "IntegrityError" in fallback["error"]
    assert row.job.detail["read_from"] == {"pfs": 2, "s3": 1}  # the bad shard from the next tier
    assert lab.world.states(cid)["pfs"] == "failed"
    assert ("reverify_failed", "pfs") in lab.world.actions(cid)


async def test_every_copy_bad_fails_and_leaves_nothing(lab: RestoreWorld) -> None:
    cid = await lab.add(4, {"nvme": "deleted", "pfs": "verified"}, STEP)
    os.unlink(lab.world.tier_path("pfs", "demo/step00004/__0_0.distcp"))
    target = lab.root / "restores" / "doomed"
    row = await lab.run(checkpoint_id=cid, target=str(target))
    assert row.job.state == "failed"
    assert "NotFound" in (row.job.last_error or "")
    assert not target.exists()
    assert ("restore_failed", "pfs") in lab.world.actions(cid)
    assert lab.world.states(cid)["pfs"] == "failed"  # for the pipeline to copy again


async def test_to_tier0_puts_it_back_and_verifies_the_tier0_replica(lab: RestoreWorld) -> None:
    cid = await lab.add(5, GONE_FROM_NVME, STEP)
    row = await lab.run(checkpoint_id=cid, to_tier0=True)
    home = lab.world.tier_path("nvme", "demo/step00005")
    assert (row.job.state, row.job.detail["target"]) == ("done", str(home))
    assert files_under(home) == STEP
    assert lab.world.states(cid)["nvme"] == "verified"
    assert lab.world.replica(cid, "nvme").location == str(home.resolve())
    assert (home / "__1_0.distcp").stat().st_mtime_ns == 1_000_000_000  # the recorded mtime


async def test_ranks_take_only_their_shards_and_the_metadata(lab: RestoreWorld) -> None:
    cid = await lab.add(6, GONE_FROM_NVME, STEP)
    target = lab.root / "restores" / "rank1"
    row = await lab.run(checkpoint_id=cid, target=str(target), ranks=[1])
    assert row.job.state == "done"
    assert files_under(target) == {k: STEP[k] for k in ("__1_0.distcp", ".metadata")}
    assert (row.job.detail["files_total"], row.job.detail["files_done"]) == (2, 2)
    assert lab.world.states(cid)["nvme"] == "deleted"


async def test_files_already_in_place_are_kept_and_wrong_ones_replaced(lab: RestoreWorld) -> None:
    cid = await lab.add(7, GONE_FROM_NVME, STEP)
    target = lab.root / "restores" / "resume"
    target.mkdir()
    (target / "__1_0.distcp").write_bytes(STEP["__1_0.distcp"])
    (target / "__0_0.distcp").write_bytes(b"stale bytes")
    kept = (target / "__1_0.distcp").stat().st_ino
    row = await lab.run(checkpoint_id=cid, target=str(target), overwrite=True)
    assert row.job.state == "done"
    assert files_under(target) == STEP
    assert (target / "__1_0.distcp").stat().st_ino == kept
    assert sum(row.job.detail["read_from"].values()) == len(STEP) - 1  # the one in place is not read


async def test_cancel_mid_way_removes_what_it_wrote(lab: RestoreWorld) -> None:
    cid = await lab.add(8, GONE_FROM_NVME, STEP)
    gate = Gate(lab.world.backends["pfs"])
    service = lab.service({**lab.world.backends, "pfs": gate})
    target = lab.root / "restores" / "cancelled"
    job_id = lab.ask(checkpoint_id=cid, target=str(target))
    await service.start()
    await gate.reached.wait()
    with lab.db.read_session() as s:
        assert next(r for r in load_retention_rows(s) if r.id == cid).in_use  # retention keeps its source
    await service.cancel(job_id, actor="test", reason="changed my mind")
    await service.stop(5)
    assert lab.row(job_id).job.state == "cancelled"
    assert not target.exists()
    assert ("restore_cancelled", None) in lab.world.actions(cid)
    await service.cancel(job_id, actor="test", reason="again")  # a cancelled one stays as it is
    done = lab.ask(checkpoint_id=cid, target=str(target))
    await lab.runner().run()
    with pytest.raises(Conflict, match="already done"):
        await service.cancel(done, actor="test", reason="too late")


async def test_shutdown_requeues_and_the_next_run_resumes(lab: RestoreWorld) -> None:
    cid = await lab.add(9, GONE_FROM_NVME, STEP)
    gate = Gate(lab.world.backends["pfs"])
    service = lab.service({**lab.world.backends, "pfs": gate})
    target = lab.root / "restores" / "resumed"
    job_id = lab.ask(checkpoint_id=cid, target=str(target))
    await service.start()
    await gate.reached.wait()
    await service.stop(0)
    assert lab.row(job_id).job.state == "queued"
    await lab.runner().run()
    row = lab.row(job_id)
    assert row.job.state == "done"
    assert files_under(target) == STEP


async def test_refused_requests(lab: RestoreWorld) -> None:
    cid = await lab.add(10, GONE_FROM_NVME, STEP)
    inside = lab.root / "restores"
    with pytest.raises(RestoreRefused, match="outside"):
        lab.ask(checkpoint_id=cid, target=str(lab.root / "elsewhere"))
    (inside / "busy").mkdir()
    (inside / "busy" / "x").write_bytes(b"x")
    with pytest.raises(RestoreRefused, match="not an empty directory"):
        lab.ask(checkpoint_id=cid, target=str(inside / "busy"))
    with pytest.raises(RestoreRefused, match="not a configured tier"):
        lab.ask(checkpoint_id=cid, target=str(inside / "a"), source_tier="tape")
    with pytest.raises(Conflict, match="no verified replica on tier nvme"):
        lab.ask(checkpoint_id=cid, target=str(inside / "a"), source_tier="nvme")
    with pytest.raises(RestoreRefused, match="no file"):
        lab.ask(checkpoint_id=cid, target=str(inside / "a"), files=["*.nothing"])
    with pytest.raises(NotFound):
        lab.ask(checkpoint_id=cid + 100, target=str(inside / "a"))
    with pytest.raises(NotFound):
        lab.ask(run="nope", latest=True, target=str(inside / "a"))
    gone = await lab.add(11, {"nvme": "deleted", "pfs": "deleted"}, STEP)
    with pytest.raises(Conflict, match="no verified replica"):
        lab.ask(checkpoint_id=gone, target=str(inside / "a"))
    with lab.db.read_session() as s:
        assert restores.list_restores(s) == []


async def test_source_tier_is_read_first(lab: RestoreWorld) -> None:
    cid = await lab.add(12, GONE_FROM_NVME, STEP)
    row = await lab.run(checkpoint_id=cid, target=str(lab.root / "restores" / "s"), source_tier="s3")
    assert (row.job.state, row.job.src_tier) == ("done", "s3")
    await asyncio.sleep(0)


async def test_a_restore_that_cannot_renew_its_lease_stops_and_is_resumed_later(
    lab: RestoreWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog goes away mid-restore: the runner stops before its lease could run out (two
    workers never write the same files); once the lease has expired, the next claim resumes it.
    """
    cid = await lab.add(11, GONE_FROM_NVME, STEP)
    gate = Gate(lab.world.backends["pfs"])
    target = lab.root / "restores" / "fenced"
    job_id = lab.ask(checkpoint_id=cid, target=str(target))
    runner = lab.runner({**lab.world.backends, "pfs": gate})
    runner.options = replace(runner.options, lease_seconds=2.0, renew_interval=0.5)

    def away(*args: object, **kwargs: object) -> bool:
        raise CatalogError("catalog error: OperationalError: the server closed the connection")

    monkeypatch.setattr(restores, "save_restore_progress", away)
    task = asyncio.create_task(runner.run())
    await gate.reached.wait()  # the gate stays shut: only the fence ends the run
    assert await asyncio.wait_for(task, 30) == "lost"
    assert runner.fenced
    monkeypatch.undo()
    assert lab.row(job_id).job.state == "running"  # its lease runs out; nothing marks it meanwhile
    gate.opened.set()
    later = utcnow() + timedelta(seconds=120)
    owner = owner_id(lab.world.config.node)
    claim = restores.claim_next_restore(lab.db, owner, lab.world.config.node, lease_seconds=60, now=later)
    assert claim is not None
    assert claim.job_id == job_id
    assert await lab.runner(claim=claim).run() == "done"
    assert files_under(target) == STEP


@pytest.mark.parametrize("lag", range(12))
async def test_a_restore_ending_while_its_heartbeat_saves_is_not_cut_by_it(
    tmp_path: Path, sqlite_db: Database, monkeypatch: pytest.MonkeyPatch, lag: int
) -> None:
    """The copy ends as a progress save returns, ``lag`` loop turns before the save's task does.

    On Python 3.11 ``asyncio.wait_for`` hands back a result that lands with a cancel and
    drops the cancel, so a heartbeat only cancelled ran on past the copy's end, found the
    finished restore no longer its own at its next save, set ``lost`` and cancelled the
    restore's task (in ``_done``, or after). Some lag hits that window.
    """
    lab = RestoreWorld.make(tmp_path, sqlite_db, [posix_tier(tmp_path, "nvme"), posix_tier(tmp_path, "pfs")])
    cid = await lab.add(13, {"nvme": "deleted", "pfs": "verified"}, STEP)
    job_id = lab.ask(checkpoint_id=cid, target=str(lab.root / "restores" / "raced"))
    ending: list[asyncio.Event] = []
    copy = copy_checkpoint_files

    async def copy_then_wait_for_a_save(*args: Any, **kwargs: Any) -> None:
        await copy(*args, **kwargs)
        ending.append(asyncio.Event())
        await ending[0].wait()  # the copy's last step returns with a heartbeat's save

    async def blocking_then_end(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        result = await blocking(fn, *args, **kwargs)
        if fn is restores.save_restore_progress and ending and not ending[0].is_set():
            ending[0].set()  # the copy's last step returns...
            for _ in range(lag):  # ...lag turns of the loop before this save does
                await asyncio.sleep(0)
        return result

    monkeypatch.setattr(runner_module, "copy_checkpoint_files", copy_then_wait_for_a_save)
    monkeypatch.setattr(runner_module, "blocking", blocking_then_end)
    runner = lab.runner()
    try:
        outcome = await asyncio.create_task(runner.run())  # a task of its own, as in the service
        name = f"restore:heartbeat:{job_id}"
        alive = [task for task in asyncio.all_tasks() if task.get_name() == name]
        if alive:  # it ran on, and found the finished restore gone at its next save
            await asyncio.wait(alive, timeout=5)
    finally:
        await close_backends(lab.world.backends)
    assert (outcome, runner.lost, alive) == ("done", False, [])
    assert lab.row(job_id).job.state == "done"


async def test_an_idle_restore_service_keeps_no_transfer_buffers(lab: RestoreWorld) -> None:
    cid = await lab.add(12, GONE_FROM_NVME, STEP)
    budget = lab.world.backends["pfs"].budget
    service = RestoreService(Context(config=lab.world.config, db=lab.db), lab.world.backends, budget, FAST)
    taken: list[int] = []
    real_take = budget._take_idle

    def counting(nbytes: int) -> Any:
        taken.append(nbytes)
        return real_take(nbytes)

    budget._take_idle = counting  # type: ignore[method-assign]
    target = lab.root / "restores" / "buffers"
    job_id = lab.ask(checkpoint_id=cid, target=str(target))
    await service.start()
    try:
        await poll_until(lambda: lab.row(job_id).job.state == "done" and not service._running, timeout=20)
    finally:
        await service.stop(5)
    assert files_under(target) == STEP
    assert taken  # the files went through the budget's aligned buffers ...
    assert budget.idle_bytes == 0  # ... which were unmapped once no restore was running

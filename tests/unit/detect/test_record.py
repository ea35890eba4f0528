"""Recording in the catalog (SQLite and PostgreSQL): rows, checksums, idempotence, changes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.unit.detect.helpers import NothingKnown, make_spec
from tests.unit.detect.layouts import LAYOUTS, crc64_b64, hf_eval_loss
from tierd.config import Config
from tierd.daemon.aio import blocking
from tierd.daemon.catalog.checkpoints import find_step
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Checkpoint, File, Replica
from tierd.daemon.context import Context
from tierd.daemon.detect import record
from tierd.daemon.detect.changes import apply_change, compare, load_recorded
from tierd.daemon.detect.record import Outcome, record_checkpoint, write_waiting
from tierd.daemon.detect.scan import Found, scan_root
from tierd.errors import Unstable

DCP = next(layout for layout in LAYOUTS if layout.name == "dcp")
HF = next(layout for layout in LAYOUTS if layout.name == "hf")


@pytest.fixture
def ctx(db: Database, make_config: Callable[..., Config]) -> Context:
    return Context(config=make_config(), db=db)


def _found(ctx: Context, step: int = 3) -> Found:
    watch = ctx.config.watch[0]
    DCP.uncommitted(watch.path, step)
    DCP.commit(watch.path, step)
    spec = make_spec(watch.path, ctx.config.tier0.path)
    (found,) = [f for f in scan_root(spec, NothingKnown()) if f.step == step]
    return found


async def _record(ctx: Context, found: Found, **kw: Any) -> tuple[Outcome, int]:
    spec = make_spec(ctx.config.watch[0].path, ctx.config.tier0.path)
    return await record_checkpoint(
        ctx,
        found.verdict,
        run=kw.get("run", found.run),
        step=kw.get("step", found.step),
        fmt=found.detector.name,
        relpath=found.relpath,
        actor="detector:dcp",
        action="detected",
        recheck=lambda: found.detector.inspect(found.candidate, spec.settings),
    )


def _count(db: Database, model: Any) -> int:
    with db.read_session() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


async def test_records_rows_files_replicas_and_audit(ctx: Context) -> None:
    found = _found(ctx)
    outcome, checkpoint_id = await _record(ctx, found)
    assert outcome is Outcome.CREATED
    assert ctx.pipeline_wakeup.is_set()
    tier0 = ctx.config.tier0.path.resolve()
    with ctx.db.read_session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        assert row is not None
        assert (row.run.name, row.step, row.format, row.state) == ("demo", 3, "dcp", "complete")
        assert row.path == "demo/step_3"
        assert row.node == ctx.config.node
        files = sorted(row.files, key=lambda f: f.relpath)
        on_disk = sorted((tier0 / "demo" / "step_3").iterdir())
        assert [f.relpath for f in files] == [f"demo/step_3/{p.name}" for p in on_disk]
        assert [f.checksum for f in files] == [crc64_b64(p) for p in on_disk]
        assert all(f.checksum_algo == "crc64nvme" for f in files)
        assert row.total_bytes == sum(p.stat().st_size for p in on_disk)
        assert row.file_count == len(on_disk)
        newest = max(p.stat().st_mtime_ns for p in on_disk)
        assert abs(row.created_at.timestamp() - newest / 1e9) < 1e-3
        assert row.completed_at is not None
        replicas = [(r.tier_index, r.tier, r.state, r.location) for r in row.replicas]
        assert replicas[0] == (0, "nvme", "verified", str(tier0 / "demo" / "step_3"))
        assert [r[2:] for r in replicas[1:]] == [("pending", "")] * 3
        assert row.replicas[0].verified_at is not None
        audit = session.scalars(select(AuditEvent).where(AuditEvent.checkpoint_id == row.id)).all()
        assert [(a.actor, a.action) for a in audit] == [("detector:dcp", "detected")]


async def test_a_step_seen_twice_is_one_row(ctx: Context) -> None:
    found = _found(ctx)
    first = await _record(ctx, found)
    second = await _record(ctx, found)
    assert first[0] is Outcome.CREATED
    assert second == (Outcome.EXISTING, first[1])
    assert _count(ctx.db, Checkpoint) == 1
    assert _count(ctx.db, Replica) == 4


async def test_losing_the_insert_race_is_already_recorded(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another daemon (or the notify call) inserts the same step between our read and write."""
    found = _found(ctx)
    await _record(ctx, found)
    real = find_step
    calls = {"n": 0}

    def blind_first(*args: Any) -> Any:
        calls["n"] += 1
        return None if calls["n"] == 1 else real(*args)

    monkeypatch.setattr(record, "find_step", blind_first)
    outcome, _ = await _record(ctx, found)
    assert outcome is Outcome.EXISTING
    assert _count(ctx.db, Checkpoint) == 1
    assert _count(ctx.db, File) == len(found.verdict.files)


async def test_concurrent_recordings_make_one_row(ctx: Context) -> None:
    found = _found(ctx)
    results = await asyncio.gather(*(_record(ctx, found) for _ in range(4)))
    assert sorted(o.value for o, _ in results).count("created") == 1
    assert _count(ctx.db, Checkpoint) == 1


async def test_file_changing_while_hashed_records_nothing(ctx: Context) -> None:
    found = _found(ctx)
    shard = next(f.path for f in found.verdict.files if f.path.suffix == ".distcp")
    with open(shard, "ab") as f:
        f.write(b"more")
    with pytest.raises(Unstable):
        await _record(ctx, found)
    assert _count(ctx.db, Checkpoint) == 0


async def test_waiting_step_is_completed_by_the_detector(ctx: Context) -> None:
    found = _found(ctx)
    outcome, waiting_id = await blocking(
        write_waiting,
        ctx.db,
        ctx.config,
        run="announced",
        step=77,
        fmt="dcp",
        relpath=found.relpath,
        actor="api:anonymous",
        reason="test",
    )
    assert outcome is Outcome.CREATED
    outcome, checkpoint_id = await _record(ctx, found)
    assert (outcome, checkpoint_id) == (Outcome.COMPLETED, waiting_id)
    with ctx.db.read_session() as session:
        row = session.get(Checkpoint, waiting_id)
        assert row is not None
        assert (row.run.name, row.step, row.state, len(row.files), len(row.replicas)) == (
            "announced",
            77,
            "complete",
            len(found.verdict.files),
            4,
        )
    assert _count(ctx.db, Checkpoint) == 1


async def test_changes_after_detection(ctx: Context) -> None:
    found = _found(ctx)
    _, checkpoint_id = await _record(ctx, found)
    tier0 = ctx.config.tier0.path.resolve()
    shard = next(f.path for f in found.verdict.files if f.path.suffix == ".distcp")

    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # touched, same bytes
    (rec,) = await blocking(load_recorded, ctx.db, ctx.config.node)
    change = await blocking(compare, rec, tier0)
    assert change is not None
    assert not change.content_changed
    assert change.touched
    await blocking(apply_change, ctx.db, rec, change)
    (rec,) = await blocking(load_recorded, ctx.db, ctx.config.node)
    assert await blocking(compare, rec, tier0) is None

    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))  # same size, other bytes
    change = await blocking(compare, rec, tier0)
    assert change is not None
    assert change.modified == [f"demo/step_3/{shard.name}"]
    await blocking(apply_change, ctx.db, rec, change)
    with ctx.db.read_session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        assert row is not None
        assert row.state == "changed"
        actions = session.scalars(
            select(AuditEvent.action).where(AuditEvent.checkpoint_id == checkpoint_id)
        ).all()
        assert list(actions) == ["detected", "changed"]


async def test_files_added_below_a_recorded_checkpoint_are_its_change(ctx: Context) -> None:
    """Added regular files, a subdirectory's included, are listed by relpath, sorted; links are not."""
    found = _found(ctx)
    await _record(ctx, found)
    tier0 = ctx.config.tier0.path.resolve()
    step = found.candidate.path
    (step / "zz_extra.bin").write_bytes(b"z")
    (step / "sub").mkdir()
    (step / "sub" / "a.bin").write_bytes(b"a")
    (step / "link").symlink_to(step / "zz_extra.bin")
    (rec,) = await blocking(load_recorded, ctx.db, ctx.config.node)
    change = await blocking(compare, rec, tier0)
    assert change is not None
    assert change.added == ["demo/step_3/sub/a.bin", "demo/step_3/zz_extra.bin"]
    assert change.content_changed


async def test_vanished_checkpoint_marks_its_tier0_replica_deleted(ctx: Context) -> None:
    found = _found(ctx)
    _, checkpoint_id = await _record(ctx, found)
    for f in found.verdict.files:
        f.path.unlink()
    found.candidate.path.rmdir()
    (rec,) = await blocking(load_recorded, ctx.db, ctx.config.node)
    change = await blocking(compare, rec, ctx.config.tier0.path.resolve())
    assert change is not None
    assert change.vanished
    await blocking(apply_change, ctx.db, rec, change)
    with ctx.db.read_session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        assert row is not None
        assert row.state == "complete"
        assert row.replicas[0].state == "deleted"


async def test_the_trainers_metrics_of_the_step_are_recorded(ctx: Context) -> None:
    watch = ctx.config.watch[0]
    HF.uncommitted(watch.path, 40)
    HF.commit(watch.path, 40)
    spec = make_spec(watch.path, ctx.config.tier0.path)
    (found,) = [f for f in scan_root(spec, NothingKnown()) if f.step == 40]
    _, checkpoint_id = await _record(ctx, found)
    with ctx.db.read_session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        assert row is not None
        metrics = row.metrics
    assert metrics == {"loss": 2.5, "grad_norm": 1.5, "eval_loss": hf_eval_loss(40), "eval_runtime": 0.1}


async def test_files_retention_removes_from_tier0_are_not_a_change(ctx: Context) -> None:
    found = _found(ctx)
    _, checkpoint_id = await _record(ctx, found)
    with ctx.db.session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        assert row is not None
        tier0 = next(r for r in row.replicas if r.tier_index == 0)
        tier0.state = "deleting"
    shard = next(f.path for f in found.verdict.files if f.path.suffix == ".distcp")
    shard.unlink()  # the deleter removed it; a file nobody recorded keeps the directory there
    (found.candidate.path / "notes.txt").write_text("not recorded")
    (rec,) = await blocking(load_recorded, ctx.db, ctx.config.node)
    change = await blocking(compare, rec, ctx.config.tier0.path.resolve())
    assert change is not None
    await blocking(apply_change, ctx.db, rec, change)
    with ctx.db.read_session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        assert row is not None
        assert row.state == "complete"

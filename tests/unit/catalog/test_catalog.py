"""The catalog on SQLite and on a real PostgreSQL: the same tests, both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from tierd.daemon.catalog import checkpoints
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    AuditEvent,
    Checkpoint,
    File,
    Job,
    Replica,
    ReplicaState,
    Run,
    Upload,
    UploadPart,
)
from tierd.errors import CatalogError, NotFound


def _add_checkpoint(db: Database, run: str, step: int, *, at: datetime | None = None) -> int:
    with db.session() as s:
        run_row = s.scalars(select(Run).where(Run.name == run)).one_or_none() or Run(name=run)
        ckpt = Checkpoint(
            run=run_row,
            step=step,
            path=f"{run}/step{step}",
            format="dcp",
            created_at=at or datetime.now(UTC),
            total_bytes=3,
            file_count=1,
        )
        ckpt.files.append(
            File(relpath=f"{run}/step{step}/a", size=3, checksum_algo="crc64nvme", checksum="x")
        )
        ckpt.replicas.append(Replica(tier="nvme", tier_index=0, state=ReplicaState.VERIFIED.value))
        ckpt.replicas.append(Replica(tier="pfs", tier_index=1))
        s.add(ckpt)
        s.flush()
        return ckpt.id


def test_roundtrip_with_files_and_replicas(db: Database) -> None:
    cid = _add_checkpoint(db, "demo", 100)
    with db.read_session() as s:
        row = checkpoints.get_checkpoint(s, cid)
    assert (row.run.name, row.step, row.state) == ("demo", 100, "complete")
    assert [f.relpath for f in row.files] == ["demo/step100/a"]
    assert [(r.tier, r.state) for r in row.replicas] == [("nvme", "verified"), ("pfs", "pending")]
    assert row.created_at.tzinfo is not None


def test_step_is_unique_per_run(db: Database) -> None:
    _add_checkpoint(db, "demo", 1)
    _add_checkpoint(db, "other", 1)
    with pytest.raises(CatalogError) as info:
        _add_checkpoint(db, "demo", 1)
    assert isinstance(info.value.__cause__, sa_exc.IntegrityError)


def test_list_is_newest_first_paged_and_filtered(db: Database) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for step in range(5):
        _add_checkpoint(db, "a" if step % 2 else "b", step, at=base + timedelta(minutes=step))
    with db.read_session() as s:
        rows, total = checkpoints.list_checkpoints(s, limit=2)
        assert total == 5
        assert [r.step for r in rows] == [4, 3]
        rows, _ = checkpoints.list_checkpoints(s, limit=2, offset=2)
        assert [r.step for r in rows] == [2, 1]
        rows, total = checkpoints.list_checkpoints(s, run="a")
        assert (total, [r.step for r in rows]) == (2, [3, 1])


def test_list_filters_by_step_alone_and_with_a_run(db: Database) -> None:
    demo = _add_checkpoint(db, "demo", 7)
    other = _add_checkpoint(db, "demo:7", 7)
    _add_checkpoint(db, "demo", 8)
    with db.read_session() as s:
        rows, total = checkpoints.list_checkpoints(s, step=7)
        assert (total, sorted(r.id for r in rows)) == (2, sorted([demo, other]))
        rows, total = checkpoints.list_checkpoints(s, run="demo", step=7)
        assert (total, [r.id for r in rows]) == (1, [demo])
        rows, total = checkpoints.list_checkpoints(s, run="demo", step=9)
        assert (total, rows) == (0, [])


def test_missing_checkpoint_raises_not_found(db: Database) -> None:
    with db.read_session() as s, pytest.raises(NotFound):
        checkpoints.get_checkpoint(s, 12345)


def test_failed_transaction_rolls_back(db: Database) -> None:
    with pytest.raises(RuntimeError), db.session() as s:
        s.add(Run(name="ghost"))
        s.flush()
        raise RuntimeError("boom")
    with db.read_session() as s:
        assert s.scalars(select(Run).where(Run.name == "ghost")).first() is None


def test_jobs_audit_and_uploads(db: Database) -> None:
    cid = _add_checkpoint(db, "demo", 7)
    with db.session() as s:
        s.add(Job(kind="copy", checkpoint_id=cid, src_tier="nvme", dst_tier="pfs", priority=7))
        s.add(AuditEvent(actor="test", action="pin", checkpoint_id=cid, reason="golden", detail={"k": 1}))
        upload = Upload(
            checkpoint_id=cid,
            tier="object",
            relpath="demo/step7/a",
            key="k",
            upload_id="u",
            part_size=5,
            size=9,
        )
        upload.parts.append(UploadPart(part_number=1, size=5, etag="e", checksum="c"))
        s.add(upload)
    with db.read_session() as s:
        job = s.scalars(select(Job)).one()
        assert (job.state, job.attempts, job.priority) == ("queued", 0, 7)
        event = s.scalars(select(AuditEvent)).one()
        assert event.detail == {"k": 1}
        assert event.at.tzinfo is not None
        assert [p.part_number for p in s.scalars(select(Upload)).one().parts] == [1]


def test_deleting_a_checkpoint_cascades(db: Database) -> None:
    cid = _add_checkpoint(db, "demo", 9)
    with db.session() as s:
        s.delete(s.get(Checkpoint, cid))
    with db.read_session() as s:
        assert s.scalars(select(File)).all() == []
        assert s.scalars(select(Replica)).all() == []


def test_naive_datetimes_are_refused(db: Database) -> None:
    with pytest.raises((CatalogError, ValueError)), db.session() as s:
        s.add(Run(name="naive", created_at=datetime(2026, 1, 1)))
        s.flush()

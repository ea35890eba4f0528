"""A hop's record of finished files (``records``), on SQLite and PostgreSQL.

Each save adds only the files finished since the last one; a later attempt of the job
starts from them; the record goes with the job's end.
"""

from __future__ import annotations

from sqlalchemy import func, select, update

from tests.unit.catalog.helpers import add_checkpoint
from tierd.daemon.catalog import jobs
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import File, Job, JobFileDone
from tierd.daemon.pipeline import records
from tierd.daemon.pipeline.records import HopPlan

TIERS = ["nvme", "pfs", "s3", "dr"]
OWNER = "n1:1"


def checkpoint_with_files(db: Database, count: int) -> int:
    cid = add_checkpoint(db, 1)
    with db.session() as s:
        for n in range(count):
            s.add(
                File(
                    checkpoint_id=cid,
                    relpath=f"demo/step1/f{n:03d}",
                    size=1,
                    checksum_algo="crc",
                    checksum="x",
                )
            )
    with db.session() as s:
        jobs.enqueue_copy_job(s, cid, "nvme", "pfs", 0)
    return cid


def start(db: Database) -> HopPlan:
    claim = jobs.claim_next_copy_job(db, OWNER, ["pfs"], lease_seconds=60)
    assert claim is not None
    plan = records.start_hop(db, claim, OWNER, TIERS)
    assert plan is not None
    return plan


def rows(db: Database) -> int:
    with db.read_session() as s:
        return s.scalar(select(func.count()).select_from(JobFileDone)) or 0


def test_progress_adds_what_is_new_and_a_later_attempt_starts_from_it(db: Database) -> None:
    checkpoint_with_files(db, 10)
    plan = start(db)
    assert plan.done == frozenset()
    ids = [plan.file_ids[spec.relpath] for spec in plan.files]
    assert records.save_progress(db, plan.claim, OWNER, 3, ids[:3])
    assert records.save_progress(db, plan.claim, OWNER, 5, ids[2:5])  # one already recorded: ignored
    assert rows(db) == 5
    assert jobs.release_job(db, plan.claim.job_id, OWNER)
    again = start(db)
    assert again.claim.detail["resumable"] is True
    assert again.done == {spec.relpath for spec in plan.files[:5]}
    assert records.mark_verified(db, again, OWNER, "loc", 1.0)
    assert rows(db) == 0  # done with the job


def test_a_lost_lease_records_nothing(db: Database) -> None:
    checkpoint_with_files(db, 3)
    plan = start(db)
    ids = list(plan.file_ids.values())
    assert not records.save_progress(db, plan.claim, "someone-else", 1, ids)
    assert rows(db) == 0


def test_a_list_recorded_before_the_table_still_counts(db: Database) -> None:
    checkpoint_with_files(db, 4)
    plan = start(db)
    legacy = [spec.relpath for spec in plan.files[:2]]
    with db.session() as s:
        s.execute(update(Job).values(detail={"done": legacy}))
    assert records.save_progress(db, plan.claim, OWNER, 1, [plan.file_ids[plan.files[3].relpath]])
    assert jobs.release_job(db, plan.claim.job_id, OWNER)
    again = start(db)
    assert again.done == {*legacy, plan.files[3].relpath}
    assert records.mark_verified(db, again, OWNER, "loc", 1.0)
    with db.read_session() as s:
        assert "done" not in s.scalars(select(Job)).one().detail


def test_a_cancelled_job_forgets_its_files(db: Database) -> None:
    checkpoint_with_files(db, 2)
    plan = start(db)
    assert records.save_progress(db, plan.claim, OWNER, 1, list(plan.file_ids.values()))
    assert records.cancel(db, plan.claim, OWNER, "test")
    assert rows(db) == 0

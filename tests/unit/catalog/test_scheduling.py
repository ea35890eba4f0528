"""The scheduler's reads (``catalog.scheduling``), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.unit.catalog.helpers import BASE, TIERS, add_checkpoint
from tierd.daemon.catalog import scheduling
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import enqueue_copy_job, open_copy_hops
from tierd.daemon.catalog.models import JobState


def test_candidates_in_batches_with_states_and_open_hops(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduling, "BATCH", 2)
    ids = [add_checkpoint(db, step) for step in range(1, 6)]
    add_checkpoint(db, 6, ("verified",) * 4)  # nothing left to copy
    add_checkpoint(db, 7, state="waiting")  # not complete
    with db.session() as s:
        enqueue_copy_job(s, ids[0], "nvme", "pfs", 0)
        done = enqueue_copy_job(s, ids[1], "nvme", "pfs", 0)
        done.state = JobState.DONE.value
    with db.read_session() as s:
        found = list(scheduling.checkpoints_to_replicate(s, TIERS, include_missing=False))
        assert open_copy_hops(s, ids) == {(ids[0], "pfs")}
    assert [c.checkpoint_id for c in found] == ids
    assert found[0].covered == {"pfs"}
    assert found[1].covered == frozenset()  # a done job covers nothing
    assert dict(found[2].states) == {"nvme": "verified", "pfs": "pending", "s3": "pending", "dr": "pending"}
    assert found[2].created_at == BASE.replace(minute=3)


def test_a_missing_tier_row_makes_a_candidate_only_when_asked(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "verified", "verified", None))
    with db.read_session() as s:
        assert list(scheduling.checkpoints_to_replicate(s, TIERS, include_missing=False)) == []
        [found] = scheduling.checkpoints_to_replicate(s, TIERS, include_missing=True)
    assert (found.checkpoint_id, "dr" in found.states) == (cid, False)

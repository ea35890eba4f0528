"""Multipart uploads and their parts (``catalog.uploads``), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.unit.catalog.helpers import add_checkpoint
from tierd.daemon.backends.uploads import PartState, UploadState
from tierd.daemon.catalog import uploads
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Upload

MiB = 1024 * 1024


def test_begin_load_part_and_clear(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    key = (db, cid, "s3", "f")
    assert uploads.load_upload(*key) is None
    first = UploadState("u1", "k", 5 * MiB, 12 * MiB, (PartState(1, 5 * MiB, "e1", "c1"),))
    assert uploads.begin_upload(*key, first) is None
    assert not uploads.record_part(*key, PartState(2, 5 * MiB, "e2", "c2"))
    assert uploads.record_part(*key, PartState(2, 5 * MiB, "e2b", "c2b"))  # sent again: replaced
    row = uploads.load_upload(*key)
    assert row is not None
    assert (row.upload_id, row.key, row.part_size, row.size) == ("u1", "k", 5 * MiB, 12 * MiB)
    assert [(p.part_number, p.etag) for p in row.parts] == [(1, "e1"), (2, "e2b")]
    assert uploads.begin_upload(*key, UploadState("u2", "k", 5 * MiB, 12 * MiB)) == "u1"
    row = uploads.load_upload(*key)
    assert row is not None
    assert (row.upload_id, list(row.parts)) == ("u2", [])
    uploads.clear_upload(*key)
    assert uploads.load_upload(*key) is None
    uploads.clear_upload(*key)  # nothing recorded: nothing to do


def test_a_part_of_an_unrecorded_upload_is_refused(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    with pytest.raises(KeyError):
        uploads.record_part(db, cid, "s3", "f", PartState(1, 1, "e", "c"))


def test_recorded_upload_ids_are_per_tier(db: Database) -> None:
    cid = add_checkpoint(db, 1, ("verified", "verified", "pending", "pending"))
    assert uploads.recorded_upload_ids(db, "s3") == set()
    uploads.begin_upload(db, cid, "s3", "a", UploadState("u1", "a", 1, 1))
    uploads.begin_upload(db, cid, "s3", "b", UploadState("u2", "b", 1, 1))
    uploads.begin_upload(db, cid, "dr", "a", UploadState("u3", "a", 1, 1))
    assert uploads.recorded_upload_ids(db, "s3") == {"u1", "u2"}
    assert uploads.recorded_upload_ids(db, "dr") == {"u3"}


def test_forget_uploads_drops_every_record_of_a_hop(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    other = add_checkpoint(db, 2)
    for checkpoint, tier, rel in ((cid, "s3", "a"), (cid, "s3", "b"), (cid, "dr", "a"), (other, "s3", "a")):
        state = UploadState(f"{checkpoint}{tier}{rel}", rel, 5 * MiB, 6 * MiB)
        uploads.begin_upload(db, checkpoint, tier, rel, state)
        uploads.record_part(db, checkpoint, tier, rel, PartState(1, 5 * MiB, "e", "c"))
    with db.session() as s:
        uploads.forget_uploads(s, cid, "s3")
    with db.read_session() as s:
        left = sorted((u.checkpoint_id, u.tier, u.relpath, len(u.parts)) for u in s.scalars(select(Upload)))
    assert left == [(cid, "dr", "a", 1), (other, "s3", "a", 1)]

"""CatalogResumeStore: multipart state survives in the catalog (SQLite and PostgreSQL)."""

from __future__ import annotations

from structlog.testing import capture_logs

from tests.unit.catalog.helpers import add_checkpoint
from tierd.daemon.backends.uploads import PartState, UploadState
from tierd.daemon.catalog.db import Database
from tierd.daemon.pipeline.resume import CatalogResumeStore

MiB = 1024 * 1024


async def test_round_trip(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    store = CatalogResumeStore(db, cid, "s3")
    assert await store.load("demo/step1/a") is None
    state = UploadState("up-1", "prefix/demo/step1/a", 5 * MiB, 12 * MiB)
    await store.begin("demo/step1/a", state)
    await store.part_done("demo/step1/a", PartState(2, 5 * MiB, "etag2", "crc2"))
    await store.part_done("demo/step1/a", PartState(1, 5 * MiB, "etag1", "crc1"))

    # a new process (a new store) sees what the old one recorded, parts in order
    again = await CatalogResumeStore(db, cid, "s3").load("demo/step1/a")
    assert again == UploadState(
        "up-1",
        "prefix/demo/step1/a",
        5 * MiB,
        12 * MiB,
        (PartState(1, 5 * MiB, "etag1", "crc1"), PartState(2, 5 * MiB, "etag2", "crc2")),
    )
    # scoped to its checkpoint and tier
    assert await CatalogResumeStore(db, cid, "dr").load("demo/step1/a") is None
    await store.clear("demo/step1/a")
    assert await store.load("demo/step1/a") is None
    await store.clear("demo/step1/a")  # clearing twice is fine


async def test_begin_replaces_and_reports_a_restart(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    store = CatalogResumeStore(db, cid, "s3")
    await store.begin("f", UploadState("old", "f", 5 * MiB, 6 * MiB, (PartState(1, 5 * MiB, "e", "c"),)))
    with capture_logs() as logs:
        loaded = await store.load("f")
        assert loaded is not None
        await store.clear("f")  # the backend found the upload gone on the server
        await store.begin("f", UploadState("new", "f", 5 * MiB, 6 * MiB))
        await store.part_done("f", PartState(1, 5 * MiB, "e1", "c1"))
        await store.part_done("f", PartState(1, 5 * MiB, "e1b", "c1"))  # the same part sent again
    events = [(e["event"], e.get("old"), e.get("new"), e.get("part")) for e in logs]
    assert events == [
        ("upload_resume_loaded", None, None, None),
        ("upload_restarted", "old", "new", None),
        ("upload_part_resent", None, None, 1),
    ]
    state = await store.load("f")
    assert state is not None
    assert (state.upload_id, state.parts) == ("new", (PartState(1, 5 * MiB, "e1b", "c1"),))

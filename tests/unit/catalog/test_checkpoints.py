"""Runs, checkpoints and files (``catalog.checkpoints``), on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass

from tests.unit.catalog.helpers import BASE, add_checkpoint
from tierd.daemon.catalog import checkpoints as cp
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import CheckpointState


@dataclass(frozen=True)
class Hashed:
    relpath: str
    size: int
    mtime_ns: int
    checksum: str
    uid: int | None = None
    gid: int | None = None
    mode: int | None = None


def test_a_run_is_created_once(db: Database) -> None:
    with db.session() as s:
        first = cp.get_or_create_run(s, "demo")
        s.flush()
        assert cp.get_or_create_run(s, "demo").id == first.id
    with db.session() as s:
        assert cp.get_or_create_run(s, "demo").id == first.id


def test_a_lost_insert_race_leaves_the_transaction_usable(db: Database) -> None:
    with db.session() as s:
        run = cp.get_or_create_run(s, "demo")
        row = cp.insert_checkpoint(s, run, 5, "demo/step5", "dcp", "n1")
        assert row is not None
        assert row.state == CheckpointState.COMPLETE.value  # the default
        assert cp.insert_checkpoint(s, run, 5, "demo/other", "dcp", "n1") is None
        waiting = cp.insert_checkpoint(s, run, 6, "demo/step6", "dcp", "n1", state="waiting")
        assert waiting is not None
    assert cp.step_id_and_state(db, "demo", 5) == (row.id, "complete")
    assert cp.step_id_and_state(db, "demo", 6) == (waiting.id, "waiting")
    assert cp.step_id_and_state(db, "demo", 7) is None
    assert cp.checkpoint_state(db, waiting.id) == "waiting"
    assert cp.checkpoint_state(db, 12345) is None


def test_find_step_by_step_then_by_path(db: Database) -> None:
    with db.session() as s:
        run = cp.get_or_create_run(s, "demo")
        other_run = cp.get_or_create_run(s, "renamed")
        s.flush()
        dcp = cp.insert_checkpoint(s, run, 1, "demo/step1", "dcp", "n1")
        nvrx = cp.insert_checkpoint(s, run, 2, "demo/session", "nvrx_local", "n1")
        assert dcp is not None
        assert nvrx is not None
        assert cp.find_step(s, run, 1, "elsewhere", "n1") is dcp
        assert cp.find_step(s, other_run, 9, "demo/step1", "n1") is dcp  # one path, one step
        assert cp.find_step(s, other_run, 9, "demo/step1", "n2") is None  # another node's path
        assert cp.find_step(s, other_run, 3, "demo/session", "n1") is None  # nvrx: every step shares it
        assert cp.find_step(s, other_run, 2, "demo/session", "n1") is nvrx


def test_complete_a_checkpoint_and_read_it_back(db: Database) -> None:
    files = [Hashed("demo/step1/b", 5, 20, "cb"), Hashed("demo/step1/a", 3, 10, "ca")]
    with db.session() as s:
        run = cp.get_or_create_run(s, "demo")
        row = cp.insert_checkpoint(s, run, 1, "demo/step1", "dcp", "n1", state="waiting")
        assert row is not None
        cp.complete_checkpoint(s, row, files, created_at=BASE, completed_at=BASE)
    with db.session() as s:
        listed = cp.files_of(s, row.id)
        assert [(f.relpath, f.size, f.mtime_ns, f.checksum, f.checksum_algo) for f in listed] == [
            ("demo/step1/a", 3, 10, "ca", "crc64nvme"),
            ("demo/step1/b", 5, 20, "cb", "crc64nvme"),
        ]
        cp.update_file_mtimes(s, {listed[0].id: 11, 987654: 1})  # a file gone meanwhile is skipped
    with db.read_session() as s:
        [done] = cp.complete_checkpoints_with_files(s, "n1")
        assert (done.run.name, done.state, done.total_bytes, done.file_count) == ("demo", "complete", 8, 2)
        assert (done.created_at, done.completed_at) == (BASE, BASE)
        assert [f.mtime_ns for f in done.files] == [11, 20]
        assert cp.complete_checkpoints_with_files(s, "n2") == []
        assert cp.creation_times(s, [row.id, 12345]) == [(row.id, BASE)]


def test_recorded_and_waiting_steps(db: Database) -> None:
    add_checkpoint(db, 1)
    add_checkpoint(db, 2, state="changed")
    waiting = add_checkpoint(db, 3, state="waiting", node="n1")
    add_checkpoint(db, 4, state="waiting", node="n2")
    assert sorted(cp.recorded_steps(db)) == [
        ("demo", 1, "demo/step1", "dcp"),
        ("demo", 2, "demo/step2", "dcp"),
    ]
    assert cp.waiting_steps(db, "n1") == [(waiting, "demo", 3, "demo/step3", "dcp")]


def test_a_changed_checkpoint_and_its_replicas_for_the_api(db: Database) -> None:
    cid = add_checkpoint(db, 1)
    with db.session() as s:
        row = cp.find_checkpoint(s, cid)
        assert row is not None
        cp.mark_checkpoint_changed(row)
        assert cp.find_checkpoint(s, 12345) is None
    with db.read_session() as s:
        loaded = cp.load_checkpoint(s, cid)
    assert (loaded.run.name, loaded.state) == ("demo", "changed")
    assert [r.tier for r in loaded.replicas] == ["nvme", "pfs", "s3", "dr"]

"""Owners and modes of files and directories through the catalog, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass

from tierd.daemon.catalog import checkpoints as cp
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.ownership import (
    RecordedDirectory,
    directories_of,
    directory_owners,
    record_directories,
)
from tierd.daemon.catalog.parts import add_part

#: The largest id chown gives a file (``(uid_t)-1`` means "leave it"): past PostgreSQL's INTEGER.
HIGHEST_ID = 2**32 - 2


@dataclass(frozen=True)
class Hashed:
    relpath: str
    size: int
    mtime_ns: int
    checksum: str
    uid: int | None
    gid: int | None
    mode: int | None


def test_files_and_directories_keep_owner_group_and_mode(db: Database) -> None:
    files = [
        Hashed("demo/step1/a", 3, 10, "ca", 1234, 1234, 0o640),
        Hashed("demo/step1/sub/b", 5, 20, "cb", HIGHEST_ID, HIGHEST_ID, 0o4755),
        Hashed("demo/step1/old", 1, 5, "cc", None, None, None),  # recorded before owners were kept
    ]
    dirs = [
        RecordedDirectory("demo/step1/sub", 1234, 1234, 0o700),
        RecordedDirectory("demo", 0, 0, 0o755),
        RecordedDirectory("demo/step1", 1234, 1234, 0o2750),
    ]
    with db.session() as s:
        run = cp.get_or_create_run(s, "demo")
        row = cp.insert_checkpoint(s, run, 1, "demo/step1", "dcp", "n1", state="waiting")
        assert row is not None
        add_part(s, row, "n1", files, ["nvme", "pfs"], now=utcnow(), marked=True)
        record_directories(s, row.id, dirs)
        checkpoint_id = row.id
    with db.session() as s:  # another node records the same directory later: the first keeps it
        record_directories(s, checkpoint_id, [RecordedDirectory("demo/step1", 99, 99, 0o777)])
        record_directories(s, checkpoint_id, [])
    with db.read_session() as s:
        stored = {f.relpath: (f.uid, f.gid, f.mode) for f in cp.files_of(s, checkpoint_id)}
        listed = directories_of(s, checkpoint_id)
    assert stored == {f.relpath: (f.uid, f.gid, f.mode) for f in files}
    assert listed == [dirs[1], dirs[2], dirs[0]]  # parents first
    assert directory_owners(db, checkpoint_id) == listed
    with db.session() as s:
        shown = cp.get_checkpoint(s, checkpoint_id)
        assert [(d.relpath, d.mode) for d in shown.directories] == [
            ("demo", 0o755),
            ("demo/step1", 0o2750),
            ("demo/step1/sub", 0o700),
        ]
    assert directory_owners(db, 999_999) == []

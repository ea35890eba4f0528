"""Owners and modes recorded at first sight: each file's (``File.uid/gid/mode``) and each directory's.

Detection records them with the files (``parts.add_part``) and the directories those lie in
(``record_directories``); copies and restores read them back (``directories_of``,
``directory_owners``) to give what they create the same owner, group and mode. A step in
several parts records the directories each node sees; the first recorder of a path keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import insert_ignoring_duplicates
from tierd.daemon.catalog.models import Directory

__all__ = ["DirectoryFields", "RecordedDirectory", "directories_of", "directory_owners", "record_directories"]

_DIRECTORIES = Directory.metadata.tables[Directory.__tablename__]


class DirectoryFields(Protocol):
    """A directory to record: its path relative to the tier-0 root, owner, group and mode."""

    @property
    def relpath(self) -> str:
        """Path relative to the tier-0 root."""

    @property
    def uid(self) -> int:
        """Owner."""

    @property
    def gid(self) -> int:
        """Group."""

    @property
    def mode(self) -> int:
        """Permission bits (``stat.S_IMODE``)."""


@dataclass(frozen=True)
class RecordedDirectory:
    """A directory of a checkpoint as the catalog holds it (``relpath`` relative to a tier's root)."""

    relpath: str
    uid: int
    gid: int
    mode: int


def record_directories(session: Session, checkpoint_id: int, directories: Sequence[DirectoryFields]) -> None:
    """Record the checkpoint's ``directories``; a path recorded already keeps what it has."""
    if not directories:
        return
    values = [
        {"checkpoint_id": checkpoint_id, "relpath": d.relpath, "uid": d.uid, "gid": d.gid, "mode": d.mode}
        for d in directories
    ]
    session.execute(insert_ignoring_duplicates(session, _DIRECTORIES), values)


def directories_of(session: Session, checkpoint_id: int) -> list[RecordedDirectory]:
    """The checkpoint's recorded directories, parents before children (by depth, then path)."""
    rows = session.execute(
        select(Directory.relpath, Directory.uid, Directory.gid, Directory.mode).where(
            Directory.checkpoint_id == checkpoint_id
        )
    )
    found = [RecordedDirectory(relpath, uid, gid, mode) for relpath, uid, gid, mode in rows]
    return sorted(found, key=lambda d: (d.relpath.count("/"), d.relpath))


def directory_owners(db: Database, checkpoint_id: int) -> list[RecordedDirectory]:
    """``directories_of`` in a read session of its own (blocking). Raises CatalogError."""
    with db.read_session() as session:
        return directories_of(session, checkpoint_id)

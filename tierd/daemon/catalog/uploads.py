"""S3 multipart uploads in flight and their finished parts, kept so a restart resumes them.

A part recorded here was acknowledged by the store, so after a crash the backend re-sends
only the parts that are missing. The pipeline's ``CatalogResumeStore`` calls these for
one (checkpoint, tier) pair; the janitor, and a hop clearing its leftovers before it
copies, read which uploads are to be kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Upload, UploadPart, utcnow

__all__ = [
    "PartFields",
    "UploadFields",
    "begin_upload",
    "clear_upload",
    "forget_part_uploads",
    "forget_uploads",
    "hop_upload_ids",
    "load_upload",
    "record_part",
    "recorded_upload_ids",
]


class PartFields(Protocol):
    """A finished part as the backend reports it (``backends.base.PartState``)."""

    @property
    def part_number(self) -> int:
        """The part number, from 1."""

    @property
    def size(self) -> int:
        """Bytes of the part."""

    @property
    def etag(self) -> str:
        """The store's ETag of the part."""

    @property
    def checksum(self) -> str:
        """The part's checksum."""


class UploadFields(Protocol):
    """An upload as the backend begins it (``backends.base.UploadState``)."""

    @property
    def upload_id(self) -> str:
        """The store's UploadId."""

    @property
    def key(self) -> str:
        """The object key."""

    @property
    def part_size(self) -> int:
        """Bytes of every part but the last."""

    @property
    def size(self) -> int:
        """Bytes of the whole object."""

    @property
    def parts(self) -> Sequence[PartFields]:
        """The parts finished so far."""


#: Bulk deletes of rows no caller holds as objects: no search of the session for them.
_UNSYNCED = {"synchronize_session": False}


def _find(session: Session, checkpoint_id: int, tier: str, relpath: str) -> Upload | None:
    return session.scalars(
        select(Upload).where(
            Upload.checkpoint_id == checkpoint_id,
            Upload.tier == tier,
            Upload.relpath == relpath,
        )
    ).one_or_none()


def load_upload(db: Database, checkpoint_id: int, tier: str, relpath: str) -> Upload | None:
    """The recorded upload of ``relpath`` with its parts loaded (by part number), or None."""
    with db.read_session() as session:
        row = _find(session, checkpoint_id, tier, relpath)
        if row is not None:
            _ = row.parts  # loaded here: the row is read after the session ends
        return row


def begin_upload(
    db: Database, checkpoint_id: int, tier: str, relpath: str, state: UploadFields
) -> str | None:
    """Record a new upload with its parts, replacing an earlier one; returns the replaced UploadId."""
    with db.session() as session:
        old = _find(session, checkpoint_id, tier, relpath)
        replaced = old.upload_id if old is not None else None
        if old is not None:
            session.delete(old)
            session.flush()
        row = Upload(
            checkpoint_id=checkpoint_id,
            tier=tier,
            relpath=relpath,
            key=state.key,
            upload_id=state.upload_id,
            part_size=state.part_size,
            size=state.size,
            created_at=utcnow(),
        )
        row.parts = [
            UploadPart(part_number=p.part_number, size=p.size, etag=p.etag, checksum=p.checksum)
            for p in state.parts
        ]
        session.add(row)
        return replaced


def record_part(db: Database, checkpoint_id: int, tier: str, relpath: str, part: PartFields) -> bool:
    """Record one finished part; True when it replaced an earlier record of the same part.

    Raises KeyError when no upload is recorded for ``relpath``.
    """
    with db.session() as session:
        row = _find(session, checkpoint_id, tier, relpath)
        if row is None:
            raise KeyError(f"no upload recorded for {relpath!r} on {tier}")
        existing = session.get(UploadPart, (row.id, part.part_number))
        if existing is not None:
            existing.size, existing.etag, existing.checksum = part.size, part.etag, part.checksum
            return True
        session.add(
            UploadPart(
                upload_pk=row.id,
                part_number=part.part_number,
                size=part.size,
                etag=part.etag,
                checksum=part.checksum,
            )
        )
        return False


def clear_upload(db: Database, checkpoint_id: int, tier: str, relpath: str) -> None:
    """Forget the upload of ``relpath`` (nothing to do when none is recorded)."""
    with db.session() as session:
        row = _find(session, checkpoint_id, tier, relpath)
        if row is not None:
            session.delete(row)


def forget_uploads(session: Session, checkpoint_id: int, tier: str) -> None:
    """Drop every upload record of a hop (inside the caller's transaction, once it is over)."""
    ids = select(Upload.id).where(Upload.checkpoint_id == checkpoint_id, Upload.tier == tier)
    session.execute(delete(UploadPart).where(UploadPart.upload_pk.in_(ids)), execution_options=_UNSYNCED)
    session.execute(
        delete(Upload).where(Upload.checkpoint_id == checkpoint_id, Upload.tier == tier),
        execution_options=_UNSYNCED,
    )


def forget_part_uploads(session: Session, checkpoint_id: int, tier: str, relpaths: Sequence[str]) -> None:
    """Drop the upload records of one part's files (its hop is over; other parts' go on)."""
    ids = select(Upload.id).where(
        Upload.checkpoint_id == checkpoint_id, Upload.tier == tier, Upload.relpath.in_(list(relpaths))
    )
    session.execute(delete(UploadPart).where(UploadPart.upload_pk.in_(ids)), execution_options=_UNSYNCED)
    session.execute(
        delete(Upload).where(
            Upload.checkpoint_id == checkpoint_id, Upload.tier == tier, Upload.relpath.in_(list(relpaths))
        ),
        execution_options=_UNSYNCED,
    )


def recorded_upload_ids(db: Database, tier: str) -> set[str]:
    """The UploadIds the catalog records for ``tier`` (uploads to resume, not to abort)."""
    with db.read_session() as session:
        return set(session.scalars(select(Upload.upload_id).where(Upload.tier == tier)))


def hop_upload_ids(db: Database, checkpoint_id: int, tier: str) -> set[str]:
    """The UploadIds the catalog records for one hop (checkpoint into ``tier``): to resume, not abort."""
    with db.read_session() as session:
        return set(
            session.scalars(
                select(Upload.upload_id).where(Upload.checkpoint_id == checkpoint_id, Upload.tier == tier)
            )
        )

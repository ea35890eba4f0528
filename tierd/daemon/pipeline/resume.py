"""Multipart upload state kept in the catalog, so a restarted daemon resumes uploads.

One ``CatalogResumeStore`` serves one checkpoint's hop into one tier; the backend calls
it as parts finish. A part recorded here was acknowledged by the store, so after a
crash the backend re-sends only the parts that are missing.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import PartState, UploadState
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Upload, UploadPart, utcnow
from tierd.logs import get_logger

__all__ = ["CatalogResumeStore", "forget_uploads"]

log = get_logger(__name__)


class CatalogResumeStore:
    """The ResumeStore of one (checkpoint, tier) pair, on the catalog's uploads tables."""

    def __init__(self, db: Database, checkpoint_id: int, tier: str) -> None:
        self.db = db
        self.checkpoint_id = checkpoint_id
        self.tier = tier
        self._loaded: dict[str, str] = {}

    async def load(self, relpath: str) -> UploadState | None:
        """The recorded upload for ``relpath`` with its finished parts, or None."""
        state = await blocking(self._load, relpath)
        if state is not None:
            self._loaded[relpath] = state.upload_id
            log.info(
                "upload_resume_loaded",
                tier=self.tier,
                relpath=relpath,
                upload_id=state.upload_id,
                parts=len(state.parts),
            )
        return state

    async def begin(self, relpath: str, state: UploadState) -> None:
        """Record a new upload, replacing an earlier one for ``relpath``."""
        replaced = await blocking(self._begin, relpath, state) or self._loaded.pop(relpath, None)
        if replaced is not None and replaced != state.upload_id:
            # The recorded upload could not be resumed (the store lost it, or its parts).
            log.warning(
                "upload_restarted", tier=self.tier, relpath=relpath, old=replaced, new=state.upload_id
            )

    async def part_done(self, relpath: str, part: PartState) -> None:
        """Record one finished part (a part sent again replaces the earlier record)."""
        if await blocking(self._part_done, relpath, part):
            log.warning("upload_part_resent", tier=self.tier, relpath=relpath, part=part.part_number)

    async def clear(self, relpath: str) -> None:
        """Forget the upload of ``relpath``."""
        await blocking(self._clear, relpath)

    def _row(self, session: Session, relpath: str) -> Upload | None:
        return session.scalars(
            select(Upload).where(
                Upload.checkpoint_id == self.checkpoint_id,
                Upload.tier == self.tier,
                Upload.relpath == relpath,
            )
        ).one_or_none()

    def _load(self, relpath: str) -> UploadState | None:
        with self.db.read_session() as session:
            row = self._row(session, relpath)
            if row is None:
                return None
            parts = tuple(PartState(p.part_number, p.size, p.etag, p.checksum) for p in row.parts)
            return UploadState(row.upload_id, row.key, row.part_size, row.size, parts)

    def _begin(self, relpath: str, state: UploadState) -> str | None:
        with self.db.session() as session:
            old = self._row(session, relpath)
            replaced = old.upload_id if old is not None else None
            if old is not None:
                session.delete(old)
                session.flush()
            row = Upload(
                checkpoint_id=self.checkpoint_id,
                tier=self.tier,
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

    def _part_done(self, relpath: str, part: PartState) -> bool:
        with self.db.session() as session:
            row = self._row(session, relpath)
            if row is None:
                raise KeyError(f"no upload recorded for {relpath!r} on {self.tier}")
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

    def _clear(self, relpath: str) -> None:
        with self.db.session() as session:
            row = self._row(session, relpath)
            if row is not None:
                session.delete(row)


def forget_uploads(session: Session, checkpoint_id: int, tier: str) -> None:
    """Drop every upload record of a hop (inside the caller's transaction, once it is verified)."""
    ids = select(Upload.id).where(Upload.checkpoint_id == checkpoint_id, Upload.tier == tier)
    session.execute(delete(UploadPart).where(UploadPart.upload_pk.in_(ids)))
    session.execute(delete(Upload).where(Upload.checkpoint_id == checkpoint_id, Upload.tier == tier))

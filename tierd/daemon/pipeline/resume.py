"""Multipart upload state kept in the catalog, so a restarted daemon resumes uploads.

One ``CatalogResumeStore`` serves one checkpoint's hop into one tier; the backend calls
it as parts finish, and it keeps them with ``catalog.uploads``. A part recorded there
was acknowledged by the store, so after a crash the backend re-sends only the parts that
are missing.
"""

from __future__ import annotations

from tierd.daemon.aio import blocking
from tierd.daemon.backends.uploads import PartState, UploadState
from tierd.daemon.catalog import uploads
from tierd.daemon.catalog.db import Database
from tierd.logs import get_logger

__all__ = ["CatalogResumeStore"]

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
        replaced = await blocking(uploads.begin_upload, *self._key(relpath), state) or self._loaded.pop(
            relpath, None
        )
        if replaced is not None and replaced != state.upload_id:
            # The recorded upload could not be resumed (the store lost it, or its parts).
            log.warning(
                "upload_restarted", tier=self.tier, relpath=relpath, old=replaced, new=state.upload_id
            )

    async def part_done(self, relpath: str, part: PartState) -> None:
        """Record one finished part (a part sent again replaces the earlier record)."""
        if await blocking(uploads.record_part, *self._key(relpath), part):
            log.warning("upload_part_resent", tier=self.tier, relpath=relpath, part=part.part_number)

    async def clear(self, relpath: str) -> None:
        """Forget the upload of ``relpath``."""
        await blocking(uploads.clear_upload, *self._key(relpath))

    def _key(self, relpath: str) -> tuple[Database, int, str, str]:
        return self.db, self.checkpoint_id, self.tier, relpath

    def _load(self, relpath: str) -> UploadState | None:
        row = uploads.load_upload(*self._key(relpath))
        if row is None:
            return None
        parts = tuple(PartState(p.part_number, p.size, p.etag, p.checksum) for p in row.parts)
        return UploadState(row.upload_id, row.key, row.part_size, row.size, parts)

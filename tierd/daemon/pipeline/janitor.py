"""Abort multipart uploads (and POSIX temp files) that interrupted writes left behind.

A backend's ``abort_stale_uploads`` removes everything older than an age; it cannot be
told which uploads the catalog still wants to resume, and some stores report a made-up
"initiated" time (moto says 2010 for every upload), so age alone protects nothing there.
So a tier is only swept while it is idle: no upload recorded in the catalog and no copy
job queued or running into it. The sweep runs inside the pipeline's loop, between
scheduling and claiming, so this process starts no upload while it runs. A busy tier
is tried again on the next pass until it has been swept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping

from sqlalchemy import select

from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Job, JobKind, JobState, Upload
from tierd.errors import TierdError
from tierd.logs import get_logger

__all__ = ["Janitor", "busy_tiers"]

log = get_logger(__name__)


def busy_tiers(db: Database, tiers: Collection[str]) -> set[str]:
    """Those of ``tiers`` with an upload the catalog wants, or a copy job queued or running into them."""
    with db.read_session() as session:
        uploading = session.scalars(select(Upload.tier).where(Upload.tier.in_(list(tiers))).distinct())
        copying = session.scalars(
            select(Job.dst_tier)
            .where(
                Job.kind == JobKind.COPY.value,
                Job.state.in_([JobState.QUEUED.value, JobState.RUNNING.value]),
                Job.dst_tier.in_(list(tiers)),
            )
            .distinct()
        )
        return {t for t in (*uploading, *copying) if t is not None}


class Janitor:
    """Sweeps each tier for stale uploads every ``interval`` seconds, when it is idle."""

    def __init__(
        self,
        db: Database,
        backends: Mapping[str, Backend],
        *,
        older_than: float,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db, self.backends = db, backends
        self.older_than, self.interval, self._clock = older_than, interval, clock
        self._next: dict[str, float] = dict.fromkeys(backends, clock())

    async def sweep_due(self) -> int:
        """Sweep the idle tiers whose turn has come; returns how many leftovers were removed."""
        now = self._clock()
        due = [name for name, at in self._next.items() if at <= now]
        if not due:
            return 0
        busy = await blocking(busy_tiers, self.db, due)
        removed = 0
        for name in due:
            if name in busy:
                continue  # try again on the next pass
            self._next[name] = now + self.interval
            try:
                count = await self.backends[name].abort_stale_uploads(self.older_than)
            except TierdError as exc:
                log.warning("stale_upload_sweep_failed", tier=name, error=str(exc))
                continue
            if count:
                log.info("stale_uploads_aborted", tier=name, count=count, older_than_seconds=self.older_than)
            removed += count
        return removed

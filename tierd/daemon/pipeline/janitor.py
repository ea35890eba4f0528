"""Abort multipart uploads (and remove POSIX temp files) that interrupted writes left behind.

Every ``interval`` seconds each tier is swept for leftovers older than ``older_than``. The
sweep passes the UploadIds recorded in the catalog's ``uploads`` table for that tier as
``keep``: those belong to hops that will resume them, and the backend never aborts them,
nor the uploads it is writing itself. So a tier is swept even while copies into it run.
The age threshold stays: it spares an upload another process has just begun and not yet
recorded, on every store whose "initiated" time is real (moto reports 2010 for all).
It is the backstop: a hop removes its own files' leftovers, whatever their age, when it
starts (``HopRunner``, ``Backend.remove_leftovers``); the sweep catches those of hops that
never run again (a checkpoint deleted meanwhile, a tier taken out of the chain).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.uploads import recorded_upload_ids
from tierd.errors import TierdError
from tierd.logs import get_logger

__all__ = ["Janitor"]

log = get_logger(__name__)


class Janitor:
    """Sweeps each tier for stale uploads every ``interval`` seconds."""

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
        """Sweep the tiers whose turn has come; returns how many leftovers were removed."""
        now = self._clock()
        removed = 0
        for name in [name for name, at in self._next.items() if at <= now]:
            self._next[name] = now + self.interval
            try:
                keep = await blocking(recorded_upload_ids, self.db, name)
                count = await self.backends[name].abort_stale_uploads(self.older_than, keep=keep)
            except TierdError as exc:
                log.warning("stale_upload_sweep_failed", tier=name, error=str(exc))
                continue
            if count:
                log.info(
                    "stale_uploads_aborted",
                    tier=name,
                    count=count,
                    kept=len(keep),
                    older_than_seconds=self.older_than,
                )
            removed += count
        return removed

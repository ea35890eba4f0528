"""Files of recorded checkpoints deleted or moved away from tier 0, noticed from the watcher's events.

A wiped NVMe or an ``rm -rf`` of a step used to be noticed only by the next reconcile (up to
``reconcile_interval_seconds``): until then the API showed the tier-0 replica ``verified`` and
a resuming job was handed a path to nothing. Each delete or move event whose path lies in a
recorded checkpoint's (the in-memory ``KnownSteps``: no query per event) arms a timer for that
checkpoint; once no such event came for ``SETTLE_SECONDS`` (``MAX_SECONDS`` after the first at
most), the checkpoint is compared with the disk as the reconcile does (``changes``): its path
gone, the tier-0 replica is ``deleted`` (audited ``vanished``); some files gone, the step is
``changed``. A tier-0 replica tierd itself is deleting is left alone (``apply_change``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tierd.daemon.aio import blocking
from tierd.daemon.context import Context
from tierd.daemon.detect.changes import apply_change, compare, load_recorded
from tierd.daemon.detect.hostile import printable
from tierd.daemon.detect.known import KnownSteps
from tierd.daemon.service import InFlight
from tierd.errors import CatalogError
from tierd.logs import get_logger

__all__ = ["MAX_SECONDS", "SETTLE_SECONDS", "Removals"]

log = get_logger(__name__)

#: A checkpoint is compared with the disk this long after the last delete or move under its
#: path (an ``rm -rf`` is over by then; seen half-way it would read ``changed`` first) ...
SETTLE_SECONDS = 0.5
#: ... and at most this long after the first one (a tree that takes longer to remove).
MAX_SECONDS = 5.0


class Removals:
    """Timers per recorded checkpoint touched by deletes and moves, and the comparison each runs."""

    def __init__(
        self,
        ctx: Context,
        inflight: InFlight,
        known: Callable[[], KnownSteps],
        catalog_failed: Callable[[CatalogError], None],
    ) -> None:
        """Comparisons run in ``inflight`` (the service's, drained at its stop).

        ``known`` gives what is recorded now; ``catalog_failed`` is told when the catalog fails.
        """
        self.ctx = ctx
        self.inflight = inflight
        self.known = known
        self.catalog_failed = catalog_failed
        self.tier0 = ctx.config.tier0.path.resolve()
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}  # relpath -> (first, timer)
        self._stopped = False

    def post(self, path: Path) -> None:
        """On the event loop: ``path`` was deleted or moved away; (re)arm its checkpoint's timer."""
        relpath = self.recorded_at(path)
        if relpath is None or self._stopped:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        first, armed = self._timers.get(relpath, (now, None))
        if armed is not None:
            armed.cancel()
        delay = min(SETTLE_SECONDS, max(0.0, first + MAX_SECONDS - now))
        self._timers[relpath] = (first, loop.call_later(delay, self._due, relpath))

    def recorded_at(self, path: Path) -> str | None:
        """The path (relative to tier 0) of the recorded checkpoint holding ``path``, or None."""
        try:
            parts = path.relative_to(self.tier0).parts
        except ValueError:
            return None
        known = self.known()
        for end in range(len(parts), 0, -1):
            relpath = "/".join(parts[:end])
            if known.has_path(relpath):
                return relpath
        return None

    def _due(self, relpath: str) -> None:
        self._timers.pop(relpath, None)
        if not self._stopped:
            self.inflight.spawn(self.compare(relpath), f"compare {relpath}")

    async def compare(self, relpath: str) -> None:
        """Compare the recorded checkpoint at ``relpath`` with the disk and record what differs."""
        node = self.ctx.config.node
        try:
            for rec in await blocking(load_recorded, self.ctx.db, node, paths=[relpath], changed_too=True):
                change = await blocking(compare, rec, self.tier0)
                if change is not None:
                    await blocking(apply_change, self.ctx.db, rec, change)
        except CatalogError as exc:
            self.catalog_failed(exc)
        except Exception:
            log.exception("compare_failed", path=printable(relpath))

    def stop(self) -> None:
        """Cancel the armed timers (comparisons under way finish with the service's drain)."""
        self._stopped = True
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

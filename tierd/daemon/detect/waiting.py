"""The waiting sweep: steps the catalog holds as ``waiting``, looked at again until they complete.

A step waits when a training job notified it before its detector agreed, or when it spans
nodes and the catalog still lacks parts of it. The sweep gives each waiting step this node
owes a part to to its format's detector again and records it once the detector agrees, or
this node's part of it once that part is stable. It runs after each reconcile, at once when
woken (``Context.wake_waiting``: a notify left a step waiting here; another daemon's NOTIFY
that it made a waiting step, heard by the pipeline's listener on PostgreSQL: one per step, not
one per part, so a fleet of N sweeps N times a step, not N squared), every
``WAITING_POLL_SECONDS`` while the last sweep found steps this node owes a part to (files
settling, a marker to land), and otherwise every ``WAITING_IDLE_SECONDS``: what only another
process could cause without a wake-up (a SQLite catalog written by another). An idle daemon
swept every 2 s: 30 sweeps a minute of two catalog reads each, the most run statements of an
idle fleet. At most once per ``GROW_SECONDS`` a sweep also grows this node's recorded parts
by expected files written since (a rank that wrote late), and completes a step whose parts
are all in but whose last recorder died before completing it (``LATE``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from tierd.daemon.aio import blocking
from tierd.daemon.beneath import Root
from tierd.daemon.catalog.parts import complete_parts, lacking_files
from tierd.daemon.context import Context
from tierd.daemon.detect.detector import Settings, Verdict, incomplete
from tierd.daemon.detect.known import Waiting, load_growing, load_waiting
from tierd.daemon.detect.parts import inspect_part, late_files_verdict, nodes_expected, part_verdict
from tierd.daemon.detect.record import record_checkpoint
from tierd.daemon.detect.registry import BY_NAME, detectors_for
from tierd.daemon.detect.scan import RootSpec, detect_path
from tierd.daemon.detect.tree import exists
from tierd.errors import CatalogError, Refused, TierdError
from tierd.logs import get_logger

__all__ = ["GROW_SECONDS", "LATE", "WAITING_IDLE_SECONDS", "WAITING_POLL_SECONDS", "Watcher", "WaitingSweep"]

log = get_logger(__name__)

#: How often the steps this node owes a part to are looked at again while there are some.
WAITING_POLL_SECONDS = 2.0
#: How often the sweep runs unwoken while this node owes no waiting step a part.
WAITING_IDLE_SECONDS = 60.0
#: How often a sweep also looks for expected files written after a part was recorded: a rare
#: late rank, checked rarely, so a fleet's backlog of waiting steps (or a burst of wake-ups)
#: does not multiply the catalog's reads.
GROW_SECONDS = 60.0
#: A step whose parts are all in is completed by the waiting sweep once none came for this long:
#: its last recorder died before completing it (a live one does so at once).
LATE = timedelta(seconds=30)

#: (format, verdict, how to look again) of a waiting step to record.
ToRecord = tuple[str, Verdict, Callable[[], Verdict]]


class Watcher(Protocol):
    """What the sweep shares with the watcher service: what is recorded, and what was said once."""

    def mark_recorded(self, run: str, step: int, relpath: str, fmt: str) -> None:
        """``relpath`` is recorded: scans skip it, and its deferral is forgotten."""
        ...

    def log_deferral(self, relpath: str, reason: str, delay: float) -> None:
        """Log why ``relpath`` is looked at again later, once per path and reason."""
        ...

    async def refused(
        self, exc: Refused, run: str, step: int, fmt: str, relpath: str, checkpoint_id: int | None = None
    ) -> None:
        """Warn and audit a refusal once per checkpoint and reason."""
        ...


class WaitingSweep:
    """Looks again at this node's waiting steps; records each one its detector now agrees with."""

    def __init__(self, ctx: Context, roots: Sequence[RootSpec], watcher: Watcher) -> None:
        self.ctx = ctx
        self.roots = roots
        self.watcher = watcher
        self.tier0 = Root(ctx.config.tier0.path.resolve())  # waiting steps are reached from it
        #: Whether the last sweep found waiting steps this node owes a part to.
        self.owing = False
        self._grown_at: float | None = None  # monotonic time of the last ``grow_parts``

    def interval(self) -> float:
        """Seconds until the next unwoken sweep: soon while this node owes a part, else seldom."""
        return WAITING_POLL_SECONDS if self.owing else WAITING_IDLE_SECONDS

    async def sweep(self) -> None:
        """Record each waiting (notified) step whose detector now agrees it is complete.

        At most once per ``GROW_SECONDS`` (the first sweep included), also grow this node's
        recorded parts by the expected files that appeared here since (``grow_parts``).
        Raises CatalogError.
        """
        owed = await blocking(load_waiting, self.ctx.db, self.ctx.config.node)
        self.owing = bool(owed)
        for waiting in owed:
            await self._complete_waiting(waiting)
        now = time.monotonic()
        if self._grown_at is None or now - self._grown_at >= GROW_SECONDS:
            self._grown_at = now
            await self.grow_parts()

    async def grow_parts(self) -> None:
        """Add to this node's parts of waiting steps the expected files written here since.

        A rank that wrote its file after its node's part was recorded (its files had looked
        settled) would otherwise leave the step waiting for a file the node holds. A step
        lacking nothing is completed: its last recorder died before it could.
        """
        tier0 = self.ctx.config.tier0.path.resolve()
        for waiting in await blocking(load_growing, self.ctx.db, self.ctx.config.node):
            lacking = await blocking(self._lacking, waiting.id)
            if lacking:
                await self._grow(waiting, tier0 / waiting.relpath, lacking)
            elif await blocking(self._complete, waiting, str(tier0 / waiting.relpath)):
                log.warning("step_completed_late", id=waiting.id, run=waiting.run, step=waiting.step)
                self.ctx.wake_pipeline(waiting.id)

    def _complete(self, waiting: Waiting, location: str) -> bool:
        tiers = [t.name for t in self.ctx.config.tiers]
        return complete_parts(self.ctx.db, waiting.id, tiers, location, actor="detector", quiet_for=LATE)

    def _lacking(self, checkpoint_id: int) -> list[str]:
        with self.ctx.db.read_session() as session:
            return lacking_files(session, checkpoint_id)

    async def _grow(self, waiting: Waiting, path: Path, lacking: list[str]) -> None:
        settings = self._settings_for(path)
        recheck = functools.partial(late_files_verdict, path, self.tier0, lacking, settings)
        verdict = await blocking(recheck)
        if not verdict.partial:
            return  # not here, or still being written: a later sweep looks again
        name = waiting.format if waiting.format in BY_NAME else "unknown"
        try:
            outcome, _ = await record_checkpoint(
                self.ctx,
                verdict,
                run=waiting.run,
                step=waiting.step,
                fmt=name,
                relpath=waiting.relpath,
                actor=f"detector:{name}",
                action="part_grown",
                recheck=recheck,
            )
        except CatalogError:
            raise
        except (TierdError, OSError) as exc:
            log.info("part_not_grown", path=waiting.relpath, reason=str(exc))
            return
        log.info("part_grown", id=waiting.id, files=len(verdict.files), outcome=outcome.value)

    def _settings_for(self, path: Path) -> Settings:
        """The settings of the watch whose root holds ``path`` (the defaults outside every root)."""
        spec = next((s for s in self.roots if path.is_relative_to(s.path)), None)
        return spec.settings if spec is not None else Settings()

    async def _complete_waiting(self, waiting: Waiting) -> None:
        path = self.ctx.config.tier0.path.resolve() / waiting.relpath
        settings = self._settings_for(path)
        found = await self._waiting_verdict(waiting, path, settings)
        if found is None:
            return
        name, verdict, recheck = found
        try:
            outcome, _ = await record_checkpoint(
                self.ctx,
                verdict,
                run=waiting.run,
                step=waiting.step,
                fmt=name,
                relpath=waiting.relpath,
                actor=f"detector:{name}",
                action="detected",
                recheck=recheck,
                expect=nodes_expected(settings),
            )
        except CatalogError:
            raise
        except Refused as exc:
            await self.watcher.refused(exc, waiting.run, waiting.step, name, waiting.relpath, waiting.id)
            return
        except (TierdError, OSError) as exc:
            log.info("waiting_not_recorded", path=waiting.relpath, reason=str(exc))
            return
        self.watcher.mark_recorded(waiting.run, waiting.step, waiting.relpath, name)
        log.info(
            "waiting_completed", id=waiting.id, run=waiting.run, step=waiting.step, outcome=outcome.value
        )

    async def _waiting_verdict(self, waiting: Waiting, path: Path, settings: Settings) -> ToRecord | None:
        """(format, verdict, recheck) to record for a waiting step: the whole, or this node's part."""
        fmt = waiting.format if waiting.format in BY_NAME else "auto"
        result = await blocking(
            detect_path, path, self.tier0, detectors_for(fmt, settings.marker), settings, waiting.step
        )
        spans = waiting.spans or settings.nodes > 1
        if result is None or result[1] is None:
            return await self._unmarked_part(waiting, path, settings, spans=spans)
        detector, candidate, verdict = result
        assert candidate is not None
        if verdict.retry_after is not None:  # the sweep looks again within WAITING_POLL_SECONDS
            self.watcher.log_deferral(waiting.relpath, verdict.reason, verdict.retry_after)
        if verdict.complete:
            return detector.name, verdict, functools.partial(detector.inspect, candidate, settings)
        if not spans or (waiting.unmarked and not verdict.vouched):  # an unmarked part waits for its marker
            return None
        verdict = await blocking(part_verdict, candidate.path, candidate.root, verdict, settings)
        recheck = functools.partial(inspect_part, detector, candidate, settings)
        return (detector.name, verdict, recheck) if verdict.partial else None

    async def _unmarked_part(
        self, waiting: Waiting, path: Path, settings: Settings, *, spans: bool
    ) -> ToRecord | None:
        """No detector sees a checkpoint here (no marker on this node): the files are a part."""
        if not spans or waiting.unmarked or not await blocking(exists, path, self.tier0):
            return None
        name = waiting.format if waiting.format in BY_NAME else "unknown"
        unmarked = incomplete("no marker on this node")
        recheck = functools.partial(part_verdict, path, self.tier0, unmarked, settings)
        verdict = await blocking(recheck)
        return (name, verdict, recheck) if verdict.partial else None

"""The watcher service: turns file system events and periodic scans into catalog rows.

A watchdog observer thread hands every relevant event to the event loop
(``call_soon_threadsafe``). Events are debounced per directory for a few milliseconds,
then ``scan_chain`` runs on the I/O pool and each complete candidate is hashed and
recorded. A reconcile scan runs in the background at start-up and every
``reconcile_interval_seconds``: it finds what events missed (steps written while the
daemon was down, inotify overflow, network file systems without events), notices
recorded checkpoints whose files changed, and sweeps the waiting steps (``waiting``: notified
steps and parts of steps that span nodes, also swept when woken and on a poll of their own).

While the catalog fails (``CatalogOutage``: one error line when it goes, one info line when
it is back) the observer keeps running: directories with a complete step are set aside
instead of hashed and recorded again and again. A recovery task pings the catalog with a
growing delay; once it answers, the set-aside directories are looked at again and a
reconcile runs at once, so a step written meanwhile is recorded, and recorded once. When the
catalog answers but still refuses writes (a SQLite catalog on a full disk), each retry
hashes the held steps again, so those retries are spaced by ``HELD_RETRY`` (5 s to 60 s).

A checkpoint ``hostile`` refuses is warned about and audited (``refused``) once per
path and reason, and looked at again on later events and scans.

A candidate that only time can complete (a verdict with ``retry_after``: DCP's unreadable
``.metadata`` settling, a ``torch.save`` file settling, a node's part settling, files that
moved while hashed) is deferred: logged once per path and reason (``checkpoint_deferred``,
info) and looked at again by a timer of its own for its directory (one per directory, the
earliest kept), so it is recorded seconds after it settles, not at the next reconcile.

Files of a recorded checkpoint deleted or moved away from tier 0 are handed to ``Removals``,
which compares the checkpoint with the disk as soon as they stop, not at the next reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from tierd.daemon.aio import blocking
from tierd.daemon.context import Context
from tierd.daemon.detect.changes import apply_change, compare, load_recorded
from tierd.daemon.detect.detector import Verdict
from tierd.daemon.detect.hostile import printable
from tierd.daemon.detect.known import KnownSteps, load_known
from tierd.daemon.detect.parts import inspect_part, nodes_expected, part_verdict
from tierd.daemon.detect.record import Outcome, record_checkpoint, write_refused
from tierd.daemon.detect.removals import Removals
from tierd.daemon.detect.scan import Found, RootSpec, scan_chain, scan_root
from tierd.daemon.detect.waiting import WaitingSweep
from tierd.daemon.outage import CatalogOutage
from tierd.daemon.service import InFlight, PassLoop
from tierd.daemon.transfer.retry import Backoff
from tierd.errors import CatalogError, Refused, TierdError, Unstable
from tierd.logs import get_logger

__all__ = ["DEBOUNCE_SECONDS", "DetectService"]

log = get_logger(__name__)

#: How long events in one directory are gathered before it is looked at.
DEBOUNCE_SECONDS = 0.01
#: When to look again at a checkpoint whose files moved while they were hashed.
RETRY_SECONDS = 1.0
#: Between retries of held steps while the catalog answers pings but refuses writes.
HELD_RETRY = Backoff(base=5.0, cap=60.0)
#: Refused checkpoints remembered (so each refusal is audited once, not at every scan).
MAX_REFUSALS_REMEMBERED = 10_000
#: Deferred checkpoints remembered (so each deferral is logged once, not at every look).
MAX_DEFERRALS_REMEMBERED = 10_000
_REMOVALS = frozenset({"deleted", "moved"})
_RELEVANT = frozenset({"created", "modified", "moved", "deleted", "closed"})

DirKey = tuple[int, Path]


class _Handler(FileSystemEventHandler):
    """Runs in the observer thread: forwards event paths to the loop, nothing else."""

    def __init__(self, service: DetectService, index: int) -> None:
        self.service = service
        self.index = index

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _RELEVANT:
            return
        if event.event_type in _REMOVALS:
            self.service.post_removal(os.fsdecode(event.src_path))
        paths = [event.src_path, getattr(event, "dest_path", "")]
        for raw in paths:
            if raw:
                self.service.post_event(self.index, os.fsdecode(raw))


class DetectService:
    """Watches every configured root and records each checkpoint once it is complete."""

    name = "detect"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.roots = [RootSpec.of(w, ctx.config.tier0.path) for w in ctx.config.watch]
        self.known = KnownSteps()
        self.inflight = InFlight(self.name)
        self.reconciled = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._observer: BaseObserver | None = None
        self._pending: dict[DirKey, asyncio.TimerHandle] = {}
        self._busy: set[DirKey] = set()
        self._again: set[DirKey] = set()
        self._recording: set[str] = set()
        self._refusals: dict[str, str] = {}  # relpath -> reason of the refusal audited last
        self._deferrals: dict[str, str] = {}  # relpath -> reason of the deferral logged last
        self._retries: dict[DirKey, asyncio.TimerHandle] = {}  # deferred directories' timers
        self.removals = Removals(ctx, self.inflight, lambda: self.known, self._compare_failed)
        self.waiting = WaitingSweep(ctx, self.roots, self)
        #: The waiting sweep's own passes, between reconciles (``waiting``'s docstring says when).
        self.waiting_loop = PassLoop(
            self.name,
            self._waiting_pass,
            self._waiting_interval,
            what="waiting_sweep",
            wakeup=ctx.waiting_wakeup,
            wait_first=True,
        )
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False
        self.outage = CatalogOutage(self.name)
        ctx.outages[self.name] = self.outage
        self._held: set[DirKey] = set()  # directories with a complete step, set aside while the catalog fails
        self._hold = False
        self._recovery: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Load what is recorded, start the observer; the first reconcile runs in the background."""
        self._loop = asyncio.get_running_loop()
        for spec in self.roots:
            await blocking(spec.path.mkdir, parents=True, exist_ok=True)
        self.known = await blocking(load_known, self.ctx.db, self.ctx.config.node)
        observer = Observer()
        for index, spec in enumerate(self.roots):
            observer.schedule(_Handler(self, index), str(spec.path), recursive=True)
        await blocking(observer.start)
        self._observer = observer
        self.ctx.watcher_running = True
        self._loops = [asyncio.create_task(self._reconcile_loop(), name="detect:reconcile")]
        self.waiting_loop.start("detect:waiting")
        log.info("watching", roots=[str(s.path) for s in self.roots], recorded=len(self.known))

    async def stop(self, timeout: float) -> None:
        """Stop the observer, take no new work, let recordings finish for up to ``timeout``."""
        self._stopping = True
        self.ctx.watcher_running = False
        for handle in [*self._pending.values(), *self._retries.values()]:
            handle.cancel()
        self._pending.clear()
        self._retries.clear()
        self.removals.stop()
        await self.waiting_loop.stop(0)
        loops = [*self._loops, *([self._recovery] if self._recovery is not None else [])]
        for task in loops:
            task.cancel()
        for task in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._observer is not None:
            self._observer.stop()
            await blocking(self._observer.join, max(timeout, 1.0))
        await self.inflight.drain(timeout)

    @property
    def idle(self) -> bool:
        """No directory waits for its look, is looked at, or has a step being recorded.

        Looks set for later (a deferred step's timer) do not count.
        """
        return not (self._pending or self._busy or len(self.inflight))

    # -- events ------------------------------------------------------------------------

    def post_event(self, index: int, path: str) -> None:
        """Called from the observer thread: queue ``path``'s directory for a look."""
        loop = self._loop
        if loop is None or self._stopping:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(self._schedule, (index, Path(path).parent), DEBOUNCE_SECONDS)

    def post_removal(self, path: str) -> None:
        """Called from the observer thread: ``path`` was deleted or moved away."""
        loop = self._loop
        if loop is None or self._stopping:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(self.removals.post, Path(path))

    def _schedule(self, key: DirKey, delay: float) -> None:
        if self._stopping or self._loop is None:
            return
        if key in self._pending:
            return
        self._pending[key] = self._loop.call_later(delay, self._fire, key)

    def _fire(self, key: DirKey) -> None:
        self._pending.pop(key, None)
        if self._stopping:
            return
        if key in self._busy:
            self._again.add(key)
            return
        self._busy.add(key)
        self.inflight.spawn(self._evaluate(key), f"look at {key[1]}")

    def _compare_failed(self, exc: CatalogError) -> None:
        self._catalog_failed(exc, "compare")  # the reconcile after the outage compares it

    async def _evaluate(self, key: DirKey) -> None:
        index, directory = key
        try:
            founds = await blocking(scan_chain, self.roots[index], directory, self.known)
            for coro in self._handle(index, founds):
                self.inflight.spawn(coro, "record")
        except Exception:
            log.exception("detect_failed", directory=str(directory))
        finally:
            self._busy.discard(key)
            if key in self._again:
                self._again.discard(key)
                self._schedule(key, DEBOUNCE_SECONDS)

    def _handle(self, index: int, founds: list[Found]) -> list[Coroutine[Any, Any, None]]:
        """Recordings to run for the complete candidates; looks again later at the others."""
        work: list[Coroutine[Any, Any, None]] = []
        settings = self.roots[index].settings
        for found in founds:
            as_part = settings.nodes > 1  # else: the waiting sweep, once the catalog says so
            wanted = found.verdict.complete or as_part
            if wanted and self._hold:
                self._held.add((index, found.candidate.path.parent))
            elif wanted:
                if found.candidate.key not in self._recording:  # else: being recorded already
                    self._recording.add(found.candidate.key)
                    work.append(self._record(index, found))
            elif found.verdict.retry_after is not None:
                self._defer(index, found, found.verdict.reason, found.verdict.retry_after)
            else:
                log.debug("checkpoint_incomplete", path=found.relpath, reason=found.verdict.reason)
        return work

    def _defer(self, index: int, found: Found, reason: str, delay: float) -> None:
        """Look at ``found`` again in ``delay`` seconds; log why, once per path and reason."""
        self.log_deferral(found.relpath, reason, delay)
        self._retry(index, found.candidate.path.parent, delay)

    def log_deferral(self, relpath: str, reason: str, delay: float) -> None:
        """Log why ``relpath`` is looked at again later, once per path and reason."""
        if self._deferrals.get(relpath) == reason:
            return
        log.info("checkpoint_deferred", path=printable(relpath), reason=reason, again_in=round(delay, 2))
        self._deferrals[relpath] = reason
        while len(self._deferrals) > MAX_DEFERRALS_REMEMBERED:
            self._deferrals.pop(next(iter(self._deferrals)))

    def _retry(self, index: int, directory: Path, delay: float) -> None:
        """Look at ``directory`` again in ``delay`` seconds (one timer per directory, the earliest)."""
        if self._loop is None or self._stopping:
            return
        key = (index, directory)
        armed = self._retries.get(key)
        if armed is not None and armed.when() <= self._loop.time() + delay:
            return
        if armed is not None:
            armed.cancel()
        self._retries[key] = self._loop.call_later(delay, self._retry_due, key)

    def _retry_due(self, key: DirKey) -> None:
        self._retries.pop(key, None)
        self._schedule(key, 0.0)

    async def _to_record(self, index: int, found: Found) -> tuple[Verdict, Callable[[], Verdict]] | None:
        """(verdict, recheck) to record: the whole checkpoint, or this node's part; None: not yet."""
        settings = self.roots[index].settings
        detector, candidate, verdict = found.detector, found.candidate, found.verdict
        if verdict.complete:
            return verdict, functools.partial(detector.inspect, candidate, settings)
        # this node's part of a step that spans nodes
        verdict = await blocking(part_verdict, candidate.path, candidate.root, verdict, settings)
        if not verdict.partial:
            if verdict.retry_after is not None:
                self._defer(index, found, verdict.reason, verdict.retry_after)
            return None
        return verdict, functools.partial(inspect_part, detector, candidate, settings)

    async def _record(self, index: int, found: Found) -> None:
        spec = self.roots[index]
        detector, candidate = found.detector, found.candidate
        try:
            chosen = await self._to_record(index, found)
            if chosen is None:
                return
            verdict, recheck = chosen
            outcome, checkpoint_id = await record_checkpoint(
                self.ctx,
                verdict,
                run=found.run,
                step=found.step,
                fmt=detector.name,
                relpath=found.relpath,
                actor=f"detector:{detector.name}",
                action="detected",
                recheck=recheck,
                expect=nodes_expected(spec.settings),
            )
        except Unstable as exc:
            self._defer(index, found, str(exc), RETRY_SECONDS)
            return
        except CatalogError as exc:
            self._catalog_failed(exc, "record", (index, candidate.path.parent))
            return
        except Refused as exc:
            await self.refused(exc, found.run, found.step, detector.name, found.relpath)
            return
        except (TierdError, OSError) as exc:
            log.warning("checkpoint_record_failed", path=found.relpath, error=str(exc))
            self._retry(index, candidate.path.parent, RETRY_SECONDS)
            return
        finally:
            self._recording.discard(candidate.key)
        self.mark_recorded(found.run, found.step, found.relpath, detector.name)
        self.outage.succeeded()
        if outcome is not Outcome.EXISTING:
            log.info(
                "checkpoint_recorded",
                id=checkpoint_id,
                run=found.run,
                step=found.step,
                format=detector.name,
                path=found.relpath,
                files=len(verdict.files),
                outcome=outcome.value,
            )

    def mark_recorded(self, run: str, step: int, relpath: str, fmt: str) -> None:
        """``relpath`` is recorded: scans skip it, and its deferral is forgotten."""
        self.known.add(run, step, relpath, fmt)
        self._deferrals.pop(relpath, None)

    async def refused(
        self, exc: Refused, run: str, step: int, fmt: str, relpath: str, checkpoint_id: int | None = None
    ) -> None:
        """Warn and audit a refusal once per checkpoint and reason (it is looked at again on every scan)."""
        reason = str(exc)
        if self._refusals.get(relpath) == reason:
            return
        log.warning("checkpoint_refused", run=run, step=step, path=printable(relpath), reason=reason)
        try:
            await blocking(
                write_refused,
                self.ctx.db,
                refused=exc,
                run=run,
                step=step,
                fmt=fmt,
                relpath=relpath,
                actor=f"detector:{fmt}",
                checkpoint_id=checkpoint_id,
            )
        except TierdError as err:
            log.warning("refusal_not_audited", path=printable(relpath), error=str(err))
            return
        self._refusals[relpath] = reason
        while len(self._refusals) > MAX_REFUSALS_REMEMBERED:
            self._refusals.pop(next(iter(self._refusals)))

    # -- reconcile ---------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Scan every root, check recorded checkpoints for changes, look at waiting steps."""
        for index, spec in enumerate(self.roots):
            founds = await blocking(scan_root, spec, self.known)
            work = self._handle(index, founds)
            if work:
                await asyncio.gather(*work)
        await self.check_changes()
        await self.waiting.sweep()

    async def _reconcile_loop(self) -> None:
        interval = self.ctx.config.reconcile_interval_seconds
        while True:
            try:
                await self.reconcile()
            except CatalogError as exc:
                self._catalog_failed(exc, "reconcile")
            except Exception:
                log.exception("reconcile_failed")
            self.reconciled.set()
            await asyncio.sleep(interval)

    # -- catalog outages ---------------------------------------------------------------

    def _catalog_failed(self, exc: CatalogError, action: str, key: DirKey | None = None) -> None:
        """Set ``key`` aside, hold new recordings, and start the recovery task if none runs."""
        if key is not None:
            self._held.add(key)
        self._hold = True
        self.outage.failed(exc, action)
        if self._recovery is None and not self._stopping:
            self._recovery = asyncio.create_task(self._recover(), name="detect:recover")

    async def _recover(self) -> None:
        """Until the catalog answers: wait, ping; then record what was set aside, and reconcile."""
        retries = 0
        try:
            while self._hold and not self._stopping:
                await asyncio.sleep(HELD_RETRY.ceiling(retries - 1) if retries else self.outage.delay())
                try:
                    await blocking(self.ctx.db.ping)
                except CatalogError as exc:
                    self.outage.failed(exc, "ping")
                    continue
                await self._retry_held()
                retries += 1
        finally:
            self._recovery = None

    async def _retry_held(self) -> None:
        """Look again at the set-aside directories, then reconcile; a new failure holds again."""
        failures = self.outage.failures
        self._hold = False
        held, self._held = sorted(self._held, key=lambda k: (k[0], str(k[1]))), set()
        log.info("catalog_retry", directories=len(held))
        try:
            for index, directory in held:
                founds = await blocking(scan_chain, self.roots[index], directory, self.known)
                await asyncio.gather(*self._handle(index, founds))
            await self.reconcile()
        except CatalogError as exc:
            self._catalog_failed(exc, "reconcile")
        if not self._hold and self.outage.failures == failures:
            self.outage.succeeded()

    async def check_changes(self) -> None:
        """Mark recorded checkpoints whose files changed on tier 0 since they were recorded."""
        tier0 = self.ctx.config.tier0.path.resolve()
        for rec in await blocking(load_recorded, self.ctx.db, self.ctx.config.node):
            change = await blocking(compare, rec, tier0)
            if change is not None:
                await blocking(apply_change, self.ctx.db, rec, change)

    def _waiting_interval(self) -> float:
        return min(self.waiting.interval(), self.ctx.config.reconcile_interval_seconds)

    async def _waiting_pass(self) -> None:
        if self._hold:  # the recovery task sweeps once the catalog is back
            return
        try:
            await self.waiting.sweep()
        except CatalogError as exc:
            self._catalog_failed(exc, "waiting")

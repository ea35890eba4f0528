"""Run one claimed copy job: every file of a checkpoint from its source tier to the next.

The runner marks the replica ``copying``, copies the files (the format's or the watch's
completion marker, else the newest-written file, last and alone, so a tier never shows a
checkpoint's marker before its data), records progress and renews the lease from a
heartbeat, then marks the replica ``verified`` or ``failed``. Writes go through the
destination's ``WriteBatch``: a file it stages counts as done only once committed, and
the data is committed before the marker is copied. Cancelled (shutdown), it
puts the job back in the queue and leaves the replica ``pending`` and resumable.

While the catalog is away (a PostgreSQL restart) the copy goes on and progress waits; one
log line says so. A job that could not renew its lease for ``options.fence_seconds``
stops (outcome ``lost``) before the lease runs out, so no worker claims it while it still
writes; it is claimed again once the lease has expired and resumes from the recorded files.
The end of a hop (verified or failed) is recorded as soon as the catalog answers, within the
same bound.

Before it copies, the runner also removes what killed attempts of the same hop left in the
destination (temporary files, multipart uploads the catalog does not resume), for its own
files only (``HopRunner._remove_leftovers`` says why).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from tierd.config import TierConfig
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import Backend
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.jobs import Claim, release_job
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.uploads import hop_upload_ids
from tierd.daemon.libc import trim_freed_memory
from tierd.daemon.markers import MARKER_NAMES
from tierd.daemon.metrics import Metrics
from tierd.daemon.pipeline import records
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.records import HopPlan
from tierd.daemon.pipeline.resume import CatalogResumeStore
from tierd.daemon.transfer.copier import FileCopier, already_there
from tierd.daemon.transfer.copyset import copy_checkpoint_files
from tierd.daemon.transfer.retry import failure_reason
from tierd.daemon.transfer.spec import FileSpec
from tierd.daemon.transfer.throttle import PriorityPool, TokenBucket, retuned
from tierd.errors import CatalogError, IntegrityError, PermanentBackendError, TierdError
from tierd.logs import get_logger

__all__ = ["HopRunner", "Limits", "Outcome"]

log = get_logger(__name__)

Outcome = str  # "verified" | "failed" | "retry" | "cancelled" | "lost"
T = TypeVar("T")
#: Between tries of a hop's last catalog write while the catalog fails.
END_RETRY_SECONDS = (0.2, 2.0)


@dataclass(frozen=True)
class Limits:
    """What every hop into a tier shares: its file slots and its bandwidth cap."""

    slots: Mapping[str, PriorityPool]
    buckets: dict[str, TokenBucket | None]

    @classmethod
    def for_tiers(cls, tiers: Sequence[TierConfig]) -> Limits:
        """Slots = ``tier.concurrency``; a bucket where ``tier.bandwidth_limit`` is set."""
        return cls(
            slots={t.name: PriorityPool(t.concurrency) for t in tiers},
            buckets={
                t.name: TokenBucket(int(t.bandwidth_limit)) if t.bandwidth_limit else None for t in tiers
            },
        )

    def retune(self, tiers: Sequence[TierConfig]) -> None:
        """Take each tier's ``bandwidth_limit`` anew (a reload).

        A changed cap applies to the copies in flight too (they pay the same bucket); a cap set
        or removed applies from the next hop.
        """
        for tier in tiers:
            self.buckets[tier.name] = retuned(self.buckets.get(tier.name), tier.bandwidth_limit)


class _Progress:
    """Bytes copied so far: finished files plus the files in flight."""

    def __init__(self) -> None:
        self.finished = 0
        self.inflight: dict[str, int] = {}
        self.done: set[str] = set()
        self.order: list[str] = []  # ``done`` in the order files finished
        self.saved = 0  # how many of ``order`` the catalog has

    def counter(self, relpath: str, size: int) -> Callable[[int | None], None]:
        def count(nbytes: int | None) -> None:
            if nbytes is None:
                self.inflight[relpath] = 0
            else:
                self.inflight[relpath] = min(size, self.inflight.get(relpath, 0) + nbytes)

        return count

    def finish(self, spec: FileSpec) -> None:
        if spec.relpath in self.done:
            return
        self.inflight.pop(spec.relpath, None)
        self.finished += spec.size
        self.done.add(spec.relpath)
        self.order.append(spec.relpath)

    @property
    def total(self) -> int:
        return self.finished + sum(self.inflight.values())


class HopRunner:
    """Runs one claimed job to an outcome (see the module docstring)."""

    def __init__(
        self,
        *,
        db: Database,
        backends: Mapping[str, Backend],
        tiers: Sequence[TierConfig],
        limits: Limits,
        options: PipelineOptions,
        owner: str,
        claim: Claim,
        metrics: Metrics | None = None,
        claimed_at: float | None = None,
        markers: Collection[str] = MARKER_NAMES,
    ) -> None:
        """``claimed_at``: ``time.monotonic()`` from before the claim was sent (its lease's start).

        ``markers``: the file names copied last (the formats' markers and the watches' own).
        """
        self.db, self.backends, self.tiers = db, backends, tiers
        self.markers = markers
        self.limits, self.options, self.owner, self.claim = limits, options, owner, claim
        self.metrics = metrics
        self.progress = _Progress()
        self.file_ids: Mapping[str, int] = {}
        self.lost = False
        self._ending = False  # the copy is over: the heartbeat stops (``_stop_heartbeat``)
        #: Whether the hop's end may have made other hops ready (see ``records.Verified``).
        self.unlocks = True
        self.renewed_at = claimed_at if claimed_at is not None else time.monotonic()

    @property
    def description(self) -> str:
        """``checkpoint <id> → <tier>`` for logs."""
        return f"checkpoint {self.claim.checkpoint_id} -> {self.claim.dst_tier}"

    async def run(self) -> Outcome:
        """Copy, verify and record; re-raises CancelledError after releasing the job."""
        names = [t.name for t in self.tiers]
        try:
            plan = await blocking(records.start_hop, self.db, self.claim, self.owner, names)
        except CatalogError as exc:  # the lease runs out and the job is claimed again
            log.warning("hop_not_started", hop=self.description, error=str(exc))
            return "lost"
        if plan is None:
            return "cancelled"
        self.file_ids = plan.file_ids
        log.info(
            "hop_started", checkpoint=self.claim.checkpoint_id, src=plan.src_tier, dst=self.claim.dst_tier
        )
        started = time.monotonic()
        main = asyncio.current_task()
        assert main is not None
        heartbeat = asyncio.create_task(self._heartbeat(main), name=f"pipeline:heartbeat:{self.claim.job_id}")
        try:
            await self._copy_all(plan)
        except asyncio.CancelledError:
            await self._stop_heartbeat(heartbeat)
            if self.lost:
                main.uncancel()
                return "lost"
            await asyncio.shield(self._release())
            self._count("cancelled")
            raise
        except Exception as exc:
            await self._stop_heartbeat(heartbeat)
            return await self._fail(plan, exc)
        finally:
            await self._stop_heartbeat(heartbeat)
            await blocking(trim_freed_memory)
        return await self._verified(plan, time.monotonic() - started)

    async def _stop_heartbeat(self, heartbeat: asyncio.Task[None]) -> None:
        """Stop the heartbeat, and wait until it has, before the hop's end is recorded.

        A cancel alone did not do: on Python 3.11 ``asyncio.wait_for`` returns a save's
        result that lands with the cancel and drops the cancel, and the heartbeat ran on,
        found the finished job's lease gone at its next save, logged ``lease_lost`` and
        cancelled whatever its task ran next. ``_ending`` stops it whatever the cancel did.
        """
        self._ending = True
        heartbeat.cancel()
        await asyncio.wait([heartbeat])

    async def _copy_all(self, plan: HopPlan) -> None:
        src, dst = self.backends[plan.src_tier], self.backends[self.claim.dst_tier]
        tier = next(t for t in self.tiers if t.name == self.claim.dst_tier)
        batch = dst.batch()
        copier = FileCopier(
            src=src,
            dst=dst,
            slots=self.limits.slots[tier.name],
            priority=self.claim.priority,
            resume=CatalogResumeStore(self.db, self.claim.checkpoint_id, tier.name)
            if dst.features.multipart
            else None,
            bucket=self.limits.buckets.get(tier.name),
            readback=tier.verify == "readback",
            backoff=self.options.file_backoff,
            attempts=self.options.file_attempts,
            integrity_attempts=self.options.integrity_attempts,
            batch=batch,
        )
        await self._remove_leftovers(dst, plan)
        dst.expect_directories(plan.directories)
        resumed = plan.resumed or bool(plan.done)

        async def skip(spec: FileSpec) -> bool:
            return await already_there(dst, spec, spec.relpath in plan.done)

        await copy_checkpoint_files(
            copier,
            batch,
            plan.files,
            concurrency=tier.concurrency,
            skip=skip if resumed else None,
            progress=lambda spec: self.progress.counter(spec.relpath, spec.size),
            done=lambda spec, _info: self.progress.finish(spec),
            markers=self.markers,
        )
        if dst.features.multipart:
            # Every file is in place: no upload of this hop is left to resume. One the store
            # opened for a killed run after that run's clean-up looked, or that a failed
            # clean-up missed, would otherwise stay open (and billed) until the periodic sweep.
            await self._remove_leftovers(dst, plan, finished=True)

    async def _remove_leftovers(self, dst: Backend, plan: HopPlan, *, finished: bool = False) -> None:
        """Remove what killed attempts of this hop left in ``dst``, before copying; never raises.

        ``finished``: after copying, every file in place; nothing the catalog recorded is kept.

        Every start looks, not only a resumed one: a kill before the first progress save
        leaves the catalog no sign that an attempt ran. It costs a directory listing per
        directory (which the writes then reuse) or one ListMultipartUploads. Only this
        hop's own files are cleaned, never every leftover under the checkpoint's path:
        other daemons may be copying other files of the same checkpoint into the same
        shared tier right now, and their temporary files and uploads are live. The uploads
        the catalog records for this hop are kept: they resume.
        """
        relpaths = [spec.relpath for spec in plan.files]
        try:
            keep: set[str] = set()
            if dst.features.multipart and not finished:  # only uploads are kept to resume
                keep = await blocking(hop_upload_ids, self.db, self.claim.checkpoint_id, self.claim.dst_tier)
            removed = await dst.remove_leftovers(relpaths, keep=keep)
        except TierdError as exc:  # the periodic sweep gets them later
            log.warning("leftovers_not_removed", hop=self.description, error=str(exc))
            return
        if removed:
            log.info(
                "leftovers_removed",
                hop=self.description,
                count=removed,
                kept_uploads=len(keep),
                when="after" if finished else "before",
            )

    async def _heartbeat(self, main: asyncio.Task[object]) -> None:
        """Write progress every ``progress_interval``; renew the lease every ``renew_interval``.

        Stops the job (``lost``) when the lease was lost, or could not be renewed for
        ``fence_seconds`` while the catalog failed.
        """
        last_trim = time.monotonic()
        last_saved = (-1, -1)
        failing = False
        while not self._ending:
            await asyncio.sleep(self.options.progress_interval)
            if time.monotonic() - last_trim >= self.options.trim_interval:
                await blocking(trim_freed_memory)
                last_trim = time.monotonic()
            sent = time.monotonic()
            renew = sent - self.renewed_at >= self.options.renew_interval
            state = (self.progress.total, len(self.progress.done))
            if state == last_saved and not renew:
                continue
            try:
                ok = await asyncio.wait_for(self._save(lease=renew), timeout=max(self._fence_left(), 0.01))
            except (CatalogError, TimeoutError) as exc:
                if self._ending:
                    return
                if not failing:
                    log.warning("progress_not_saved", job=self.claim.job_id, error=str(exc) or "timed out")
                    failing = True
                if self._fence_left() <= 0:
                    self._stop_lost(main, "lease_not_renewed")
                    return
                continue
            if self._ending:  # the save raced the copy's end: its answer is no news
                return
            if failing:
                log.info("progress_saved_again", job=self.claim.job_id)
                failing = False
            if not ok:
                self._stop_lost(main, "lease_lost")
                return
            last_saved = state
            if renew:
                self.renewed_at = sent

    def _fence_left(self) -> float:
        """Seconds this job may go on before its lease could run out unrenewed."""
        return self.renewed_at + self.options.fence_seconds - time.monotonic()

    def _stop_lost(self, main: asyncio.Task[object], event: str) -> None:
        log.warning(event, job=self.claim.job_id, hop=self.description, lease=self.options.lease_seconds)
        self.lost = True
        main.cancel()

    async def _until_fenced(self, what: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """``call()`` (a catalog write), tried again while the catalog fails; None once fenced."""
        delay, cap = END_RETRY_SECONDS
        while True:
            try:
                return await call()
            except CatalogError as exc:
                left = self._fence_left()
                if left <= 0:
                    log.warning("hop_end_not_recorded", hop=self.description, end=what, error=str(exc))
                    return None
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, cap)

    async def _save(self, *, lease: bool) -> bool:
        """Record progress: the bytes, and the files finished since the last save."""
        progress = self.progress
        upto = len(progress.order)
        finished = [self.file_ids[r] for r in progress.order[progress.saved : upto] if r in self.file_ids]
        saved = await blocking(
            records.save_progress,
            self.db,
            self.claim,
            self.owner,
            progress.total,
            finished,
            lease_seconds=self.options.lease_seconds if lease else None,
        )
        if saved:
            progress.saved = max(progress.saved, upto)
        return saved

    async def _release(self) -> None:
        """Shutdown: keep what was done, hand the job back to the queue."""
        try:
            await self._save(lease=False)
            await blocking(
                release_job, self.db, self.claim.job_id, self.owner, bytes_done=self.progress.total
            )
        except CatalogError as exc:  # the next start-up requeues it anyway
            log.warning("release_failed", job=self.claim.job_id, error=str(exc))
        log.info("hop_released", hop=self.description, bytes_done=self.progress.total)

    async def _verified(self, plan: HopPlan, seconds: float) -> Outcome:
        dst = self.backends[self.claim.dst_tier]
        location = dst.location(plan.path)

        async def record() -> bool:
            verified = await blocking(records.mark_verified, self.db, plan, self.owner, location, seconds)
            self.unlocks = verified.unlocks
            return verified.recorded

        if not await self._until_fenced("verified", record):
            return "lost"
        self._count("verified")
        if self.metrics is not None:
            self.metrics.transfer_bytes.labels(self.claim.dst_tier).inc(plan.total_bytes)
            self.metrics.transfer_seconds.labels(self.claim.dst_tier).observe(seconds)
        rate = plan.total_bytes / seconds / 1e6 if seconds > 0 else 0.0
        log.info(
            "replica_verified",
            hop=self.description,
            src=plan.src_tier,
            bytes=plan.total_bytes,
            files=len(plan.files),
            seconds=round(seconds, 3),
            mb_per_s=round(rate, 1),
        )
        return "verified"

    async def _fail(self, plan: HopPlan, exc: Exception) -> Outcome:
        error = f"{type(exc).__name__}: {exc}"
        terminal = isinstance(exc, IntegrityError | PermanentBackendError)
        reason = failure_reason(exc)
        retry_at = None
        if not terminal:
            delay = self.options.job_backoff.delay(self.claim.attempts)
            retry_at = utcnow() + timedelta(seconds=delay)
        if not isinstance(exc, TierdError):
            log.error("hop_error", hop=self.description, error=error, exc_info=exc)

        async def record() -> bool:
            await self._save(lease=False)
            return await blocking(
                records.mark_failed, self.db, plan, self.owner, error, retry_at=retry_at, reason=reason
            )

        recorded = await self._until_fenced("failed", record)
        log.warning(
            "replica_failed",
            hop=self.description,
            error=error,
            retry_at=retry_at,
            reason=reason,
            recorded=recorded is not None,
        )
        if self.metrics is not None:
            self.metrics.transfer_failures.labels(self.claim.dst_tier, reason).inc()
        if recorded is None:
            return "lost"
        outcome = "failed" if terminal else "retry"
        self._count(outcome)
        return outcome

    def _count(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.transfers.labels(self.claim.dst_tier, result).inc()

"""The pipeline service: moves checkpoints from each verified tier to the next.

One loop runs scheduler passes (woken by ``ctx.pipeline_wakeup`` and every
``poll_interval``), then claims jobs while a destination tier has room
(``tier.concurrency`` jobs, and as many files in flight, per tier). Each claimed job
runs as a tracked task (``runner.HopRunner``). Between scheduling and claiming, the
janitor aborts stale multipart uploads the catalog does not mean to resume.

Shutdown (``stop``): claim nothing more; the in-flight jobs of the newest checkpoint may
finish within the bound; older ones are cancelled at once and left resumable (job back
in the queue, replica ``pending`` with its ``bytes_done``); what is still running at the
bound is cut the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend, ByteBudget, close_backends, make_backend
from tierd.daemon.catalog.jobs import (
    Claim,
    claim_next_copy_job,
    owner_id,
    release_job,
    requeue_failed_jobs,
    requeue_orphaned_jobs,
)
from tierd.daemon.context import Context
from tierd.daemon.pipeline import scheduler
from tierd.daemon.pipeline.janitor import Janitor
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.runner import HopRunner, Limits, Outcome
from tierd.errors import TierdError
from tierd.logs import get_logger

__all__ = ["PipelineService"]

log = get_logger(__name__)

#: How long stop() waits for the scheduling loop to notice it and exit by itself.
LOOP_EXIT_SECONDS = 5.0
#: How long cancelled jobs get to record their release, even when the drain bound is spent.
RELEASE_GRACE_SECONDS = 1.0


@dataclass
class _Running:
    runner: HopRunner
    task: asyncio.Task[Outcome]


class PipelineService:
    """Schedules hops, claims copy jobs and runs them (see the module docstring)."""

    name = "pipeline"

    def __init__(
        self,
        ctx: Context,
        options: PipelineOptions | None = None,
        backends: Mapping[str, Backend] | None = None,
        budget: ByteBudget | None = None,
    ) -> None:
        """``backends`` given (with the ``budget`` they share) stay open at stop: their owner closes them."""
        self.ctx = ctx
        self.options = options or PipelineOptions()
        self.tiers = list(ctx.config.tiers)
        self.tier_names = [t.name for t in self.tiers]
        self.owner = owner_id(ctx.config.node)
        self.limits = Limits.for_tiers(self.tiers)
        self._given_backends = backends
        self.backends: dict[str, Backend] = {}
        self._running: dict[int, _Running] = {}
        self._stopping = False
        self._loop: asyncio.Task[None] | None = None
        self._janitor: Janitor | None = None
        self._budget = budget  # the backends' shared one, dropped while the pipeline is idle

    async def start(self) -> None:
        """Requeue this node's orphaned jobs, open the backends, start the loops."""
        db, node = self.ctx.db, self.ctx.config.node
        orphans = await blocking(requeue_orphaned_jobs, db, node, self.owner)
        retried = await blocking(requeue_failed_jobs, db, "permanent")
        if orphans or retried:
            log.info("jobs_requeued", interrupted=orphans, permanently_failed=retried)
        if self._given_backends is not None:
            self.backends = dict(self._given_backends)
        else:
            self._budget = ByteBudget(self.options.memory_budget)
            self.backends = {t.name: make_backend(t, budget=self._budget) for t in self.tiers}
        self._janitor = Janitor(
            db,
            self.backends,
            older_than=self.options.stale_upload_seconds,
            interval=self.options.stale_sweep_interval,
        )
        self._loop = asyncio.create_task(self._run(), name="pipeline:loop")
        log.info("pipeline_started", owner=self.owner, tiers=self.tier_names)

    async def _run(self) -> None:
        first = True
        while not self._stopping:
            self.ctx.pipeline_wakeup.clear()
            try:
                added = await blocking(
                    scheduler.schedule_pass,
                    self.ctx.db,
                    self.tier_names,
                    fill_missing=first,
                    node_local=[t.name for t in self.tiers if not t.shared],
                )
                first = False
                if added:
                    log.info("hops_scheduled", jobs=added)
                if self._janitor is not None:
                    await self._janitor.sweep_due()
                await self._claim_all()
            except TierdError as exc:
                log.warning("pipeline_pass_failed", error=str(exc))
            except Exception:
                log.exception("pipeline_pass_crashed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ctx.pipeline_wakeup.wait(), self.options.poll_interval)

    async def _claim_all(self) -> None:
        """Claim jobs, highest priority first, while a destination tier has room."""
        while not self._stopping:
            busy = Counter(r.runner.claim.dst_tier for r in self._running.values())
            free = [t.name for t in self.tiers[1:] if busy[t.name] < t.concurrency]
            claim = await blocking(
                claim_next_copy_job,
                self.ctx.db,
                self.owner,
                free,
                lease_seconds=self.options.lease_seconds,
                node=self.ctx.config.node,
                local_tier=None if self.tiers[0].shared else self.tier_names[0],
            )
            if claim is None:
                return
            if self._stopping:  # stop() began while we were claiming
                await blocking(release_job, self.ctx.db, claim.job_id, self.owner)
                return
            self._spawn(claim)

    def _spawn(self, claim: Claim) -> None:
        runner = HopRunner(
            db=self.ctx.db,
            backends=self.backends,
            tiers=self.tiers,
            limits=self.limits,
            options=self.options,
            owner=self.owner,
            claim=claim,
            metrics=self.ctx.metrics,
        )
        task = asyncio.create_task(runner.run(), name=f"pipeline:job:{claim.job_id}")
        self._running[claim.job_id] = _Running(runner, task)
        task.add_done_callback(lambda t: self._finished(claim.job_id, t))

    def _finished(self, job_id: int, task: asyncio.Task[Outcome]) -> None:
        self._running.pop(job_id, None)
        if not self._running and self._budget is not None:
            self._budget.drop_idle()  # an idle daemon keeps no transfer buffers
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("job_crashed", job=job_id, error=repr(exc))
        if not self._stopping:
            self.ctx.wake_pipeline()  # room for another job; maybe a next hop to schedule

    async def stop(self, timeout: float) -> None:
        """Claim nothing more; let the newest checkpoint's jobs finish within ``timeout``."""
        deadline = time.monotonic() + max(timeout, 0)
        self._stopping = True
        self.ctx.wake_pipeline()
        if self._loop is not None:
            # Let a claim in progress land (and be released) rather than cut it mid-transaction.
            _, late = await asyncio.wait([self._loop], timeout=min(max(timeout, 0), LOOP_EXIT_SECONDS))
            if late:
                self._loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._loop
        await self._drain(deadline)
        if self._given_backends is None:
            await close_backends(self.backends)

    async def _drain(self, deadline: float) -> None:
        """Cut older checkpoints' jobs now, the newest's at ``deadline``; log which was which."""
        running = list(self._running.values())
        if not running:
            log.info("pipeline_drained", finished=[], cut=[])
            return
        newest = max(r.runner.claim.priority for r in running)
        cut = [r for r in running if r.runner.claim.priority != newest]
        for r in cut:
            r.task.cancel()
        keep = [r for r in running if r.runner.claim.priority == newest]
        _, late = await asyncio.wait([r.task for r in keep], timeout=max(deadline - time.monotonic(), 0))
        for r in keep:
            if r.task in late:
                r.task.cancel()
                cut.append(r)
        # Cancelled jobs still write their release (two small transactions): give them a moment.
        grace = min(max(deadline - time.monotonic(), RELEASE_GRACE_SECONDS), 10.0)
        await asyncio.wait([r.task for r in running], timeout=grace)
        finished = [f"{r.runner.description}: {_outcome(r.task)}" for r in running if r not in cut]
        log.info("pipeline_drained", finished=finished, cut=[r.runner.description for r in cut])


def _outcome(task: asyncio.Task[Outcome]) -> str:
    if not task.done():
        return "still running"
    if task.cancelled():
        return "cancelled"
    if task.exception() is not None:
        return f"crashed: {task.exception()!r}"
    return task.result()

"""The pipeline service: moves checkpoints from each verified tier to the next.

One loop runs scheduler passes, then claims jobs while a destination tier has room
(``tier.concurrency`` jobs, and as many files in flight, per tier). Each claimed job
runs as a tracked task (``runner.HopRunner``). A pass schedules the checkpoints named by
``ctx.wake_pipeline`` since the last (a step recorded, a job ended); every checkpoint at
start and each ``poll_interval`` (in a fleet: the leader; the others every
``BACKSTOP_POLLS`` polls); and nothing when another node's NOTIFY woke it only to claim
what that node queued (``listen.JobListener``). Between scheduling and claiming, the
janitor aborts stale multipart uploads the catalog does not mean to resume. While the
catalog fails, passes are tried again every few seconds (``CatalogOutage``: one log line
when it goes, one when it is back) instead of every ``poll_interval``.

Shutdown (``stop``): claim nothing more; the in-flight jobs of the newest checkpoint may
finish within the bound; older ones are cancelled at once and left resumable (job back
in the queue, replica ``pending`` with its ``bytes_done``); what is still running at the
bound is cut the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from tierd.config import Config
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
from tierd.daemon.markers import marker_names
from tierd.daemon.outage import CatalogOutage
from tierd.daemon.pipeline import scheduler
from tierd.daemon.pipeline.janitor import Janitor
from tierd.daemon.pipeline.listen import JobListener
from tierd.daemon.pipeline.options import PipelineOptions
from tierd.daemon.pipeline.runner import HopRunner, Limits, Outcome
from tierd.daemon.service import PassLoop
from tierd.logs import get_logger

__all__ = ["PipelineService"]

log = get_logger(__name__)

#: How long stop() waits for the scheduling loop to notice it and exit by itself.
LOOP_EXIT_SECONDS = 5.0
#: How long cancelled jobs get to record their release, even when the drain bound is spent.
RELEASE_GRACE_SECONDS = 1.0
#: A daemon that does not lead schedules every checkpoint itself once in this many polls.
BACKSTOP_POLLS = 6


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
        #: Copied last by every hop: the formats' markers and the watches' (a restart's to change).
        self.markers = marker_names(*(w.marker for w in ctx.config.watch))
        self.tier_names = [t.name for t in self.tiers]
        self.owner = owner_id(ctx.config.node)
        self.limits = Limits.for_tiers(self.tiers)
        self._given_backends = backends
        self.backends: dict[str, Backend] = {}
        self._running: dict[int, _Running] = {}
        self._janitor: Janitor | None = None
        self._listener: JobListener | None = None
        self._polls = 0
        self._first = True  # the first pass creates the replica rows missing for a configured tier
        self._failed = False  # the last pass failed: the next schedules every checkpoint
        #: The last claim found nothing for this node while a tier had room (see ``_claim_all``).
        self._queue_empty = False
        self._budget = budget  # the backends' shared one, dropped while the pipeline is idle
        self.outage = CatalogOutage(self.name)
        ctx.outages[self.name] = self.outage
        self.loop = PassLoop(
            self.name,
            self._pass,
            self.options.poll_interval,
            wakeup=ctx.pipeline_wakeup,
            outage=self.outage,
            sooner_while_down=True,
            on_idle=self._poll,
        )

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
            tier0 = self.ctx.config.tier0
            self.backends = {
                t.name: make_backend(t, budget=self._budget, written_by_jobs=t.name == tier0.name)
                for t in self.tiers
            }
        self._janitor = Janitor(
            db,
            self.backends,
            older_than=self.options.stale_upload_seconds,
            interval=self.options.stale_sweep_interval,
        )
        if not db.is_sqlite:  # other daemons share the catalog: hear of their jobs and waiting steps
            ctx = self.ctx
            self._listener = JobListener(db.url, node, ctx.wake_claims, ctx.wake_pipeline, ctx.wake_waiting)
            self._listener.start()
        self.loop.start("pipeline:loop")
        log.info("pipeline_started", owner=self.owner, tiers=self.tier_names)

    async def _pass(self) -> None:
        """Schedule, sweep stale uploads, claim; after a failed pass, schedule every checkpoint."""
        only = self.ctx.take_scheduling()
        failed, self._failed = self._failed, True  # until this pass ends well
        await self._schedule(None if failed else only, fill_missing=self._first)
        self._first = False
        if self._janitor is not None:
            await self._janitor.sweep_due()
        await self._claim_all()
        self._failed = False

    def reconfigure(self, config: Config) -> None:
        """A reload: each tier's new ``bandwidth_limit`` (the only reloadable key the pipeline reads)."""
        self.tiers = list(config.tiers)
        self.limits.retune(self.tiers)

    def _poll(self) -> None:
        """The poll's pass: every checkpoint, by the leader (one pass queues jobs for the fleet).

        Another daemon of a fleet only claims, and looks at every checkpoint itself every
        ``BACKSTOP_POLLS`` polls, in case the leader is stuck. A daemon alone always leads.
        """
        self._polls += 1
        if self.ctx.leader or self._polls % BACKSTOP_POLLS == 0:
            self.ctx.wake_pipeline()
        else:
            self.ctx.wake_claims()

    async def _schedule(self, only: set[int] | None, *, fill_missing: bool) -> None:
        """A scheduler pass over ``only`` (None: every checkpoint); none when ``only`` is empty."""
        if only is not None and not only:
            return  # woken to claim what another node queued
        added = await blocking(
            scheduler.schedule_pass,
            self.ctx.db,
            self.tier_names,
            fill_missing=fill_missing,
            node_local=[t.name for t in self.tiers if not t.shared],
            only=only,
            locate=lambda tier, path: self.backends[tier].location(path),
        )
        if added:
            log.info("hops_scheduled", jobs=added)

    async def _claim_all(self) -> None:
        """Claim jobs, highest priority first, while a destination tier has room."""
        while not self.loop.stopping:
            busy = Counter(r.runner.claim.dst_tier for r in self._running.values())
            free = [t.name for t in self.tiers[1:] if busy[t.name] < t.concurrency]
            claimed_at = time.monotonic()
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
                # Nothing left for this node in any tier: a job ending here need not look again
                # (a NOTIFY wakes it when another node queues one; the poll finds retries and
                # lapsed leases). A tier left out for being busy may still have jobs queued.
                self._queue_empty = len(free) == len(self.tiers) - 1
                return
            self._queue_empty = False
            if self.loop.stopping:  # stop() began while we were claiming
                await blocking(release_job, self.ctx.db, claim.job_id, self.owner)
                return
            await self._retire(claim.job_id)
            self._spawn(claim, claimed_at)

    async def _retire(self, job_id: int) -> None:
        """Make sure no runner of ``job_id`` still runs before the job runs again here.

        A runner stops by itself before its unrenewed lease runs out (``fence_seconds``);
        this only matters when it has not finished unwinding when the expired job is claimed
        again. It is cut as ``lost``: it must not hand the job back to the queue.
        """
        old = self._running.get(job_id)
        if old is None:
            return
        log.warning("job_claimed_again", job=job_id, hop=old.runner.description)
        old.runner.lost = True
        old.task.cancel()
        await asyncio.wait([old.task], timeout=LOOP_EXIT_SECONDS)

    def _spawn(self, claim: Claim, claimed_at: float) -> None:
        runner = HopRunner(
            db=self.ctx.db,
            backends=self.backends,
            tiers=self.tiers,
            limits=self.limits,
            options=self.options,
            owner=self.owner,
            claim=claim,
            metrics=self.ctx.metrics,
            claimed_at=claimed_at,
            markers=self.markers,
        )
        task = asyncio.create_task(runner.run(), name=f"pipeline:job:{claim.job_id}")
        self._running[claim.job_id] = _Running(runner, task)
        task.add_done_callback(lambda t: self._finished(claim.job_id, claim.checkpoint_id, t))

    def _finished(self, job_id: int, checkpoint_id: int, task: asyncio.Task[Outcome]) -> None:
        entry = self._running.get(job_id)
        unlocks = True
        if entry is not None and entry.task is task:  # not a newer runner of the same job
            del self._running[job_id]
            unlocks = entry.runner.unlocks
        if not self._running and self._budget is not None:
            self._budget.drop_idle()  # an idle daemon keeps no transfer buffers
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("job_crashed", job=job_id, error=repr(exc))
        if self.loop.stopping:
            return
        if unlocks:
            self.ctx.wake_pipeline(checkpoint_id)  # room for another job; maybe its next hop
        elif not self._queue_empty:
            self.ctx.wake_claims()  # room for a job left queued; the step has nothing new to schedule

    async def stop(self, timeout: float) -> None:
        """Claim nothing more; let the newest checkpoint's jobs finish within ``timeout``."""
        deadline = time.monotonic() + max(timeout, 0)
        self.ctx.wake_pipeline()  # also: a pipeline started again on this context schedules everything
        # Let a claim in progress land (and be released) rather than cut it mid-transaction.
        await self.loop.stop(min(max(timeout, 0), LOOP_EXIT_SECONDS))
        if self._listener is not None:
            await self._listener.stop()
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

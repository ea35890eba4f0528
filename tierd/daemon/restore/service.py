"""The restore service: claims this node's queued restores and runs them (``runner``).

Restores are jobs (``catalog.restores``): asked for through the API, claimed under a lease,
requeued at start-up when a killed daemon left them running (``catalog.jobs.
requeue_orphaned_jobs``, which the pipeline runs first), and resumed. ``cancel`` (DELETE)
stops a running restore here and waits for it to remove what it wrote; a queued one is
cleaned up at once. At stop, running restores are given ``timeout`` to finish, then put back
in the queue with their progress. With a peer tier whose ``token_file`` holds this node's
``peer`` token, restores read the verified copies other nodes hold of the step's parts too
(``restore.peers``).

A restore is run by the daemon whose API was asked for it (its ``node``), and the route wakes
the service (``wake``): it claims at once. Otherwise it claims after a restore ends (a free
slot), at start (restores a stop or a kill left), and every ``poll_interval`` (60 s: what
another process put in the catalog); while the catalog fails, at the outage's shorter delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from tierd.config import PeerTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends.base import Backend
from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.peer.fetch import PeerFetch
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.catalog.restores import claim_next_restore
from tierd.daemon.context import Context
from tierd.daemon.libc import trim_freed_memory
from tierd.daemon.outage import CatalogOutage
from tierd.daemon.restore import requests
from tierd.daemon.restore.runner import RestoreOptions, RestoreRunner
from tierd.daemon.service import InFlight, PassLoop
from tierd.keyring import peer_token
from tierd.logs import get_logger

__all__ = ["RestoreService"]

log = get_logger(__name__)


@dataclass
class _Running:
    runner: RestoreRunner
    task: asyncio.Task[object]


class RestoreService:
    """Runs restore jobs (see the module docstring)."""

    name = "restore"

    def __init__(
        self,
        ctx: Context,
        backends: Mapping[str, Backend],
        budget: ByteBudget | None = None,
        options: RestoreOptions | None = None,
    ) -> None:
        self.ctx = ctx
        self.backends = backends
        self.budget = budget
        self.options = options or RestoreOptions()
        self.owner = owner_id(ctx.config.node)
        token = peer_token(ctx.config.peer)  # ConfigError at start, naming the key
        #: Reads peers' copies of the step's parts (None: no peer token, no peer is read).
        self.peers = None if token is None else PeerFetch(token, budget, verify=_ca(ctx.config.peer))
        self._inflight = InFlight(self.name)
        self._running: dict[int, _Running] = {}
        self.outage = CatalogOutage(self.name)
        ctx.outages[self.name] = self.outage
        self.loop = PassLoop(
            self.name, self._claim_all, self.options.poll_interval, outage=self.outage, sooner_while_down=True
        )

    async def start(self) -> None:
        """Start claiming restores; the API reaches the service through ``ctx.restore``."""
        self.ctx.restore = self
        self.loop.start("restore:loop")

    def wake(self) -> None:
        """Look for queued restores now (one was just asked for)."""
        self.loop.wake()

    async def _claim_all(self) -> None:
        while not self.loop.stopping and len(self._running) < self.options.parallel:
            claim = await blocking(
                claim_next_restore,
                self.ctx.db,
                self.owner,
                self.ctx.config.node,
                lease_seconds=self.options.lease_seconds,
            )
            if claim is None:
                return
            runner = RestoreRunner(
                config=self.ctx.config,
                db=self.ctx.db,
                backends=self.backends,
                budget=self.budget,
                owner=self.owner,
                claim=claim,
                options=self.options,
                wake_pipeline=self.ctx.wake_pipeline,
                peers=None if self.peers is None else self.peers.fork().source,
            )
            task = self._inflight.spawn(self._drive(runner), f"restore {claim.job_id}")
            self._running[claim.job_id] = _Running(runner, task)

    async def _drive(self, runner: RestoreRunner) -> str:
        trimming = asyncio.create_task(_trim_every(self.options.trim_interval), name="restore:trim")
        try:
            return await runner.run()
        finally:
            trimming.cancel()
            self._running.pop(runner.claim.job_id, None)
            self._drop_idle_buffers()
            self.loop.wake()

    def _drop_idle_buffers(self) -> None:
        """Once no restore runs and no transfer holds a buffer: unmap the idle ones, trim the heap."""
        if not self._running and self.budget is not None and self.budget.used == 0:
            self.budget.drop_idle()
            trim_freed_memory()  # a few ms; a restore of many files leaves much freed in the heap

    async def cancel(self, job_id: int, *, actor: str, reason: str) -> None:
        """Cancel a restore and remove what it wrote (waiting for it if it runs here).

        Raises NotFound, Conflict (done or failed).
        """
        config, db = self.ctx.config, self.ctx.db
        running = self._running.get(job_id)
        if running is None:
            await blocking(
                requests.cancel_restore, db, config, job_id, actor=actor, reason=reason, clean=True
            )
            return
        running.runner.cancel_requested = True
        await blocking(requests.cancel_restore, db, config, job_id, actor=actor, reason=reason, clean=False)
        running.task.cancel()
        await asyncio.wait([running.task])
        task = running.task
        if task.cancelled() or task.exception() is not None or task.result() != "cancelled":
            # Cut before its copy began (or it failed meanwhile): remove what it made here.
            await blocking(requests.clean_up, db, config, job_id)

    async def stop(self, timeout: float) -> None:
        """Claim nothing more; let running restores finish within ``timeout``, then requeue them."""
        await self.loop.stop(0)  # a claim under way is cut: requeued at the next start
        await self._inflight.drain(timeout)
        self.ctx.restore = None
        if self.peers is not None:
            await self.peers.close()


def _ca(tier: PeerTier | None) -> bool | str:
    """What https peers' certificates are checked against: the tier's ``ca_file``, else the system's."""
    return str(tier.ca_file) if tier is not None and tier.ca_file is not None else True


async def _trim_every(interval: float) -> None:
    """Hand freed heap memory back to the OS every ``interval`` while a restore runs (as a hop does)."""
    while True:
        await asyncio.sleep(interval)
        await blocking(trim_freed_memory)

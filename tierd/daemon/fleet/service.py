"""``FleetService``: this daemon's heartbeat in the catalog, and its part in electing the leader.

Every ``fleet.heartbeat_interval`` it marks its ``nodes`` row heard from (database clock) and,
on PostgreSQL, takes or renews the shared tiers' lease (``election``). Each change of leader
is logged and audited (``leader_elected``, ``leader_stood_down``): one the catalog could not
take at the time (it was down) is audited once it answers again. A new leader wakes
retention, which plans the shared tiers at once. On SQLite the daemon is
alone and always leads. It starts first (the leader is known before retention's first pass)
and stops first, giving the lease up so another daemon takes over at once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from tierd import __version__
from tierd.daemon.aio import blocking
from tierd.daemon.catalog import audit, fleet
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.context import Context, FixedLeadership
from tierd.daemon.fleet.election import Change, Elector
from tierd.daemon.service import PassLoop
from tierd.errors import CatalogError
from tierd.logs import get_logger

__all__ = ["FleetService"]

log = get_logger(__name__)


class FleetService:
    """Heartbeats and the election (see the module docstring)."""

    name = "fleet"

    def __init__(self, ctx: Context, api_address: Callable[[], str]) -> None:
        """``api_address`` gives the address this daemon's API answers on (shown by ``/v1/fleet``)."""
        self.ctx = ctx
        self.settings = ctx.config.fleet
        self.pid = os.getpid()
        self.owner = owner_id(ctx.config.node, self.pid)
        self.api_address = api_address
        self.elector: Elector | None = None
        if not ctx.db.is_sqlite:
            self.elector = Elector(ctx.db, self.owner, self.settings.lease)
        ctx.leadership = self.elector or FixedLeadership(True)
        ctx.metrics.count_fleet_nodes(ctx.db, self.settings.node_timeout)
        ctx.metrics.fleet_leader.set_function(lambda: 1.0 if ctx.leader else 0.0)  # asked at each scrape
        self._registered = False
        self._unaudited: list[Change] = []
        self.loop = PassLoop(
            self.name, self.beat, self.settings.heartbeat_interval, what="beat", wait_first=True
        )

    async def start(self) -> None:
        """Register this node, run the first election, then beat every ``heartbeat_interval``."""
        await self.beat()
        self.loop.start("fleet:heartbeat")

    async def beat(self) -> None:
        """One heartbeat and one election round; a catalog failure is logged, never raised."""
        if self.elector is not None:
            change = await blocking(self.elector.elect)
            if change is not None:
                self._announce(change)
        try:
            await blocking(self._heartbeat)
        except CatalogError as exc:
            log.warning("fleet_heartbeat_failed", node=self.ctx.config.node, error=str(exc))

    def _heartbeat(self) -> None:
        node = self.ctx.config.node
        with self.ctx.db.session() as session:
            if not self._registered or not fleet.heartbeat(session, node, self.pid, self.api_address()):
                if self._registered:
                    log.warning("fleet_node_registered_again", node=node, pid=self.pid)
                settings = self.ctx.config.fleet
                fleet.register_node(
                    session,
                    node,
                    version=__version__,
                    pid=self.pid,
                    api=self.api_address(),
                    advertise_url=settings.advertise_url,
                    failure_domain=settings.failure_domain,
                )
                self._registered = True
            pending = list(self._unaudited)
            for change in pending:
                audit.append_event(
                    session,
                    actor=self.owner,
                    action="leader_elected" if change.elected else "leader_stood_down",
                    checkpoint_id=None,
                    reason=change.reason,
                    detail={"node": node, "pid": self.pid, "term": change.term, "holder": change.holder},
                )
        del self._unaudited[: len(pending)]  # audited: committed with this heartbeat

    def _announce(self, change: Change) -> None:
        event = "leader_elected" if change.elected else "leader_stood_down"
        log.info(event, node=self.ctx.config.node, owner=self.owner, term=change.term, reason=change.reason)
        self._unaudited.append(change)
        if change.elected and self.ctx.retention is not None:
            self.ctx.retention.wake()  # plan the shared tiers now, not at the next catalog change

    async def stop(self, timeout: float) -> None:
        """Stop beating and give the lease up (another daemon leads at its next heartbeat)."""
        await self.loop.stop(max(timeout, 0.1))
        if self.elector is None:
            return
        try:
            change = await blocking(self.elector.release)
        except CatalogError as exc:
            log.warning("leader_release_failed", error=str(exc), detail="the lease expires on its own")
            return
        if change is not None:
            self._announce(change)
            with contextlib.suppress(CatalogError):
                await blocking(self._heartbeat)

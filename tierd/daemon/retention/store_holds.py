"""Legal holds the store enforces: each held checkpoint's objects carry the store's legal hold.

Retention already refuses to delete a held checkpoint; on a tier with ``object_lock: true``
the store refuses too, so not even a script with the bucket's credentials deletes a held
object version. Each pass compares, per tier, the catalog's holds with what was last set on
the store (``catalog.store_holds``) and sends the difference through the backend's
``set_legal_hold``: ON for every object of each verified replica of a held checkpoint
(replicas copied after the hold was placed included), OFF once its last hold is released.
What was set is recorded, so a pass sends nothing for a replica already as it should be.

Each tier's ``check_legal_hold`` runs at start: a bucket without Object Lock fails the
start (ConfigError naming the tier) rather than leaving holds silently unenforced. A
replica the store refuses is logged and tried again at the next pass; the others go on.
Shared tiers are handled by the fleet's leader (``ctx.acts_on``).
"""

from __future__ import annotations

from collections.abc import Mapping

from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.catalog.store_holds import StoreHoldDue, record_store_hold, store_holds_due
from tierd.daemon.context import Context
from tierd.daemon.outage import CatalogOutage
from tierd.daemon.service import PassLoop
from tierd.errors import ConfigError, TierdError
from tierd.logs import get_logger

__all__ = ["BATCH", "StoreHolds"]

log = get_logger(__name__)
ACTOR = "retention"
#: Replicas read from the catalog per tier and pass (a full batch asks for the next pass at once).
BATCH = 50


class StoreHolds:
    """Keeps the legal holds of each ``object_lock`` tier's objects as the catalog's holds."""

    name = "store_holds"

    def __init__(self, ctx: Context, backends: Mapping[str, Backend], interval: float) -> None:
        self.ctx = ctx
        self.backends = {
            t.name: backends[t.name]
            for t in ctx.config.tiers
            if getattr(t, "object_lock", False) and t.name in backends
        }
        self.outage = CatalogOutage(self.name)
        self.loop = PassLoop(self.name, self.run_pass, interval, outage=self.outage)

    async def start(self) -> None:
        """Check every ``object_lock`` tier's store, then start the passes.

        Raises ConfigError when a tier's store keeps no legal holds (Object Lock not enabled).
        """
        for tier, backend in self.backends.items():
            try:
                await backend.check_legal_hold()
            except ConfigError:
                raise
            except TierdError as exc:  # unreachable now: its passes report it until it answers
                log.warning("store_hold_check_failed", tier=tier, error=str(exc))
        if self.backends:
            log.info("store_holds_started", tiers=list(self.backends))
            self.loop.start("retention:store_holds")

    async def stop(self, timeout: float) -> None:
        """Stop the passes; a replica half set is set again at the next start."""
        await self.loop.stop(timeout)

    def wake(self) -> None:
        """Run a pass now (a hold was placed or released)."""
        self.loop.wake()

    async def run_pass(self) -> bool:
        """One batch per tier; True when a batch was full (the next pass comes at once)."""
        again = False
        for tier, backend in self.backends.items():
            if self.loop.stopping or not self.ctx.acts_on(tier):
                continue
            due = await blocking(self._due, tier)
            failed = 0
            for item in due:
                failed += not await self._set(backend, item)
            again |= len(due) == BATCH and not failed
        return again

    async def _set(self, backend: Backend, due: StoreHoldDue) -> bool:
        """Set one replica's objects' hold and record it; False when the store refused."""
        try:
            await backend.set_legal_hold(due.relpaths, due.on)
        except TierdError as exc:
            log.warning(
                "store_hold_failed",
                tier=due.tier,
                checkpoint=due.checkpoint_id,
                legal_hold="ON" if due.on else "OFF",
                error=str(exc),
            )
            return False
        recorded = await blocking(self._record, due)
        log.info(
            "store_hold_set",
            tier=due.tier,
            checkpoint=due.checkpoint_id,
            legal_hold="ON" if due.on else "OFF",
            objects=len(due.relpaths),
            recorded=recorded,
        )
        return True

    def _due(self, tier: str) -> list[StoreHoldDue]:
        with self.ctx.db.read_session() as session:
            return store_holds_due(session, tier, BATCH)

    def _record(self, due: StoreHoldDue) -> bool:
        with self.ctx.db.session() as session:
            return record_store_hold(session, due, actor=ACTOR)

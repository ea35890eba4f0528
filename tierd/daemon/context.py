"""What every service on the node shares: config, catalog, and a few signals between them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.fleet.election import FixedLeadership, Leadership
from tierd.daemon.metrics import Metrics
from tierd.keyring import Keyring

if TYPE_CHECKING:
    from tierd.daemon.outage import CatalogOutage
    from tierd.daemon.restore.service import RestoreService
    from tierd.daemon.retention.service import RetentionService
    from tierd.daemon.scrub.service import ScrubService

__all__ = ["Context"]


@dataclass
class Context:
    """Shared state of one daemon process (built once by the runtime, passed to each service)."""

    config: Config
    db: Database
    draining: bool = False
    watcher_running: bool = False
    #: Set when new work may exist (a checkpoint recorded, a replica verified); the pipeline
    #: clears it when it wakes. Services set it with ``ctx.wake_pipeline()``.
    pipeline_wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    #: What the pipeline's next pass must schedule: the checkpoints named since its last pass,
    #: or None for every one. Empty with ``pipeline_wakeup`` set: only claim (another node
    #: queued jobs). Read and reset by ``take_scheduling``.
    _to_schedule: set[int] | None = field(default=None, init=False)
    metrics: Metrics = field(init=False)
    #: The API's bearer tokens, read once (token files included); ``tokens.reload()`` on SIGHUP.
    tokens: Keyring = field(init=False)
    #: Whether this daemon may delete, evict and scrub on shared tiers now (``leader``). One
    #: daemon of a fleet at a time leads (the fleet's ``Elector``); a daemon alone always does.
    #: Node-local tiers are every daemon's own, whatever this says: see ``acts_on``.
    leadership: Leadership = field(default_factory=FixedLeadership)
    #: The running retention service (pins, deletes and reservations from the API go through it).
    retention: RetentionService | None = None
    #: The running restore service (the API's restores are woken and cancelled through it).
    restore: RestoreService | None = None
    #: The running scrubber (the API's tier list shows its progress).
    scrub: ScrubService | None = None
    #: Each service's view of the catalog, by service name (``/readyz`` warns while one fails).
    outages: dict[str, CatalogOutage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.db, [tier.name for tier in self.config.tiers])
        self.tokens = Keyring(self.config.api.tokens)

    @property
    def leader(self) -> bool:
        """Whether this daemon leads the fleet's shared tiers at this instant (asked afresh each time)."""
        return self.leadership.leads()

    @leader.setter
    def leader(self, value: bool) -> None:
        self.leadership = FixedLeadership(value)

    def acts_on(self, tier: str) -> bool:
        """Whether this daemon may delete, evict or scrub on ``tier`` now (its own, or it leads)."""
        return self.leader or not self.config.tier(tier).shared

    def wake_pipeline(self, checkpoint_id: int | None = None) -> None:
        """Tell the pipeline to look for new work now rather than at its next poll.

        With ``checkpoint_id`` its next pass schedules that checkpoint's hops (and those of
        any other named since); without, every checkpoint's.
        """
        if checkpoint_id is None:
            self._to_schedule = None
        elif self._to_schedule is not None:
            self._to_schedule.add(checkpoint_id)
        self.pipeline_wakeup.set()

    def wake_claims(self) -> None:
        """Tell the pipeline to claim queued jobs now: another node queued some (nothing to schedule)."""
        self.pipeline_wakeup.set()

    def take_scheduling(self) -> set[int] | None:
        """The checkpoints to schedule since the last call (None: all); resets to none."""
        taken, self._to_schedule = self._to_schedule, set()
        return taken

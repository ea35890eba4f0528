"""What every service on the node shares: config, catalog, and a few signals between them.

Context sits below the services and names none of them. What the API and the other services
ask of a running retention, restore or scrub service is a protocol here (``RetentionHandle``,
``RestoreHandle``, ``ScrubHandle``) that the service class meets, and the fleet's standing is a
``Leadership`` (the fleet's ``Elector``, or ``FixedLeadership`` for a daemon alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from tierd.config import Config
from tierd.daemon.backends.base import Space
from tierd.daemon.catalog.db import Database
from tierd.daemon.metrics import Metrics
from tierd.daemon.transfer.recheck import CheckOutcome
from tierd.keyring import Keyring

if TYPE_CHECKING:
    from tierd.daemon.outage import CatalogOutage

__all__ = [
    "BlockedView",
    "Context",
    "FixedLeadership",
    "Leadership",
    "RestoreHandle",
    "RetentionHandle",
    "RoomView",
    "ScrubHandle",
]


class Leadership(Protocol):
    """Whether this daemon may act on shared tiers at this instant."""

    def leads(self) -> bool:
        """True while this daemon leads."""


@dataclass
class FixedLeadership:
    """A daemon alone (SQLite), which always leads; or a standing fixed by hand."""

    value: bool = True

    def leads(self) -> bool:
        """The fixed standing."""
        return self.value


class BlockedView(Protocol):
    """Replicas on a tier that eviction may not take, summed by their first blocker."""

    @property
    def blocker(self) -> Enum:
        """The protection that keeps them (pinned, held, no durable copy elsewhere, ...)."""

    @property
    def reason(self) -> str:
        """The blocker in words."""

    @property
    def checkpoints(self) -> int:
        """How many checkpoints it keeps."""

    @property
    def bytes(self) -> int:
        """How many bytes it keeps."""


class RoomView(Protocol):
    """The outcome of making room on a tier: enough or not, and what blocks the rest."""

    @property
    def ok(self) -> bool:
        """Whether the room is there."""

    @property
    def space(self) -> Space:
        """The tier's space after the evictions."""

    @property
    def target_free(self) -> int:
        """The free bytes wanted."""

    @property
    def evicted(self) -> Sequence[int]:
        """The checkpoints evicted to make the room."""

    @property
    def evicted_bytes(self) -> int:
        """The bytes they freed."""

    @property
    def blocked(self) -> Sequence[BlockedView]:
        """What kept the rest."""

    def describe(self) -> str:
        """One line for a log or a 409."""


class RetentionHandle(Protocol):
    """What the API and the fleet ask of the running retention service."""

    async def space(self, tier: str) -> Space | None:
        """The tier's size and free bytes now (None for stores that do not fill up)."""

    @property
    def blocked(self) -> Mapping[str, str]:
        """The tiers whose disk pressure is stuck (nothing evictable below the low mark), and why."""

    async def reserve(self, tier: str, nbytes: int) -> RoomView:
        """Make room for ``nbytes`` plus the low mark, evicting what may safely go."""

    def wake(self) -> None:
        """Plan again now (a pin, hold, metric or delete changed what retention decides)."""


class RestoreHandle(Protocol):
    """What the API asks of the running restore service."""

    def wake(self) -> None:
        """Look for queued restores now."""

    async def cancel(self, job_id: int, *, actor: str, reason: str) -> None:
        """Cancel a restore and remove what it wrote; raises NotFound, Conflict (done or failed)."""


class ScrubHandle(Protocol):
    """What the API asks of the running scrubber."""

    @property
    def last_pass_at(self) -> Mapping[str, datetime | None]:
        """When each scrubbed tier last finished a pass, by tier name."""

    async def verify(self, checkpoint_id: int, *, actor: str) -> Sequence[CheckOutcome]:
        """Re-check every verified replica of a checkpoint now, one outcome per replica."""


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
    #: Set with ``pipeline_wakeup`` when a checkpoint is named (a part recorded, a hop ended):
    #: the peer replication service looks for parts to send.
    peer_wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when this node may owe a part to a waiting step (a notify left one waiting here; a
    #: part was recorded here; another daemon made a waiting step: its NOTIFY, heard by the pipeline's
    #: listener). The detect service's waiting sweep runs when it is set (``wake_waiting``).
    waiting_wakeup: asyncio.Event = field(default_factory=asyncio.Event)
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
    retention: RetentionHandle | None = None
    #: The running restore service (the API's restores are woken and cancelled through it).
    restore: RestoreHandle | None = None
    #: The running scrubber (the API's tier list shows its progress).
    scrub: ScrubHandle | None = None
    #: Each service's view of the catalog, by service name (``/readyz`` warns while one fails).
    outages: dict[str, CatalogOutage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.metrics = Metrics(self.db, self.config, leads=lambda: self.leader, acts_on=self.acts_on)
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
        self.peer_wakeup.set()

    def wake_claims(self) -> None:
        """Tell the pipeline to claim queued jobs now: another node queued some (nothing to schedule)."""
        self.pipeline_wakeup.set()

    def wake_waiting(self) -> None:
        """Tell the detect service to look at the waiting steps now rather than at its next poll."""
        self.waiting_wakeup.set()

    def take_scheduling(self) -> set[int] | None:
        """The checkpoints to schedule since the last call (None: all); resets to none."""
        taken, self._to_schedule = self._to_schedule, set()
        return taken

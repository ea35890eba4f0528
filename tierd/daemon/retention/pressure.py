"""Disk pressure on POSIX tiers: evict below the low mark, and make room when a job asks.

Below ``free_space.evict_below`` a tier evicts, oldest first, replicas that are not
protected and have a verified copy on another durable tier (re-checked right before each
delete, by the one deletion path in ``deleter``), without the delete delay, until
``evict_to`` is free. A reservation asks for ``bytes`` plus the low mark. When nothing more
may go, the tier says so: a log line at error level, the ``tierd_tier_pressure_blocked``
gauge, ``/v1/tiers`` and ``/readyz``'s detail, and nothing that is not durable elsewhere is
touched. One eviction at a time per tier (a lock), so a reservation and a pass never race.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tierd.config import Config, PosixTier
from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend, Space
from tierd.daemon.catalog import replica_deletions
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.replica_deletions import Origin
from tierd.daemon.metrics import Metrics
from tierd.daemon.retention.deleter import Deleter
from tierd.daemon.retention.eviction import (
    BlockedSpace,
    EvictionCandidate,
    describe_blocked,
    eviction_blockers,
    eviction_candidates,
)
from tierd.daemon.retention.snapshot import Snapshot
from tierd.errors import NotFound
from tierd.logs import get_logger
from tierd.units import format_bytes

__all__ = ["Pressure", "Room"]

log = get_logger(__name__)
ACTOR = "retention"


@dataclass(frozen=True)
class Room:
    """The outcome of making room on a tier: enough or not, and what blocks the rest."""

    ok: bool
    space: Space
    target_free: int
    evicted: tuple[int, ...] = ()
    evicted_bytes: int = 0
    blocked: tuple[BlockedSpace, ...] = ()

    @property
    def short_bytes(self) -> int:
        """Bytes still missing to reach the target."""
        return max(0, self.target_free - self.space.free)

    def describe(self) -> str:
        """One line for a log or a 409."""
        if self.ok:
            return f"{format_bytes(self.space.free)} free, {format_bytes(self.target_free)} wanted"
        return (
            f"{format_bytes(self.short_bytes)} short of {format_bytes(self.target_free)} free; "
            f"kept: {describe_blocked(self.blocked)}"
        )


@dataclass
class TierPressure:
    """What the last look at one tier found (shown by /v1/tiers and /readyz)."""

    space: Space | None = None
    blocked: str | None = None
    evictions: int = 0


@dataclass
class Pressure:
    """Eviction and reservations for the POSIX tiers that set ``free_space``."""

    config: Config
    db: Database
    backends: Mapping[str, Backend]
    deleter: Deleter
    metrics: Metrics
    snapshot: Callable[[], Snapshot]
    state: dict[str, TierPressure] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def tiers(self) -> list[PosixTier]:
        """The tiers with free-space marks."""
        return [t for t in self.config.tiers if isinstance(t, PosixTier) and t.free_space is not None]

    async def space(self, tier: str) -> Space | None:
        """The tier's size and free bytes now (None for stores that do not fill up)."""
        space = await self.backends[tier].space()
        if space is not None:
            self.state.setdefault(tier, TierPressure()).space = space
        return space

    async def relieve_all(self) -> None:
        """Evict on every tier that is below its low mark (a shared one only on the fleet's leader)."""
        for tier in self.tiers():
            if self.deleter.acts_on(tier.name):
                await self.relieve(tier)

    async def relieve(self, tier: PosixTier) -> Room | None:
        """Evict down to ``evict_to`` if the tier is below ``evict_below``; None when it is not."""
        assert tier.free_space is not None
        space = await self.space(tier.name)
        if space is None:
            return None
        low, high = tier.free_space.marks(space.total)
        if space.free >= low:
            self._clear(tier.name)
            return None
        why = f"{format_bytes(space.free)} free, below the low mark {format_bytes(low)}"
        return await self.make_room(tier.name, high, why=why, alarm_below=low)

    async def reserve(self, tier_name: str, nbytes: int) -> Room:
        """Make ``nbytes`` plus the tier's low mark free, evicting what it safely can.

        Raises NotFound for a tier that is not a POSIX tier of this daemon.
        """
        tier = next((t for t in self.config.tiers if t.name == tier_name), None)
        if not isinstance(tier, PosixTier):
            raise NotFound(f"no POSIX tier named {tier_name!r} (object stores do not fill up)")
        space = await self.space(tier_name)
        assert space is not None
        low = tier.free_space.marks(space.total)[0] if tier.free_space is not None else 0
        why = f"a reservation of {format_bytes(nbytes)}"
        return await self.make_room(tier_name, nbytes + low, why=why, alarm_below=None, all_or_nothing=True)

    async def make_room(
        self, tier: str, target_free: int, *, why: str, alarm_below: int | None, all_or_nothing: bool = False
    ) -> Room:
        """Evict until ``target_free`` bytes are free or nothing more may go.

        ``all_or_nothing`` (reservations) evicts nothing when even every candidate would not
        make the room: no copy is given up for a save that cannot happen anyway.
        """
        async with self._locks.setdefault(tier, asyncio.Lock()):
            space = await self.space(tier)
            assert space is not None
            if space.free >= target_free:
                return Room(True, space, target_free)
            snap = await blocking(self.snapshot)
            plan = eviction_candidates(snap.checkpoints, tier, self.deleter.rules, target_free - space.free)
            candidates = () if all_or_nothing and not plan.enough else plan.candidates
            if not self.deleter.acts_on(tier):
                candidates = ()  # a shared tier: only the fleet's leader evicts there
            if self.config.retention.dry_run:
                for c in candidates:
                    log.info("retention_dry_run_would_evict", tier=tier, checkpoint=c.checkpoint_id, why=why)
                candidates = ()
            evicted, freed, space = await self._evict(tier, candidates, target_free, why)
            room = Room(space.free >= target_free, space, target_free, evicted, freed)
            if not room.ok:
                snap = await blocking(self.snapshot)
                room = Room(
                    False,
                    space,
                    target_free,
                    evicted,
                    freed,
                    eviction_blockers(snap.checkpoints, tier, self.deleter.rules),
                )
            self._report(tier, room, alarm_below)
            return room

    async def _evict(
        self, tier: str, candidates: Sequence[EvictionCandidate], target_free: int, why: str
    ) -> tuple[tuple[int, ...], int, Space]:
        evicted: list[int] = []
        freed = 0
        space = await self.space(tier)
        assert space is not None
        for candidate in candidates:
            if space.free >= target_free:
                break
            if await self._evict_one(tier, candidate, why):
                evicted.append(candidate.checkpoint_id)
                freed += candidate.size_bytes
                self.metrics.evictions.labels(tier).inc()
            space = await self.space(tier)
            assert space is not None
        return tuple(evicted), freed, space

    async def _evict_one(self, tier: str, candidate: EvictionCandidate, why: str) -> bool:
        if not await blocking(self._schedule, candidate, tier, why):
            return False
        due = await blocking(self._due, candidate.checkpoint_id, tier)
        outcomes = [await self.deleter.delete(item) for item in due]
        return any(o.result == "deleted" for o in outcomes)

    def _schedule(self, candidate: EvictionCandidate, tier: str, why: str) -> bool:
        with self.db.session() as session:
            return replica_deletions.schedule_replica_deletion(
                session,
                candidate.checkpoint_id,
                tier,
                delete_after=utcnow(),
                origin=Origin.EVICTION,
                reason=f"{why}; oldest first, a verified copy stays on {candidate.backing_tier}",
                policy="free_space",
                actor=ACTOR,
            )

    def _due(self, checkpoint_id: int, tier: str) -> list[replica_deletions.DueDeletion]:
        return self.deleter.due(utcnow(), tiers=[tier], checkpoint_id=checkpoint_id)

    def _report(self, tier: str, room: Room, alarm_below: int | None) -> None:
        state = self.state.setdefault(tier, TierPressure())
        state.evictions += len(room.evicted)
        stuck = alarm_below is not None and room.space.free < alarm_below
        if stuck:
            state.blocked = room.describe()
            self.metrics.tier_pressure(tier, blocked=True)
            log.error("disk_pressure_unrelieved", tier=tier, detail=state.blocked, evicted=len(room.evicted))
        elif alarm_below is not None:
            self._clear(tier)
        if room.evicted:
            log.info(
                "evicted",
                tier=tier,
                checkpoints=list(room.evicted),
                bytes=room.evicted_bytes,
                free=room.space.free,
            )

    def _clear(self, tier: str) -> None:
        state = self.state.setdefault(tier, TierPressure())
        if state.blocked is not None:
            log.info("disk_pressure_relieved", tier=tier)
        state.blocked = None
        self.metrics.tier_pressure(tier, blocked=False)

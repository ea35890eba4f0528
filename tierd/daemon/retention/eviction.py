"""Disk pressure: which replicas one tier may evict at once, and what blocks the rest.

Eviction ignores the tier's retention policy (it runs because the disk is full, without the
delete delay) but never the protections: it takes only replicas of unprotected checkpoints
that have a verified replica on another durable tier (re-verified right before the delete),
oldest completed first. Nothing that is not durable elsewhere is ever evicted.

The same rules say what a reservation cannot free: :func:`eviction_blockers` sums, by their
first blocker, the replicas that must stay (the body of a reservation's 409).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierd.daemon.retention.state import (
    HOLDS_BYTES,
    IN_FLIGHT,
    Block,
    Blocker,
    CheckpointState,
    ReplicaState,
    TierRules,
    protections,
)
from tierd.units import format_bytes

__all__ = [
    "BlockedSpace",
    "Eviction",
    "EvictionCandidate",
    "describe_blocked",
    "eviction_blockers",
    "eviction_candidates",
]

_NO_DURABLE_COPY = "without a verified copy on another durable tier"


@dataclass(frozen=True)
class EvictionCandidate:
    """A replica the tier may evict now, backed by a verified replica on ``backing_tier``."""

    checkpoint_id: int
    run: str
    step: int
    size_bytes: int
    backing_tier: str


@dataclass(frozen=True)
class Eviction:
    """The replicas to evict, oldest first, and how far they fall short of the target."""

    candidates: tuple[EvictionCandidate, ...]
    freed_bytes: int
    short_bytes: int

    @property
    def enough(self) -> bool:
        """Whether evicting every candidate meets the target."""
        return self.short_bytes == 0


@dataclass(frozen=True)
class BlockedSpace:
    """Replicas on a tier that eviction may not take, summed by their first blocker."""

    blocker: Blocker
    reason: str
    checkpoints: int
    bytes: int

    def __str__(self) -> str:
        noun = "checkpoint" if self.checkpoints == 1 else "checkpoints"
        return f"{self.checkpoints} {noun}, {format_bytes(self.bytes)}, {self.reason}"


def _backing(checkpoint: CheckpointState, tier: str, tiers: Sequence[TierRules]) -> str | None:
    """The most durable other tier holding a verified replica, if any."""
    for rules in reversed(tiers):
        if rules.name != tier and rules.durable and checkpoint.replica(rules.name) is ReplicaState.VERIFIED:
            return rules.name
    return None


def eviction_candidates(
    checkpoints: Sequence[CheckpointState], tier: str, tiers: Sequence[TierRules], bytes_to_free: int
) -> Eviction:
    """Replicas on ``tier`` to evict, oldest completed first, until ``bytes_to_free`` is reached.

    Only unprotected checkpoints with a verified replica on another durable tier qualify.
    """
    protected = protections(checkpoints)
    eligible = []
    for c in checkpoints:
        backing = _backing(c, tier, tiers)
        if c.replica(tier) in HOLDS_BYTES and not protected[c.id] and backing is not None:
            eligible.append((c, backing))
    eligible.sort(key=lambda item: (item[0].facts.finished_at, item[0].facts.step, item[0].id))
    chosen: list[EvictionCandidate] = []
    freed = 0
    for c, backing in eligible:
        if freed >= bytes_to_free:
            break
        chosen.append(EvictionCandidate(c.id, c.facts.run, c.facts.step, c.size_on(tier), backing))
        freed += c.size_on(tier)
    return Eviction(tuple(chosen), freed, max(0, bytes_to_free - freed))


def eviction_blockers(
    checkpoints: Sequence[CheckpointState], tier: str, tiers: Sequence[TierRules]
) -> tuple[BlockedSpace, ...]:
    """What keeps eviction from freeing space on ``tier``, largest first.

    Each replica counts once, under its first blocker in this order: pinned, held, in use,
    newest, incomplete, copying, no verified copy on another durable tier.
    """
    protected = protections(checkpoints)
    totals: dict[Blocker, tuple[str, int, int]] = {}
    for c in checkpoints:
        state = c.replica(tier)
        if state not in HOLDS_BYTES and state not in IN_FLIGHT:
            continue
        block = _first_block(c, state, protected[c.id], _backing(c, tier, tiers))
        if block is None:
            continue
        _, count, size = totals.get(block.blocker, ("", 0, 0))
        totals[block.blocker] = (_summary_reason(block), count + 1, size + c.size_on(tier))
    summary = [BlockedSpace(b, reason, n, size) for b, (reason, n, size) in totals.items()]
    return tuple(sorted(summary, key=lambda s: (-s.bytes, list(Blocker).index(s.blocker))))


def _first_block(
    checkpoint: CheckpointState, state: ReplicaState, protected: tuple[Block, ...], backing: str | None
) -> Block | None:
    if protected:
        return protected[0]
    if state in IN_FLIGHT:
        return Block(Blocker.COPYING, "being copied in")
    if backing is None:
        return Block(Blocker.NO_DURABLE_COPY, _NO_DURABLE_COPY)
    return None


def _summary_reason(block: Block) -> str:
    """A reason that reads well for several checkpoints at once."""
    if block.blocker is Blocker.HELD:
        return "under a legal hold"
    if block.blocker is Blocker.NEWEST:
        return "the newest complete step of their run"
    return block.reason


def describe_blocked(blocked: Sequence[BlockedSpace]) -> str:
    """One line for a log or a 409: ``2 checkpoints, 1.1 TB, pinned; ...`` (``nothing`` if empty)."""
    return "; ".join(str(b) for b in blocked) or "nothing"

"""What the retention planner is given, and what protects a checkpoint on every tier.

The retention service loads these from the catalog; nothing here does I/O. A checkpoint is
protected on every tier, by every path that deletes (retention, eviction, the API), when it is
pinned, under a hold, the newest complete step of its run, being read by a copy or a restore,
or not complete. A tier 0 with ``retention.release_once_copied`` lifts the newest-step
protection on that tier alone once its copies allow (:class:`Release`; see ``plan``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tierd.config import Config
from tierd.daemon.retention.policies import CheckpointFacts, Policy, policies_for

__all__ = [
    "HOLDS_BYTES",
    "IN_FLIGHT",
    "Block",
    "Blocker",
    "CheckpointState",
    "Release",
    "ReplicaState",
    "TierRules",
    "protections",
    "tier_rules",
]


class ReplicaState(enum.StrEnum):
    """A checkpoint's replica on one tier: the catalog's replica states, plus ``none`` (no row)."""

    PENDING = "pending"
    COPYING = "copying"
    VERIFIED = "verified"
    FAILED = "failed"
    DELETING = "deleting"
    DELETED = "deleted"
    NONE = "none"


#: Replicas whose bytes are settled on the tier: retention may delete them.
HOLDS_BYTES = frozenset({ReplicaState.VERIFIED, ReplicaState.FAILED, ReplicaState.DELETING})
#: Replicas being written by a copy: never deleted under it.
IN_FLIGHT = frozenset({ReplicaState.PENDING, ReplicaState.COPYING})


@dataclass(frozen=True)
class CheckpointState:
    """One checkpoint as the planner sees it: facts, protections, and its replica on each tier.

    ``replicas`` maps a tier name to its replica's state; a tier not in it has none.
    ``in_use`` is true while a copy or a restore reads the checkpoint.
    """

    facts: CheckpointFacts
    replicas: Mapping[str, ReplicaState] = field(default_factory=dict)
    size_bytes: int = 0
    pinned: bool = False
    holds: tuple[str, ...] = ()
    in_use: bool = False
    #: Tier -> the bytes it holds of the checkpoint when not all (a node-local tier: this node's part).
    local_size: Mapping[str, int] = field(default_factory=dict)
    #: When the step became safe against one node's loss (read only where a tier may release it).
    safe_since: datetime | None = None

    def size_on(self, tier: str) -> int:
        """The bytes the checkpoint's replica on ``tier`` takes there."""
        return self.local_size.get(tier, self.size_bytes)

    @property
    def id(self) -> int:
        """The checkpoint's catalog id."""
        return self.facts.id

    def replica(self, tier: str) -> ReplicaState:
        """The state of the replica on ``tier`` (``none`` when there is none)."""
        return self.replicas.get(tier, ReplicaState.NONE)


@dataclass(frozen=True)
class Release:
    """``retention.release_once_copied`` on tier 0: which copies let a step go from it.

    A step may go once verified on ``next_tier`` and, when ``peer`` (a peer tier is
    configured), safe against one node's loss (its parts verified on other nodes or on the
    ``shared_tiers``).
    """

    tier: str
    next_tier: str
    peer: bool
    shared_tiers: tuple[str, ...] = ()

    def candidate(self, checkpoint: CheckpointState) -> bool:
        """Whether the checkpoint's safety is worth reading: on the tier, and verified on the next one."""
        return (
            checkpoint.facts.complete
            and checkpoint.replica(self.tier) in HOLDS_BYTES
            and checkpoint.replica(self.next_tier) is ReplicaState.VERIFIED
        )

    def allows(self, checkpoint: CheckpointState) -> bool:
        """Whether the checkpoint's copies let it go from the releasing tier."""
        if checkpoint.replica(self.next_tier) is not ReplicaState.VERIFIED:
            return False
        return not self.peer or checkpoint.safe_since is not None

    def copied(self, checkpoint: CheckpointState) -> str:
        """Why the copies let the checkpoint go (when :meth:`allows`)."""
        text = f"release_once_copied: verified on tier {self.next_tier}"
        if self.peer and checkpoint.safe_since is not None:
            text += f" and safe against one node's loss since {checkpoint.safe_since.isoformat()}"
        return text

    def waiting(self) -> str:
        """Why a step the tier's other rules drop still stays (its copies do not allow yet)."""
        text = f"release_once_copied: kept until verified on tier {self.next_tier}"
        return text + (" and safe against one node's loss" if self.peer else "")


@dataclass(frozen=True)
class TierRules:
    """A tier as the planner needs it: its name, whether it is durable, its policy, and its release."""

    name: str
    durable: bool
    policy: Policy
    release: Release | None = None


def tier_rules(config: Config) -> tuple[TierRules, ...]:
    """Every configured tier's rules, in tier order."""
    rules = [TierRules(t.name, t.durable, policies_for(t.retention)) for t in config.tiers]
    if config.tiers[0].retention.release_once_copied and len(rules) > 1:
        shared = tuple(t.name for t in config.tiers if t.shared)
        release = Release(rules[0].name, config.tiers[1].name, config.peer is not None, shared)
        rules[0] = TierRules(rules[0].name, rules[0].durable, rules[0].policy, release)
    return tuple(rules)


class Blocker(enum.StrEnum):
    """Why a replica may not be deleted (a bounded label for logs and metrics)."""

    PINNED = "pinned"
    HELD = "held"
    IN_USE = "in_use"
    NEWEST = "newest"
    INCOMPLETE = "incomplete"
    COPYING = "copying"
    NO_DURABLE_COPY = "no_durable_copy"
    LAST_DURABLE_COPY = "last_durable_copy"


@dataclass(frozen=True)
class Block:
    """One thing that blocks a deletion, with the sentence an operator reads."""

    blocker: Blocker
    reason: str


def protections(checkpoints: Sequence[CheckpointState]) -> dict[int, tuple[Block, ...]]:
    """For each checkpoint id, what protects it on every tier (empty when nothing does)."""
    newest: dict[str, int] = {}
    for c in checkpoints:
        if c.facts.complete and c.facts.step > newest.get(c.facts.run, c.facts.step - 1):
            newest[c.facts.run] = c.facts.step
    out: dict[int, tuple[Block, ...]] = {}
    for c in checkpoints:
        blocks: list[Block] = []
        if c.pinned:
            blocks.append(Block(Blocker.PINNED, "pinned"))
        if c.holds:
            blocks.append(Block(Blocker.HELD, "held by " + ", ".join(sorted(c.holds))))
        if c.in_use:
            blocks.append(Block(Blocker.IN_USE, "being read by a copy or a restore"))
        if not c.facts.complete:
            blocks.append(Block(Blocker.INCOMPLETE, "not complete"))
        elif newest[c.facts.run] == c.facts.step:
            blocks.append(Block(Blocker.NEWEST, f"the newest complete step of run {c.facts.run}"))
        out[c.id] = tuple(blocks)
    return out

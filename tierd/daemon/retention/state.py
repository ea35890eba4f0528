"""What the retention planner is given, and what protects a checkpoint on every tier.

The retention service loads these from the catalog; nothing here does I/O. A checkpoint is
protected on every tier, by every path that deletes (retention, eviction, the API), when it is
pinned, under a hold, the newest complete step of its run, being read by a copy or a restore,
or not complete.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tierd.config import Config
from tierd.daemon.retention.policies import CheckpointFacts, Policy, policies_for

__all__ = [
    "HOLDS_BYTES",
    "IN_FLIGHT",
    "Block",
    "Blocker",
    "CheckpointState",
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
class TierRules:
    """A tier as the planner needs it: its name, whether it is durable, and its policy."""

    name: str
    durable: bool
    policy: Policy


def tier_rules(config: Config) -> tuple[TierRules, ...]:
    """Every configured tier's rules, in tier order."""
    return tuple(TierRules(t.name, t.durable, policies_for(t.retention)) for t in config.tiers)


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

"""The retention plan: per tier and replica, keep (by which policy), delete (why) or blocked (why).

Rules, for a replica that its tier's policy drops:

- Nothing is deleted from a protected checkpoint (:func:`~.state.protections`).
- A replica on tier *k* is deleted only while a **verified** replica of the checkpoint stays on
  another **durable** tier: the delete's ``backing_tier``, to re-verify right before deleting.
  A replica in ``deleting`` is on its way out, so it never backs another delete.
- When no kept tier holds a verified durable replica, the last one among the dropped tiers
  (the most durable, last in tier order) stays: deleting it would lose the last good copy
  while some tier's policy still wants the checkpoint.
- The checkpoint's final deletion (every replica, the last durable copy included) happens
  only when **every** configured tier's policy drops it, nothing protects it and no copy is
  being written to any tier. Such deletes have no backing tier and are marked ``final``.

The plan is the wanted state, recomputed from the catalog on every pass, and is safe to
recompute at any moment: the two-phase executor recomputes it right before each delete and
deletes only what the fresh plan still deletes (after re-verifying its backing replica). A
replica already ``deleting`` that the plan keeps or blocks should have its deletion cancelled
(:attr:`Verdict.cancels_deletion`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from tierd.daemon.retention.policies import Decision, Policy
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

__all__ = ["Action", "Plan", "Verdict", "plan_retention"]

_INCOMPLETE = Decision(True, "incomplete", "not complete yet: retention decides once it is")
_PRESENT = HOLDS_BYTES | IN_FLIGHT


class Action(enum.StrEnum):
    """What the plan does with one replica."""

    KEEP = "keep"
    DELETE = "delete"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class Verdict:
    """The plan for one replica: its action, the policy decision behind it, and what blocks it.

    ``backing_tier`` (deletes that are not final) names the tier whose verified durable replica
    makes the delete safe; it is re-verified right before the delete.
    """

    checkpoint_id: int
    tier: str
    state: ReplicaState
    action: Action
    decision: Decision
    blocks: tuple[Block, ...] = ()
    backing_tier: str | None = None
    final: bool = False

    @property
    def policy(self) -> str:
        """The policy that kept or dropped the replica (``keep_last``, ``keep_last+keep_best``)."""
        return self.decision.policy

    @property
    def reason(self) -> str:
        """One sentence for the plan, the log and the audit event."""
        if self.action is Action.KEEP:
            return self.decision.reason
        if self.action is Action.BLOCKED:
            return "; ".join(block.reason for block in self.blocks)
        if self.final:
            return f"every tier's policy drops it ({self.decision.reason})"
        return f"{self.decision.reason}; a verified copy stays on durable tier {self.backing_tier}"

    @property
    def cancels_deletion(self) -> bool:
        """Whether the replica is ``deleting`` but the plan no longer deletes it."""
        return self.state is ReplicaState.DELETING and self.action is not Action.DELETE

    @property
    def schedules_deletion(self) -> bool:
        """Whether the replica is to be moved to ``deleting`` (it is not there yet)."""
        return self.action is Action.DELETE and self.state is not ReplicaState.DELETING


@dataclass(frozen=True)
class Plan:
    """Every replica's verdict, grouped by tier in tier order."""

    tiers: tuple[TierRules, ...]
    verdicts: tuple[Verdict, ...]

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.verdicts)

    def for_tier(self, tier: str) -> tuple[Verdict, ...]:
        """The verdicts of one tier."""
        return tuple(v for v in self.verdicts if v.tier == tier)

    def verdict(self, checkpoint_id: int, tier: str) -> Verdict | None:
        """The verdict for one replica, or None when the plan has none (no replica there)."""
        return self._index.get((checkpoint_id, tier))

    @cached_property
    def _index(self) -> dict[tuple[int, str], Verdict]:
        return {(v.checkpoint_id, v.tier): v for v in self.verdicts}

    def deletions(self) -> list[Verdict]:
        """The deletes, in a safe order: backed ones first, then final ones, least durable tier first."""
        order = {t.name: (t.durable, i) for i, t in enumerate(self.tiers)}
        deletes = [v for v in self.verdicts if v.action is Action.DELETE]
        return sorted(deletes, key=lambda v: (v.final, order[v.tier]))

    def cancellations(self) -> list[Verdict]:
        """Replicas in ``deleting`` whose deletion the plan no longer wants."""
        return [v for v in self.verdicts if v.cancels_deletion]


def plan_retention(checkpoints: Sequence[CheckpointState], tiers: Sequence[TierRules], now: datetime) -> Plan:
    """The plan for every replica of ``checkpoints`` on the configured ``tiers``.

    Replicas on a tier that is not configured any more are left out (nothing deletes them).
    """
    rules = tuple(tiers)
    complete = [c for c in checkpoints if c.facts.complete]
    facts = [c.facts for c in complete]
    decisions: dict[str, dict[int, Decision]] = {}
    by_policy: dict[Policy, dict[int, Decision]] = {}  # tiers with equal rules decide once
    for tier in rules:
        if tier.policy not in by_policy:
            by_id = zip((c.id for c in complete), tier.policy.decide(facts, now), strict=True)
            by_policy[tier.policy] = dict(by_id)
        decisions[tier.name] = by_policy[tier.policy]
    protected = protections(checkpoints)
    verdicts: list[Verdict] = []
    for checkpoint in checkpoints:
        verdicts.extend(_checkpoint_verdicts(checkpoint, rules, decisions, protected[checkpoint.id]))
    order = {t.name: i for i, t in enumerate(rules)}
    verdicts.sort(key=lambda v: order[v.tier])  # stable: checkpoints keep their order in each tier
    return Plan(rules, tuple(verdicts))


def _checkpoint_verdicts(
    checkpoint: CheckpointState,
    tiers: tuple[TierRules, ...],
    decisions: Mapping[str, Mapping[int, Decision]],
    protected: tuple[Block, ...],
) -> list[Verdict]:
    held = [t for t in tiers if checkpoint.replica(t.name) in _PRESENT]
    if not checkpoint.facts.complete:
        return [_verdict(checkpoint, t, Action.KEEP, _INCOMPLETE) for t in held]
    wanted = {t.name: decisions[t.name][checkpoint.id] for t in tiers}
    if not any(d.kept for d in wanted.values()):
        return [_final_verdict(checkpoint, t, tiers, wanted[t.name], protected) for t in held]
    backers, reserved = _backers(checkpoint, tiers, wanted)
    out = []
    for tier in held:
        decision = wanted[tier.name]
        if decision.kept:
            out.append(_verdict(checkpoint, tier, Action.KEEP, decision))
            continue
        blocks = list(protected)
        if checkpoint.replica(tier.name) in IN_FLIGHT:
            blocks.append(Block(Blocker.COPYING, f"a copy to tier {tier.name} is in progress"))
        backing = next((b for b in reversed(backers) if b != tier.name), None)
        if tier.name == reserved:
            keepers = ", ".join(name for name, d in wanted.items() if d.kept)
            text = f"the last verified durable copy, and not every tier's policy drops it (kept on {keepers})"
            blocks.append(Block(Blocker.LAST_DURABLE_COPY, text))
        elif backing is None:
            blocks.append(Block(Blocker.NO_DURABLE_COPY, "no verified copy on another durable tier"))
        if blocks:
            out.append(_verdict(checkpoint, tier, Action.BLOCKED, decision, tuple(blocks)))
        else:
            out.append(_verdict(checkpoint, tier, Action.DELETE, decision, backing=backing))
    return out


def _backers(
    checkpoint: CheckpointState, tiers: tuple[TierRules, ...], wanted: Mapping[str, Decision]
) -> tuple[list[str], str | None]:
    """The durable verified replicas that stay (may back a delete), and the one kept back for that.

    When no kept tier holds a verified durable replica, the most durable dropped one is
    ``reserved``: it stays, and is then the only backer.
    """
    durable = [t.name for t in tiers if t.durable and checkpoint.replica(t.name) is ReplicaState.VERIFIED]
    kept = [name for name in durable if wanted[name].kept]
    if kept or not durable:
        return kept, None
    return [durable[-1]], durable[-1]


def _final_verdict(
    checkpoint: CheckpointState,
    tier: TierRules,
    tiers: tuple[TierRules, ...],
    decision: Decision,
    protected: tuple[Block, ...],
) -> Verdict:
    """Every tier's policy drops the checkpoint: each replica goes unless something protects it."""
    blocks = list(protected)
    copying = [t.name for t in tiers if checkpoint.replica(t.name) in IN_FLIGHT]
    if copying:
        text = "a copy to tier " + ", ".join(copying) + " is in progress"
        blocks.append(Block(Blocker.COPYING, text))
    if blocks:
        return _verdict(checkpoint, tier, Action.BLOCKED, decision, tuple(blocks))
    return _verdict(checkpoint, tier, Action.DELETE, decision, final=True)


def _verdict(
    checkpoint: CheckpointState,
    tier: TierRules,
    action: Action,
    decision: Decision,
    blocks: tuple[Block, ...] = (),
    *,
    backing: str | None = None,
    final: bool = False,
) -> Verdict:
    state = checkpoint.replica(tier.name)
    return Verdict(checkpoint.id, tier.name, state, action, decision, blocks, backing, final)

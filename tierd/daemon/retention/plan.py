"""The retention plan: per tier and replica, keep (by which policy), delete (why) or blocked (why).

Rules, for a replica that its tier's policy drops:

- Nothing is deleted from a protected checkpoint (:func:`~.state.protections`).
- A replica on tier *k* is deleted only while a **verified** replica of the checkpoint stays on
  another **durable** tier: the delete's ``backing_tier``, to re-verify right before deleting.
  A replica in ``deleting`` is on its way out, so it never backs another delete.
- When no kept tier holds a verified durable replica, the last one among the dropped tiers
  (the most durable, last in tier order) stays: deleting it would lose the last good copy
  while some tier's policy still wants the checkpoint.
- A tier 0 with ``retention.release_once_copied`` (:class:`~.state.Release`) keeps a step
  its other rules drop until the step is verified on tier 1 (and, with a peer tier, safe
  against one node's loss); from then on the step's being its run's newest does not keep it
  there (pins, holds, reads and the rules above still do).
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
    Release,
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
    Verdicts are grouped by tier in tier order, checkpoints in the order given within a tier.
    """
    rules = tuple(tiers)
    complete = [c for c in checkpoints if c.facts.complete]
    ids = [c.id for c in complete]
    facts = [c.facts for c in complete]
    decisions: dict[str, dict[int, Decision]] = {}
    by_policy: dict[Policy, dict[int, Decision]] = {}  # tiers with equal rules decide once
    for tier in rules:
        if tier.policy not in by_policy:
            by_id = zip(ids, tier.policy.decide(facts, now), strict=True)
            by_policy[tier.policy] = dict(by_id)
        decisions[tier.name] = by_policy[tier.policy]
    protected = protections(checkpoints)
    by_tier: dict[str, list[Verdict]] = {t.name: [] for t in rules}
    for checkpoint in checkpoints:
        for verdict in _checkpoint_verdicts(checkpoint, rules, decisions, protected[checkpoint.id]):
            by_tier[verdict.tier].append(verdict)
    return Plan(rules, tuple(v for t in rules for v in by_tier[t.name]))


def _checkpoint_verdicts(
    checkpoint: CheckpointState,
    tiers: tuple[TierRules, ...],
    decisions: Mapping[str, Mapping[int, Decision]],
    protected: tuple[Block, ...],
) -> list[Verdict]:
    cid = checkpoint.id
    states = {t.name: checkpoint.replica(t.name) for t in tiers}
    held = [t for t in tiers if states[t.name] in _PRESENT]
    if not checkpoint.facts.complete:
        return [Verdict(cid, t.name, states[t.name], Action.KEEP, _INCOMPLETE) for t in held]
    wanted = {t.name: _released(checkpoint, t.release, decisions[t.name][cid]) for t in tiers}
    if not any(d.kept for d in wanted.values()):
        return [_final_verdict(cid, t, states, wanted[t.name], protected) for t in held]
    backers, reserved = _backers(states, tiers, wanted)
    out = []
    for tier in held:
        name, decision = tier.name, wanted[tier.name]
        if decision.kept:
            out.append(Verdict(cid, name, states[name], Action.KEEP, decision))
            continue
        blocks = _lift_newest(checkpoint, tier.release, protected)
        if states[name] in IN_FLIGHT:
            blocks.append(Block(Blocker.COPYING, f"a copy to tier {name} is in progress"))
        backing = next((b for b in reversed(backers) if b != name), None)
        if name == reserved:
            keepers = ", ".join(n for n, d in wanted.items() if d.kept)
            text = f"the last verified durable copy, and not every tier's policy drops it (kept on {keepers})"
            blocks.append(Block(Blocker.LAST_DURABLE_COPY, text))
        elif backing is None:
            blocks.append(Block(Blocker.NO_DURABLE_COPY, "no verified copy on another durable tier"))
        if blocks:
            out.append(Verdict(cid, name, states[name], Action.BLOCKED, decision, tuple(blocks)))
        else:
            out.append(Verdict(cid, name, states[name], Action.DELETE, decision, backing_tier=backing))
    return out


def _released(checkpoint: CheckpointState, release: Release | None, decision: Decision) -> Decision:
    """The tier's decision once its release rule is applied: kept until the copies allow, then why not."""
    if release is None or decision.kept:
        return decision
    if not release.allows(checkpoint):
        return Decision(True, "release_once_copied", release.waiting())
    if decision.policy == "release_once_copied":
        return Decision(False, decision.policy, release.copied(checkpoint))
    return Decision(False, decision.policy, f"{decision.reason}; {release.copied(checkpoint)}")


def _lift_newest(
    checkpoint: CheckpointState, release: Release | None, protected: tuple[Block, ...]
) -> list[Block]:
    """What protects the checkpoint on the tier (not its being newest once a release allows)."""
    if release is None or not release.allows(checkpoint):
        return list(protected)
    return [block for block in protected if block.blocker is not Blocker.NEWEST]


def _backers(
    states: Mapping[str, ReplicaState], tiers: tuple[TierRules, ...], wanted: Mapping[str, Decision]
) -> tuple[list[str], str | None]:
    """The durable verified replicas that stay (may back a delete), and the one kept back for that.

    When no kept tier holds a verified durable replica, the most durable dropped one is
    ``reserved``: it stays, and is then the only backer.
    """
    durable = [t.name for t in tiers if t.durable and states[t.name] is ReplicaState.VERIFIED]
    kept = [name for name in durable if wanted[name].kept]
    if kept or not durable:
        return kept, None
    return [durable[-1]], durable[-1]


def _final_verdict(
    checkpoint_id: int,
    tier: TierRules,
    states: Mapping[str, ReplicaState],
    decision: Decision,
    protected: tuple[Block, ...],
) -> Verdict:
    """Every tier's policy drops the checkpoint: each replica goes unless something protects it."""
    blocks = list(protected)
    copying = [name for name, state in states.items() if state in IN_FLIGHT]
    if copying:
        text = "a copy to tier " + ", ".join(copying) + " is in progress"
        blocks.append(Block(Blocker.COPYING, text))
    state = states[tier.name]
    if blocks:
        return Verdict(checkpoint_id, tier.name, state, Action.BLOCKED, decision, tuple(blocks))
    return Verdict(checkpoint_id, tier.name, state, Action.DELETE, decision, final=True)

"""Retention policies: small pure objects that say which checkpoints one tier keeps, and why.

Modelled on orbax's preservation policies: each policy maps the checkpoints it is shown to one
:class:`Decision` each, and :class:`AnyOf` keeps what any of its policies keeps. A policy does
no I/O and holds no state, so the same facts always give the same decisions.

Policies see complete checkpoints only (the planner filters); ``keep_last`` and ``keep_best``
rank the checkpoints of each run separately.

A checkpoint without ``keep_best``'s metric (or with a NaN) is neither best nor worst: it is
not kept by ``keep_best`` and never pushes a checkpoint that has the metric out of the best
``n``. So a run that reports its metric only now and then keeps its best reported steps, and
the steps without a metric are left to the tier's other rules (``keep_last``, ...).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal, Protocol

from tierd.config import TierRetention

__all__ = [
    "AnyOf",
    "CheckpointFacts",
    "Decision",
    "KeepAll",
    "KeepBest",
    "KeepEverySteps",
    "KeepLast",
    "KeepWithin",
    "Policy",
    "ReleaseOnceCopied",
    "format_span",
    "policies_for",
]


@dataclass(frozen=True)
class CheckpointFacts:
    """What a policy may look at: one checkpoint of one run, as the catalog records it.

    ``completed_at`` is None while the checkpoint is not complete (waiting, or changed
    since it was recorded); such checkpoints are never shown to a policy. Datetimes are
    timezone-aware.
    """

    id: int
    run: str
    step: int
    created_at: datetime
    completed_at: datetime | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether the checkpoint is complete (retention may decide about it)."""
        return self.completed_at is not None

    @property
    def finished_at(self) -> datetime:
        """When the checkpoint completed, or when it was first seen if it has not."""
        return self.completed_at or self.created_at


@dataclass(frozen=True)
class Decision:
    """One policy's word on one checkpoint: kept or not, by which policy, and why."""

    kept: bool
    policy: str
    reason: str


class Policy(Protocol):
    """Maps checkpoints to one decision each, in the same order."""

    @property
    def name(self) -> str:
        """The policy's config key (``keep_last``), used in reasons, logs and audit events."""
        ...

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """One decision per checkpoint, in the order given; ``now`` is timezone-aware."""
        ...


def _by_run(checkpoints: Sequence[CheckpointFacts]) -> dict[str, list[int]]:
    runs: dict[str, list[int]] = defaultdict(list)
    for index, facts in enumerate(checkpoints):
        runs[facts.run].append(index)
    return runs


@dataclass(frozen=True)
class KeepAll:
    """Keeps everything: the policy of a tier without retention rules."""

    name: ClassVar[str] = "keep_all"

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Every checkpoint kept."""
        kept = Decision(True, self.name, "keep_all: the tier has no retention rule, so it keeps everything")
        return [kept] * len(checkpoints)


@dataclass(frozen=True)
class KeepLast:
    """Keeps the newest ``n`` steps of each run."""

    n: int
    name: ClassVar[str] = "keep_last"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("keep_last needs n >= 1")

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Kept when the step is among the ``n`` highest distinct steps of its run."""
        out: list[Decision] = [Decision(False, self.name, "")] * len(checkpoints)
        for run, indices in _by_run(checkpoints).items():
            newest = set(sorted({checkpoints[i].step for i in indices}, reverse=True)[: self.n])
            what = f"the newest {self.n} steps of run {run}"
            # Decisions are immutable: one kept and one dropped per run, shared by its steps.
            kept = Decision(True, self.name, f"keep_last: one of {what}")
            dropped = Decision(False, self.name, f"keep_last: not one of {what}")
            for i in indices:
                out[i] = kept if checkpoints[i].step in newest else dropped
        return out


@dataclass(frozen=True)
class KeepEverySteps:
    """Keeps milestones: steps that are a multiple of ``k``."""

    k: int
    name: ClassVar[str] = "keep_every_steps"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("keep_every_steps needs k >= 1")

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Kept when ``step % k == 0``."""
        by_step: dict[int, Decision] = {}  # runs share step numbers: one decision per step
        out = []
        for c in checkpoints:
            decision = by_step.get(c.step)
            if decision is None:
                decision = by_step[c.step] = self._decide(c.step)
            out.append(decision)
        return out

    def _decide(self, step: int) -> Decision:
        if step % self.k == 0:
            return Decision(True, self.name, f"keep_every_steps: step {step} is a multiple of {self.k}")
        return Decision(False, self.name, f"keep_every_steps: step {step} is not a multiple of {self.k}")


@dataclass(frozen=True)
class KeepWithin:
    """Keeps what completed within the last ``seconds``."""

    seconds: float
    name: ClassVar[str] = "keep_within"

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ValueError("keep_within needs seconds > 0")

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Kept when ``now - completed_at <= seconds`` (a completion in the future counts as now)."""
        span = format_span(self.seconds)
        out = []
        for c in checkpoints:
            age = max(0.0, (now - c.finished_at).total_seconds())
            if age <= self.seconds:
                out.append(Decision(True, self.name, f"keep_within: completed {format_span(age)} ago"))
            else:
                text = f"keep_within: completed {format_span(age)} ago, more than {span}"
                out.append(Decision(False, self.name, text))
        return out


@dataclass(frozen=True)
class KeepBest:
    """Keeps the ``n`` best checkpoints of each run by ``metric``: lowest for ``min``, highest for ``max``.

    Equal values rank the newer step first. A checkpoint without the metric is not ranked
    (see the module docstring).
    """

    metric: str
    n: int
    mode: Literal["min", "max"]
    name: ClassVar[str] = "keep_best"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("keep_best needs n >= 1")

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Kept when the checkpoint's metric is among the ``n`` best of its run."""
        out: list[Decision] = [Decision(False, self.name, "")] * len(checkpoints)
        sign = 1.0 if self.mode == "min" else -1.0
        best_word = "lowest" if self.mode == "min" else "highest"
        unranked = Decision(False, self.name, f"keep_best: no {self.metric} recorded, so it is not ranked")
        for run, indices in _by_run(checkpoints).items():
            values = {i: v for i in indices if (v := self._value(checkpoints[i])) is not None}
            ranked = sorted(values, key=lambda i: (sign * values[i], -checkpoints[i].step))
            best = set(ranked[: self.n])
            for i in indices:
                if i not in values:
                    out[i] = unranked
                    continue
                rank = "one" if i in best else "not one"
                value = f"{self.metric}={values[i]:g}"
                text = f"keep_best: {value} is {rank} of the {self.n} {best_word} of run {run}"
                out[i] = Decision(i in best, self.name, text)
        return out

    def _value(self, facts: CheckpointFacts) -> float | None:
        value = facts.metrics.get(self.metric)
        if value is None or math.isnan(value):
            return None
        return float(value)


@dataclass(frozen=True)
class ReleaseOnceCopied:
    """Keeps nothing for itself: a tier 0 with ``release_once_copied`` and no other rule.

    The planner keeps each step there until its copies allow it to go (``state.Release``).
    """

    name: ClassVar[str] = "release_once_copied"

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Every checkpoint dropped, as far as this rule goes."""
        dropped = Decision(False, self.name, "release_once_copied: no other rule keeps it on this tier")
        return [dropped] * len(checkpoints)


@dataclass(frozen=True)
class AnyOf:
    """Keeps what any of ``policies`` keeps; the first keeping policy (in order) gives the reason."""

    policies: tuple[Policy, ...]

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("AnyOf needs at least one policy (KeepAll keeps everything)")

    @property
    def name(self) -> str:
        """The composed policies' names joined by ``+`` (``keep_last+keep_best``)."""
        return "+".join(policy.name for policy in self.policies)

    def decide(self, checkpoints: Sequence[CheckpointFacts], now: datetime) -> list[Decision]:
        """Kept when any policy keeps it; a dropped checkpoint carries every policy's reason."""
        per_policy = [policy.decide(checkpoints, now) for policy in self.policies]
        dropped: dict[tuple[Decision, ...], Decision] = {}  # policies share decisions: so can this
        out = []
        for decisions in zip(*per_policy, strict=True):
            for decision in decisions:
                if decision.kept:
                    out.append(decision)
                    break
            else:
                combined = dropped.get(decisions)
                if combined is None:
                    combined = Decision(False, self.name, "; ".join(d.reason for d in decisions))
                    dropped[decisions] = combined
                out.append(combined)
        return out


def policies_for(retention: TierRetention) -> Policy:
    """The policy a tier's ``retention`` block describes: :class:`KeepAll` when it sets no rule."""
    policies: list[Policy] = []
    if retention.keep_last is not None:
        policies.append(KeepLast(retention.keep_last))
    if retention.keep_every_steps is not None:
        policies.append(KeepEverySteps(retention.keep_every_steps))
    if retention.keep_within is not None:
        policies.append(KeepWithin(retention.keep_within))
    if retention.keep_best is not None:
        best = retention.keep_best
        policies.append(KeepBest(best.metric, best.n, best.mode))
    if not policies:
        return ReleaseOnceCopied() if retention.release_once_copied else KeepAll()
    if len(policies) == 1:
        return policies[0]
    return AnyOf(tuple(policies))


_SPANS = (("w", 604_800), ("d", 86_400), ("h", 3600), ("m", 60))


def format_span(seconds: float) -> str:
    """``seconds`` in the config's duration units, e.g. ``1.5d``, ``2h``, ``90s``."""
    for unit, size in _SPANS:
        if seconds >= size:
            return f"{seconds / size:.1f}".removesuffix(".0") + unit
    return f"{seconds:.0f}s"

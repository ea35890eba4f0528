"""Builders for retention tests: checkpoint facts and states on a fixed clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from tierd.daemon.retention.policies import CheckpointFacts, KeepAll, Policy
from tierd.daemon.retention.state import CheckpointState, ReplicaState, TierRules

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

V = ReplicaState.VERIFIED


def facts(
    id: int,
    step: int,
    *,
    run: str = "llama",
    age: float = 0.0,
    metrics: Mapping[str, float] | None = None,
    complete: bool = True,
) -> CheckpointFacts:
    """A checkpoint that completed ``age`` seconds before NOW."""
    at = NOW - timedelta(seconds=age)
    return CheckpointFacts(id, run, step, at, at if complete else None, dict(metrics or {}))


def state(
    id: int,
    step: int,
    replicas: Mapping[str, ReplicaState],
    *,
    run: str = "llama",
    age: float = 0.0,
    size: int = 100,
    pinned: bool = False,
    holds: tuple[str, ...] = (),
    in_use: bool = False,
    complete: bool = True,
    metrics: Mapping[str, float] | None = None,
) -> CheckpointState:
    """A checkpoint with its replicas."""
    return CheckpointState(
        facts(id, step, run=run, age=age, metrics=metrics, complete=complete),
        dict(replicas),
        size,
        pinned,
        holds,
        in_use,
    )


def tiers(*policies: Policy | None, durable: tuple[bool, ...] = (False, True, True)) -> tuple[TierRules, ...]:
    """Tiers nvme, pfs, object (tier 0 not durable), with the given policies (None keeps all)."""
    names = ("nvme", "pfs", "object")
    return tuple(TierRules(names[i], durable[i], policy or KeepAll()) for i, policy in enumerate(policies))

"""Disk-pressure eviction: oldest first, only what is unprotected and durable elsewhere."""

from __future__ import annotations

import pytest

from tests.unit.retention.helpers import V, state, tiers
from tierd.daemon.retention.eviction import (
    BlockedSpace,
    describe_blocked,
    eviction_blockers,
    eviction_candidates,
)
from tierd.daemon.retention.policies import KeepLast
from tierd.daemon.retention.state import Blocker, ReplicaState

RULES = tiers(None, None, None)  # eviction ignores policies: keep-everything tiers still evict
GB = 10**9
NO_COPY = "without a verified copy on another durable tier"


def test_oldest_first_until_the_target_is_met() -> None:
    checkpoints = [
        state(3, 300, {"nvme": V, "object": V}, age=100, size=30),
        state(1, 100, {"nvme": V, "pfs": V}, age=300, size=10),
        state(2, 200, {"nvme": V, "pfs": V, "object": V}, age=200, size=20),
        state(4, 400, {"nvme": V, "pfs": V}, age=0, size=40),  # newest: protected
    ]
    eviction = eviction_candidates(checkpoints, "nvme", RULES, bytes_to_free=25)
    assert [(c.checkpoint_id, c.backing_tier) for c in eviction.candidates] == [(1, "pfs"), (2, "object")]
    assert (eviction.freed_bytes, eviction.short_bytes, eviction.enough) == (30, 0, True)
    everything = eviction_candidates(checkpoints, "nvme", RULES, bytes_to_free=1000)
    assert [c.checkpoint_id for c in everything.candidates] == [1, 2, 3]
    assert (everything.freed_bytes, everything.short_bytes, everything.enough) == (60, 940, False)


def test_nothing_to_free_evicts_nothing() -> None:
    checkpoints = [state(1, 100, {"nvme": V, "pfs": V}, age=10), state(2, 200, {"nvme": V})]
    assert eviction_candidates(checkpoints, "nvme", RULES, bytes_to_free=0).candidates == ()


@pytest.mark.parametrize(
    "old",
    [
        state(1, 100, {"nvme": V, "pfs": V}, age=10, pinned=True),
        state(1, 100, {"nvme": V, "pfs": V}, age=10, holds=("legal",)),
        state(1, 100, {"nvme": V, "pfs": V}, age=10, in_use=True),
        state(1, 100, {"nvme": V}, age=10),  # no copy elsewhere
        state(1, 100, {"nvme": V, "pfs": ReplicaState.FAILED}, age=10),
        state(1, 100, {"nvme": V, "pfs": ReplicaState.DELETING}, age=10),
        state(1, 100, {"nvme": V, "pfs": ReplicaState.COPYING}, age=10),
        state(1, 300, {"nvme": V, "pfs": V}, age=10, complete=False),
        state(1, 100, {"nvme": ReplicaState.COPYING, "pfs": V}, age=10),
    ],
)
def test_protected_or_not_durable_elsewhere_is_never_evicted(old: object) -> None:
    checkpoints = [old, state(2, 200, {"nvme": V, "pfs": V})]
    assert eviction_candidates(checkpoints, "nvme", RULES, 10**12).candidates == ()  # type: ignore[arg-type]


def test_a_non_durable_copy_elsewhere_is_not_enough() -> None:
    rules = tiers(None, None, None, durable=(False, False, True))
    checkpoints = [state(1, 100, {"nvme": V, "pfs": V}, age=10), state(2, 200, {"nvme": V})]
    assert eviction_candidates(checkpoints, "pfs", rules, 10**12).candidates == ()


def test_a_durable_tier_evicts_when_another_durable_tier_has_it() -> None:
    checkpoints = [state(1, 100, {"pfs": V, "object": V}, age=10), state(2, 200, {"pfs": V})]
    eviction = eviction_candidates(checkpoints, "pfs", tiers(KeepLast(5), None, None), 1)
    assert [(c.checkpoint_id, c.backing_tier) for c in eviction.candidates] == [(1, "object")]


def test_blockers_sum_each_replica_once_under_its_first_reason() -> None:
    checkpoints = [
        state(1, 100, {"nvme": V}, size=600 * GB),
        state(2, 110, {"nvme": V, "pfs": ReplicaState.FAILED}, size=500 * GB),
        state(3, 120, {"nvme": V, "pfs": V}, pinned=True, holds=("legal",), size=200 * GB),
        state(4, 130, {"nvme": V, "pfs": V}, holds=("legal",), size=GB),
        state(5, 140, {"nvme": V, "pfs": V}, size=3 * GB),  # evictable: not counted
        state(6, 150, {"nvme": ReplicaState.COPYING}, complete=False, size=7 * GB),
        state(7, 145, {"nvme": V, "pfs": V}, size=5 * GB),  # the newest complete step
        state(8, 90, {"pfs": V}, size=GB),  # nothing on nvme
    ]
    blocked = eviction_blockers(checkpoints, "nvme", RULES)
    assert blocked == (
        BlockedSpace(
            Blocker.NO_DURABLE_COPY, "without a verified copy on another durable tier", 2, 1100 * GB
        ),
        BlockedSpace(Blocker.PINNED, "pinned", 1, 200 * GB),
        BlockedSpace(Blocker.INCOMPLETE, "not complete", 1, 7 * GB),
        BlockedSpace(Blocker.NEWEST, "the newest complete step of their run", 1, 5 * GB),
        BlockedSpace(Blocker.HELD, "under a legal hold", 1, GB),
    )
    assert str(blocked[0]) == "2 checkpoints, 1.1 TB, without a verified copy on another durable tier"
    assert (
        describe_blocked(blocked[1:3]) == "1 checkpoint, 200.0 GB, pinned; 1 checkpoint, 7.0 GB, not complete"
    )
    assert describe_blocked(()) == "nothing"

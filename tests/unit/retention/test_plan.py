"""Every planner rule: protections, the durable copy elsewhere, the last copy and final deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.retention.helpers import NOW, V, state, tiers
from tierd.config import Config
from tierd.daemon.retention.plan import Action, Plan, Verdict, plan_retention
from tierd.daemon.retention.policies import AnyOf, KeepAll, KeepEverySteps, KeepLast
from tierd.daemon.retention.state import (
    Blocker,
    CheckpointState,
    ReplicaState,
    TierRules,
    protections,
    tier_rules,
)

F = ReplicaState.FAILED
D = ReplicaState.DELETING
C = ReplicaState.COPYING
P = ReplicaState.PENDING

ALL = {"nvme": V, "pfs": V, "object": V}
#: nvme keeps the newest step; pfs and object keep everything.
NVME_LAST = tiers(KeepLast(1), None, None)


def _plan(checkpoints: list[CheckpointState], rules: tuple[TierRules, ...] = NVME_LAST) -> Plan:
    return plan_retention(checkpoints, rules, NOW)


def _get(plan: Plan, checkpoint_id: int, tier: str) -> Verdict:
    verdict = plan.verdict(checkpoint_id, tier)
    assert verdict is not None
    return verdict


def _blockers(verdict: Verdict) -> list[Blocker]:
    return [b.blocker for b in verdict.blocks]


def test_a_dropped_replica_backed_by_a_durable_copy_is_deleted_and_the_rest_kept() -> None:
    plan = _plan([state(1, 100, ALL), state(2, 200, ALL)])
    old = _get(plan, 1, "nvme")
    assert old.action is Action.DELETE
    assert old.backing_tier == "object"  # the most durable verified copy backs it
    assert not old.final
    assert old.policy == "keep_last"
    assert old.reason == (
        "keep_last: not one of the newest 1 steps of run llama; a verified copy stays on durable tier object"
    )
    assert old.schedules_deletion
    kept = _get(plan, 2, "nvme")
    assert (kept.action, kept.reason) == (Action.KEEP, "keep_last: one of the newest 1 steps of run llama")
    assert {v.action for v in plan.for_tier("pfs")} == {Action.KEEP}
    assert [v.tier for v in plan] == ["nvme", "nvme", "pfs", "pfs", "object", "object"]
    assert [(v.checkpoint_id, v.tier) for v in plan.deletions()] == [(1, "nvme")]


@pytest.mark.parametrize(
    ("overrides", "blocker", "reason"),
    [
        ({"pinned": True}, Blocker.PINNED, "pinned"),
        ({"holds": ("sec-2025", "audit")}, Blocker.HELD, "held by audit, sec-2025"),
        ({"in_use": True}, Blocker.IN_USE, "being read by a copy or a restore"),
    ],
)
def test_protected_checkpoints_are_blocked_on_every_tier(
    overrides: dict[str, object], blocker: Blocker, reason: str
) -> None:
    rules = tiers(KeepLast(1), KeepLast(1), KeepLast(1))
    old = state(1, 100, ALL, **overrides)  # type: ignore[arg-type]
    plan = _plan([old, state(2, 200, ALL)], rules)
    for tier in ("nvme", "pfs", "object"):
        verdict = _get(plan, 1, tier)
        assert verdict.action is Action.BLOCKED
        assert _blockers(verdict) == [blocker]
        assert verdict.reason == reason
    assert plan.deletions() == []


def test_the_newest_complete_step_of_each_run_is_protected() -> None:
    rules = tiers(KeepEverySteps(1000), KeepEverySteps(1000), KeepEverySteps(1000))
    checkpoints = [
        state(1, 100, ALL),
        state(2, 150, ALL),
        state(3, 200, {"nvme": P}, complete=False),  # newer but not complete: 150 is still the newest
        state(4, 50, ALL, run="gpt"),
    ]
    plan = _plan(checkpoints, rules)
    assert {_get(plan, 1, t).action for t in ("nvme", "pfs", "object")} == {Action.DELETE}
    newest = _get(plan, 2, "object")
    assert newest.action is Action.BLOCKED
    assert newest.reason == "the newest complete step of run llama"
    assert _blockers(_get(plan, 4, "nvme")) == [Blocker.NEWEST]
    incomplete = _get(plan, 3, "nvme")
    assert (incomplete.action, incomplete.policy) == (Action.KEEP, "incomplete")


def test_protections_list_every_reason_in_order() -> None:
    checkpoints = [
        state(1, 100, ALL, pinned=True, holds=("h",), in_use=True),
        state(2, 200, {"nvme": C}, complete=False),
    ]
    found = protections(checkpoints)
    assert [b.blocker for b in found[1]] == [Blocker.PINNED, Blocker.HELD, Blocker.IN_USE, Blocker.NEWEST]
    assert [b.blocker for b in found[2]] == [Blocker.INCOMPLETE]


def test_no_verified_copy_on_another_durable_tier_blocks_the_delete() -> None:
    checkpoints = [
        state(1, 100, {"nvme": V, "pfs": C}),  # pfs copy still running
        state(2, 200, {"nvme": V, "pfs": F, "object": P}),  # pfs copy is bad, object not started
        state(3, 300, {"nvme": V, "pfs": D, "object": D}),  # durable copies on their way out
        state(4, 400, ALL),
    ]
    plan = _plan(checkpoints)
    for checkpoint_id in (1, 2, 3):
        verdict = _get(plan, checkpoint_id, "nvme")
        assert verdict.action is Action.BLOCKED
        assert verdict.reason == "no verified copy on another durable tier"


def test_a_non_durable_verified_copy_does_not_back_a_delete() -> None:
    rules = tiers(KeepLast(1), None, None, durable=(False, False, True))
    plan = _plan([state(1, 100, {"nvme": V, "pfs": V}), state(2, 200, ALL)], rules)
    assert _blockers(_get(plan, 1, "nvme")) == [Blocker.NO_DURABLE_COPY]


def test_a_replica_never_backs_its_own_delete() -> None:
    # Only object is durable, and object's own policy drops the checkpoint while pfs keeps it.
    rules = tiers(None, None, KeepLast(1), durable=(False, False, True))
    plan = _plan([state(1, 100, ALL), state(2, 200, ALL)], rules)
    verdict = _get(plan, 1, "object")
    assert _blockers(verdict) == [Blocker.LAST_DURABLE_COPY]
    assert "kept on nvme, pfs" in verdict.reason


def test_the_last_verified_durable_copy_stays_while_another_tier_keeps_the_checkpoint() -> None:
    rules = tiers(None, KeepLast(1), KeepLast(1))  # nvme keeps everything, both durable tiers drop
    plan = _plan([state(1, 100, ALL), state(2, 200, ALL)], rules)
    pfs, obj = _get(plan, 1, "pfs"), _get(plan, 1, "object")
    assert (pfs.action, pfs.backing_tier) == (Action.DELETE, "object")
    assert obj.action is Action.BLOCKED
    assert _blockers(obj) == [Blocker.LAST_DURABLE_COPY]
    assert "not every tier's policy drops it (kept on nvme)" in obj.reason


def test_the_reserved_copy_stays_once_the_other_one_is_deleting() -> None:
    rules = tiers(None, KeepLast(1), KeepLast(1))
    plan = _plan([state(1, 100, {"nvme": V, "pfs": D, "object": V}), state(2, 200, ALL)], rules)
    assert _get(plan, 1, "pfs").action is Action.DELETE
    assert not _get(plan, 1, "pfs").schedules_deletion  # already deleting
    assert _get(plan, 1, "object").action is Action.BLOCKED


def test_a_deleting_replica_that_lost_its_backing_is_cancelled() -> None:
    rules = tiers(None, KeepLast(1), KeepLast(1))
    # object failed its re-verification while pfs waited to be deleted.
    plan = _plan([state(1, 100, {"nvme": V, "pfs": D, "object": F}), state(2, 200, ALL)], rules)
    pfs = _get(plan, 1, "pfs")
    assert pfs.action is Action.BLOCKED
    assert pfs.cancels_deletion
    assert plan.cancellations() == [pfs]


def test_a_deleting_replica_that_the_policy_keeps_again_is_cancelled() -> None:
    plan = _plan([state(1, 100, {"nvme": D, "pfs": V}), state(2, 200, ALL)], tiers(None, None, None))
    verdict = _get(plan, 1, "nvme")
    assert verdict.action is Action.KEEP
    assert verdict.cancels_deletion


def test_a_pinned_deleting_replica_is_cancelled() -> None:
    plan = _plan([state(1, 100, {"nvme": D, "pfs": V}, pinned=True), state(2, 200, ALL)])
    assert plan.cancellations() == [_get(plan, 1, "nvme")]


def test_final_deletion_only_when_every_tiers_policy_drops_it() -> None:
    rules = tiers(KeepLast(1), KeepLast(1), KeepLast(1))
    plan = _plan([state(1, 100, ALL), state(2, 200, ALL)], rules)
    deletes = plan.deletions()
    assert [(v.tier, v.final, v.backing_tier) for v in deletes] == [
        ("nvme", True, None),
        ("pfs", True, None),
        ("object", True, None),
    ]
    assert deletes[0].reason.startswith("every tier's policy drops it (keep_last: not one")


def test_final_deletion_counts_tiers_without_a_replica() -> None:
    # object has no replica yet and its policy keeps everything: the checkpoint must reach it.
    plan = _plan([state(1, 100, {"nvme": V}), state(2, 200, ALL)], tiers(KeepLast(1), KeepLast(1), None))
    verdict = _get(plan, 1, "nvme")
    assert verdict.action is Action.BLOCKED
    assert _blockers(verdict) == [Blocker.NO_DURABLE_COPY]


def test_final_deletion_of_a_checkpoint_never_copied() -> None:
    # Every tier keeps only the newest step: an older one that never left nvme goes for good.
    rules = tiers(KeepLast(1), KeepLast(1), KeepLast(1))
    plan = _plan([state(1, 100, {"nvme": V}), state(2, 200, ALL)], rules)
    verdict = _get(plan, 1, "nvme")
    assert (verdict.action, verdict.final) == (Action.DELETE, True)


def test_final_deletion_waits_for_copies_and_protections() -> None:
    rules = tiers(KeepLast(1), KeepLast(1), KeepLast(1))
    copying = state(1, 100, {"nvme": V, "pfs": V, "object": C})
    held = state(2, 150, ALL, holds=("legal",))
    plan = _plan([copying, held, state(3, 200, ALL)], rules)
    assert _get(plan, 1, "nvme").reason == "a copy to tier object is in progress"
    assert _blockers(_get(plan, 1, "object")) == [Blocker.COPYING]
    assert {_get(plan, 2, t).reason for t in ("nvme", "pfs", "object")} == {"held by legal"}
    assert plan.deletions() == []


def test_an_in_flight_copy_is_never_deleted_under_the_copier() -> None:
    rules = tiers(None, KeepLast(1), None)
    plan = _plan([state(1, 100, {"nvme": V, "pfs": C, "object": V}), state(2, 200, ALL)], rules)
    verdict = _get(plan, 1, "pfs")
    assert verdict.action is Action.BLOCKED
    assert _blockers(verdict) == [Blocker.COPYING]


def test_a_failed_replica_the_policy_drops_is_deleted_when_backed() -> None:
    plan = _plan([state(1, 100, {"nvme": F, "pfs": V}), state(2, 200, ALL)])
    verdict = _get(plan, 1, "nvme")
    assert (verdict.action, verdict.backing_tier) == (Action.DELETE, "pfs")


def test_replicas_on_unconfigured_tiers_and_deleted_ones_have_no_verdict() -> None:
    plan = _plan([state(1, 100, {"nvme": ReplicaState.DELETED, "tape": V, "pfs": V}), state(2, 200, ALL)])
    assert plan.verdict(1, "nvme") is None
    assert plan.verdict(1, "tape") is None
    assert plan.verdict(1, "pfs") is not None


def test_deletions_put_final_ones_last_least_durable_tier_first() -> None:
    rules = tiers(KeepLast(1), AnyOf((KeepLast(1), KeepEverySteps(50))), KeepLast(1))
    milestone, dropped = state(1, 50, ALL), state(2, 75, ALL)
    plan = _plan([dropped, milestone, state(3, 200, ALL)], rules)
    assert [(v.checkpoint_id, v.tier, v.final) for v in plan.deletions()] == [
        (1, "nvme", False),
        (1, "object", False),
        (2, "nvme", True),
        (2, "pfs", True),
        (2, "object", True),
    ]
    assert _get(plan, 1, "object").backing_tier == "pfs"


def test_tier_rules_from_the_config(tmp_path: Path) -> None:
    config = Config(
        tiers=[
            {"name": "nvme", "kind": "posix", "path": str(tmp_path), "retention": {"keep_last": 2}},
            {"name": "object", "kind": "s3", "bucket": "ckpt"},
        ]
    )
    rules = tier_rules(config)
    assert rules == (TierRules("nvme", False, KeepLast(2)), TierRules("object", True, KeepAll()))

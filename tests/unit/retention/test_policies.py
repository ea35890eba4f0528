"""Each retention policy and their composition, as pure functions of facts and a clock."""

from __future__ import annotations

import math

import pytest

from tests.unit.retention.helpers import NOW, facts
from tierd.config import KeepBestConfig, TierRetention
from tierd.daemon.retention.policies import (
    AnyOf,
    CheckpointFacts,
    Decision,
    KeepAll,
    KeepBest,
    KeepEverySteps,
    KeepLast,
    KeepWithin,
    Policy,
    format_span,
    policies_for,
)


def _kept(policy: Policy, checkpoints: list[CheckpointFacts]) -> list[int]:
    return [c.id for c, d in zip(checkpoints, policy.decide(checkpoints, NOW), strict=True) if d.kept]


def test_keep_all_keeps_everything_and_says_why() -> None:
    checkpoints = [facts(1, 100), facts(2, 200, run="other")]
    decisions = KeepAll().decide(checkpoints, NOW)
    assert [d.kept for d in decisions] == [True, True]
    assert decisions[0].policy == "keep_all"
    assert "no retention rule" in decisions[0].reason
    assert KeepAll().decide([], NOW) == []


def test_keep_last_keeps_the_newest_steps_of_each_run_whatever_the_order() -> None:
    checkpoints = [
        facts(1, 300),
        facts(2, 100),
        facts(3, 400),
        facts(4, 200),
        facts(5, 50, run="gpt"),
        facts(6, 10, run="gpt"),
    ]
    assert _kept(KeepLast(2), checkpoints) == [1, 3, 5, 6]
    decisions = KeepLast(2).decide(checkpoints, NOW)
    assert decisions[0] == Decision(True, "keep_last", "keep_last: one of the newest 2 steps of run llama")
    assert decisions[1] == Decision(
        False, "keep_last", "keep_last: not one of the newest 2 steps of run llama"
    )


def test_keep_last_counts_steps_not_records() -> None:
    # The same step recorded twice (e.g. re-saved) is one step: both records are kept.
    checkpoints = [facts(1, 100), facts(2, 200), facts(3, 200)]
    assert _kept(KeepLast(1), checkpoints) == [2, 3]


def test_keep_every_steps_keeps_milestones() -> None:
    checkpoints = [facts(1, 0), facts(2, 500), facts(3, 1000), facts(4, 1500), facts(5, 2000, run="gpt")]
    assert _kept(KeepEverySteps(1000), checkpoints) == [1, 3, 5]
    decisions = KeepEverySteps(1000).decide(checkpoints, NOW)
    assert decisions[1].reason == "keep_every_steps: step 500 is not a multiple of 1000"
    assert decisions[2].reason == "keep_every_steps: step 1000 is a multiple of 1000"


def test_keep_within_keeps_by_completion_age_inclusive() -> None:
    checkpoints = [
        facts(1, 1, age=3600),
        facts(2, 2, age=7200),
        facts(3, 3, age=7201),
        facts(4, 4, age=-60),  # completed "in the future" (clock skew): as if now
    ]
    assert _kept(KeepWithin(7200), checkpoints) == [1, 2, 4]
    decisions = KeepWithin(7200).decide(checkpoints, NOW)
    assert decisions[0].reason == "keep_within: completed 1h ago"
    assert decisions[2].reason == "keep_within: completed 2h ago, more than 2h"


def test_keep_within_uses_the_creation_time_of_an_incomplete_checkpoint() -> None:
    young = facts(1, 1, age=10, complete=False)
    assert young.finished_at == young.created_at
    assert _kept(KeepWithin(60), [young]) == [1]


def test_keep_best_min_and_max_per_run() -> None:
    checkpoints = [
        facts(1, 100, metrics={"eval_loss": 2.0, "acc": 0.5}),
        facts(2, 200, metrics={"eval_loss": 1.5, "acc": 0.7}),
        facts(3, 300, metrics={"eval_loss": 1.8, "acc": 0.6}),
        facts(4, 400, metrics={"eval_loss": 1.9, "acc": 0.9}),
        facts(5, 100, run="gpt", metrics={"eval_loss": 9.0, "acc": 0.1}),
    ]
    assert _kept(KeepBest("eval_loss", 2, "min"), checkpoints) == [2, 3, 5]
    assert _kept(KeepBest("acc", 2, "max"), checkpoints) == [2, 4, 5]
    decisions = KeepBest("eval_loss", 2, "min").decide(checkpoints, NOW)
    assert decisions[1].reason == "keep_best: eval_loss=1.5 is one of the 2 lowest of run llama"
    assert decisions[0].reason == "keep_best: eval_loss=2 is not one of the 2 lowest of run llama"


def test_keep_best_without_the_metric_is_neither_best_nor_worst() -> None:
    checkpoints = [
        facts(1, 100, metrics={"eval_loss": 3.0}),
        facts(2, 200),  # no metric: not kept, and does not take a place among the best
        facts(3, 300, metrics={"eval_loss": math.nan}),  # NaN counts as no metric
        facts(4, 400, metrics={"other": 0.0}),
    ]
    assert _kept(KeepBest("eval_loss", 1, "min"), checkpoints) == [1]
    assert _kept(KeepBest("eval_loss", 1, "max"), checkpoints) == [1]
    decisions = KeepBest("eval_loss", 1, "min").decide(checkpoints, NOW)
    assert decisions[1] == Decision(
        False, "keep_best", "keep_best: no eval_loss recorded, so it is not ranked"
    )


def test_keep_best_ties_prefer_the_newer_step() -> None:
    checkpoints = [facts(1, 100, metrics={"m": 1.0}), facts(2, 200, metrics={"m": 1.0})]
    assert _kept(KeepBest("m", 1, "min"), checkpoints) == [2]


def test_any_of_keeps_what_any_policy_keeps_with_the_first_keepers_reason() -> None:
    policy = AnyOf((KeepLast(1), KeepEverySteps(100)))
    checkpoints = [facts(1, 100), facts(2, 150), facts(3, 200)]
    decisions = policy.decide(checkpoints, NOW)
    assert [d.kept for d in decisions] == [True, False, True]
    assert decisions[0].policy == "keep_every_steps"
    assert decisions[2].policy == "keep_last"  # keep_last comes first and keeps it too
    assert decisions[1].policy == "keep_last+keep_every_steps"
    assert decisions[1].reason == (
        "keep_last: not one of the newest 1 steps of run llama; "
        "keep_every_steps: step 150 is not a multiple of 100"
    )
    assert policy.name == "keep_last+keep_every_steps"


def test_policies_reject_nonsense_arguments() -> None:
    with pytest.raises(ValueError, match="keep_last"):
        KeepLast(0)
    with pytest.raises(ValueError, match="keep_every_steps"):
        KeepEverySteps(0)
    with pytest.raises(ValueError, match="keep_within"):
        KeepWithin(0)
    with pytest.raises(ValueError, match="keep_best"):
        KeepBest("m", 0, "min")
    with pytest.raises(ValueError, match="at least one policy"):
        AnyOf(())


def test_policies_for_builds_the_composition_in_config_order() -> None:
    assert policies_for(TierRetention()) == KeepAll()
    assert policies_for(TierRetention(keep_last=3)) == KeepLast(3)
    full = TierRetention(
        keep_last=3,
        keep_every_steps=1000,
        keep_within=86400,
        keep_best=KeepBestConfig(metric="eval_loss", n=2, mode="min"),
    )
    assert policies_for(full) == AnyOf(
        (KeepLast(3), KeepEverySteps(1000), KeepWithin(86400), KeepBest("eval_loss", 2, "min"))
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (90, "1.5m"), (3600, "1h"), (129_600, "1.5d"), (1_209_600, "2w")],
)
def test_format_span(seconds: float, text: str) -> None:
    assert format_span(seconds) == text

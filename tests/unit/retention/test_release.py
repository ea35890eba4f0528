"""``retention.release_once_copied``: a RAM tier 0 lets its newest step go once its copies allow.

The key itself (accepted on a node-local tier 0 only, refused elsewhere naming the key and
why) and the planner's decision: the newest step released only when it is verified on tier 1
and safe against one node's loss, not before; pinned and held steps stay.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from tests.unit.retention.helpers import NOW, V, state
from tierd.config import Config, load_config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, Part, Replica, Run
from tierd.daemon.catalog.models import ReplicaState as Stored
from tierd.daemon.catalog.peer_copies import mark_peer_copy
from tierd.daemon.catalog.retention import change_marker
from tierd.daemon.retention import snapshot
from tierd.daemon.retention.plan import Action, Plan, Verdict, plan_retention
from tierd.daemon.retention.policies import KeepAll, KeepLast, ReleaseOnceCopied
from tierd.daemon.retention.snapshot import take_snapshot
from tierd.daemon.retention.state import (
    Blocker,
    CheckpointState,
    Release,
    ReplicaState,
    TierRules,
    tier_rules,
)
from tierd.errors import ConfigError

C = ReplicaState.COPYING
SAFE = NOW
RELEASE = Release("ram", "nvme", peer=True)
RULES = (
    TierRules("ram", False, ReleaseOnceCopied(), RELEASE),
    TierRules("nvme", True, KeepAll()),
)


def _tiers(tmp_path: Path, ram: dict[str, Any], *, peer: bool = True) -> list[dict[str, Any]]:
    tiers = [
        {"name": "ram", "kind": "posix", "path": str(tmp_path / "ram"), **ram},
        {"name": "nvme", "kind": "posix", "path": str(tmp_path / "nvme"), "shared": False},
        {"name": "pfs", "kind": "posix", "path": str(tmp_path / "pfs")},
    ]
    if peer:
        tiers.insert(1, {"name": "peers", "kind": "peer", "path": str(tmp_path / "peer")})
    return tiers


def _load(tmp_path: Path, tiers: list[dict[str, Any]]) -> Config:
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": tiers}))
    return load_config(path)


def _problems(tmp_path: Path, tiers: list[dict[str, Any]]) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, tiers)
    return "\n".join(caught.value.problems)


RELEASING = {"retention": {"release_once_copied": True}, "delete_delay": 0}


def test_tier0_takes_the_key_and_releases_to_tier1_and_the_peers(tmp_path: Path) -> None:
    config = _load(tmp_path, _tiers(tmp_path, RELEASING))
    rules = tier_rules(config)
    assert rules[0].release == Release("ram", "nvme", peer=True, shared_tiers=("pfs",))
    assert rules[0].policy == ReleaseOnceCopied()
    assert [r.release for r in rules[1:]] == [None, None]
    alone = _load(tmp_path, _tiers(tmp_path, RELEASING, peer=False))
    assert tier_rules(alone)[0].release == Release("ram", "nvme", peer=False, shared_tiers=("pfs",))
    plain = _load(tmp_path, _tiers(tmp_path, {}))
    assert tier_rules(plain)[0].release is None
    assert not plain.tiers[0].retention.release_once_copied


def test_the_key_is_refused_where_it_makes_no_sense(tmp_path: Path) -> None:
    key = "retention.release_once_copied"
    tiers = _tiers(tmp_path, {})
    tiers[2]["retention"] = {"release_once_copied": True}
    assert f"tiers.1.{key}: only tier 0 may release" in _problems(tmp_path, tiers)
    tiers = _tiers(tmp_path, {})
    tiers[1]["retention"] = {"release_once_copied": True}
    assert f"peer.{key}: only tier 0 releases" in _problems(tmp_path, tiers)
    shared = _tiers(tmp_path, {**RELEASING, "shared": True}, peer=False)
    shared[1]["shared"] = True
    assert f"tiers.0.{key}: tier 0 is shared" in _problems(tmp_path, shared)
    alone = _tiers(tmp_path, RELEASING, peer=False)[:1]
    assert f"tiers.0.{key}: there is no tier 1" in _problems(tmp_path, alone)
    wrong = _tiers(tmp_path, {"retention": {"release_once_copied": "sometimes"}})
    assert "retention.release_once_copied: Input should be a valid boolean" in _problems(tmp_path, wrong)


def _plan(*checkpoints: CheckpointState, rules: tuple[TierRules, ...] = RULES) -> Plan:
    return plan_retention(list(checkpoints), rules, NOW)


def _ram(plan: Plan, checkpoint_id: int) -> Verdict:
    verdict = plan.verdict(checkpoint_id, "ram")
    assert verdict is not None
    return verdict


def _safe(checkpoint: CheckpointState) -> CheckpointState:
    return replace(checkpoint, safe_since=SAFE)


def test_the_newest_step_goes_from_ram_once_on_nvme_and_safe_against_one_nodes_loss() -> None:
    newest = _safe(state(1, 100, {"ram": V, "nvme": V}))
    verdict = _ram(_plan(newest), 1)
    assert verdict.action is Action.DELETE
    assert verdict.backing_tier == "nvme"
    assert verdict.policy == "release_once_copied"
    assert verdict.reason == (
        "release_once_copied: verified on tier nvme and safe against one node's loss since "
        f"{SAFE.isoformat()}; a verified copy stays on durable tier nvme"
    )
    kept = _plan(newest).verdict(1, "nvme")
    assert kept is not None
    assert kept.action is Action.KEEP


def test_not_before_both_copies_are_verified() -> None:
    unsafe = state(1, 100, {"ram": V, "nvme": V})  # on nvme, but no peer copy verified yet
    copying = _safe(state(2, 200, {"ram": V, "nvme": C}))  # safe, but nvme still copying
    plan = _plan(unsafe, copying)
    for checkpoint_id in (1, 2):
        verdict = _ram(plan, checkpoint_id)
        assert verdict.action is Action.KEEP
        assert verdict.reason == (
            "release_once_copied: kept until verified on tier nvme and safe against one node's loss"
        )


def test_without_a_peer_tier_nvme_alone_releases() -> None:
    rules = (replace(RULES[0], release=Release("ram", "nvme", peer=False)), RULES[1])
    verdict = _ram(_plan(state(1, 100, {"ram": V, "nvme": V}), rules=rules), 1)
    assert verdict.action is Action.DELETE
    assert verdict.reason.startswith("release_once_copied: verified on tier nvme; ")


def test_pinned_held_and_read_steps_stay_in_ram() -> None:
    copied = {"ram": V, "nvme": V}
    pinned = _safe(state(1, 100, copied, pinned=True))
    held = _safe(state(2, 100, copied, run="other", holds=("legal",)))
    read = _safe(state(3, 100, copied, run="third", in_use=True))
    plan = _plan(pinned, held, read)
    assert [_ram(plan, i).action for i in (1, 2, 3)] == [Action.BLOCKED] * 3
    assert [b.blocker for b in _ram(plan, 1).blocks] == [Blocker.PINNED]
    assert [b.blocker for b in _ram(plan, 2).blocks] == [Blocker.HELD]
    assert [b.blocker for b in _ram(plan, 3).blocks] == [Blocker.IN_USE]


def test_other_rules_still_keep_and_other_tiers_keep_the_newest() -> None:
    copied = _safe(state(1, 100, {"ram": V, "nvme": V}))
    both = KeepLast(1)
    rules = (TierRules("ram", False, both, RELEASE), TierRules("nvme", True, KeepLast(1)))
    assert _ram(_plan(copied, rules=rules), 1).action is Action.KEEP  # keep_last keeps it in RAM
    # Without the key, the newest step stays on tier 0 whatever its copies.
    plain = (TierRules("ram", False, KeepLast(1)), RULES[1])
    old = _safe(state(1, 100, {"ram": V, "nvme": V}))
    new = _safe(state(2, 200, {"ram": V, "nvme": V}))
    plan = _plan(old, new, rules=plain)
    assert _ram(plan, 1).action is Action.DELETE
    assert [b.blocker for b in _ram(plan, 2).blocks] == []
    assert _ram(plan, 2).action is Action.KEEP
    # The newest step's protection is lifted on the releasing tier only.
    blocked_elsewhere = (
        RULES[0],
        TierRules("nvme", True, ReleaseOnceCopied()),
        TierRules("pfs", True, KeepAll()),
    )
    plan = _plan(_safe(state(1, 100, {"ram": V, "nvme": V, "pfs": V})), rules=blocked_elsewhere)
    assert _ram(plan, 1).action is Action.DELETE
    nvme = plan.verdict(1, "nvme")
    assert nvme is not None
    assert [b.blocker for b in nvme.blocks] == [Blocker.NEWEST]


def _recorded(db: Database, step: int = 1) -> tuple[int, int]:
    """A complete step of node a on its ram and ssd tiers (both verified): its id and part id."""
    with db.session() as s:
        run = s.scalars(select(Run).where(Run.name == "demo")).one_or_none() or Run(name="demo")
        s.add(run)
        s.flush()
        path = f"demo/step_{step}"
        row = Checkpoint(run_id=run.id, step=step, path=path, format="dcp", state="complete", node="a")
        s.add(row)
        s.flush()
        part = Part(checkpoint_id=row.id, node="a")
        s.add(part)
        s.add_all(
            Replica(checkpoint_id=row.id, tier=t, tier_index=i, state="verified")
            for i, t in enumerate(("ram", "ssd"))
        )
        s.flush()
        return row.id, part.id


SNAP_RULES = (
    TierRules("ram", False, ReleaseOnceCopied(), Release("ram", "ssd", peer=True)),
    TierRules("ssd", True, KeepAll()),
)


def test_safety_is_read_for_the_newest_steps_on_the_tier_only(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, old_part = _recorded(db, 1)
    new, new_part = _recorded(db, 2)
    with db.session() as s:
        for part_id in (old_part, new_part):
            mark_peer_copy(s, part_id, "b", Stored.VERIFIED)
    monkeypatch.setattr(snapshot, "RELEASE_LOOK", 1)
    snap = take_snapshot(db, SNAP_RULES, NOW, node="a", node_local=("ram", "ssd"))
    assert [snap.by_id(i).safe_since is not None for i in (old, new)] == [False, True]  # type: ignore[union-attr]


def test_a_peer_copy_verified_replans_and_releases_the_step(db: Database) -> None:
    checkpoint_id, part_id = _recorded(db)
    rules = SNAP_RULES

    def ram() -> tuple[Action, tuple[object, ...]]:
        snap = take_snapshot(db, rules, NOW, node="a", node_local=("ram", "ssd"))
        verdict = snap.plan.verdict(checkpoint_id, "ram")
        assert verdict is not None
        with db.read_session() as s:
            return verdict.action, change_marker(s)

    waiting, before = ram()
    assert waiting is Action.KEEP
    with db.session() as s:
        mark_peer_copy(s, part_id, "b", Stored.VERIFIED)
    released, after = ram()
    assert released is Action.DELETE
    assert after != before  # the retention pass plans again when a peer copy lands

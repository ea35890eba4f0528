"""Random lives of checkpoints against the planner: nothing protected or last-good is ever lost.

An in-memory model stands in for the catalog and the tiers. Rules add steps, copy and verify
replicas down the tiers, pin, hold, change policies, corrupt or fail durable replicas, advance
the clock, run retention (schedule and cancel deletions), execute due deletions with the
two-phase re-check (a fresh plan, then the backing replica re-verified at that moment), evict
under disk pressure, crash part-way and restart from the model's facts alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tierd.config import KeepBestConfig, TierRetention
from tierd.daemon.retention.eviction import eviction_candidates
from tierd.daemon.retention.plan import Action, Plan, plan_retention
from tierd.daemon.retention.policies import CheckpointFacts, Policy, policies_for
from tierd.daemon.retention.state import CheckpointState, ReplicaState, TierRules

S = ReplicaState
TIERS = ("nvme", "pfs", "object")
DURABLE = {"nvme": False, "pfs": True, "object": True}
DELAYS = st.sampled_from([0, 30, 60]).map(lambda seconds: timedelta(seconds=seconds))
INTERVAL = timedelta(seconds=30)
PRESENT = {S.PENDING, S.COPYING, S.VERIFIED, S.FAILED, S.DELETING}
RUNS = ("llama", "gpt")
HOLD_NAMES = ("legal", "audit")

retentions = st.builds(
    TierRetention,
    keep_last=st.none() | st.integers(1, 3),
    keep_every_steps=st.none() | st.sampled_from([2, 5, 10]),
    keep_within=st.none() | st.sampled_from([60.0, 600.0]),
    keep_best=st.none()
    | st.builds(
        KeepBestConfig, metric=st.just("loss"), n=st.integers(1, 2), mode=st.sampled_from(["min", "max"])
    ),
)
metrics = st.none() | st.floats(0, 10, allow_nan=False)
picks = st.integers(min_value=0, max_value=10**6)


@dataclass
class Replica:
    """A replica in the model: its catalog state, and whether its bytes are really good."""

    state: ReplicaState
    corrupt: bool = False
    before_deleting: ReplicaState = S.VERIFIED
    delete_after: datetime | None = None

    @property
    def good(self) -> bool:
        """Verified bytes still on the tier (a replica waiting to be deleted still has them)."""
        verified = self.state is S.VERIFIED or (
            self.state is S.DELETING and self.before_deleting is S.VERIFIED
        )
        return verified and not self.corrupt


@dataclass
class Checkpoint:
    """A checkpoint in the model."""

    id: int
    run: str
    step: int
    at: datetime
    loss: float | None
    pinned: bool = False
    holds: set[str] = field(default_factory=set)
    restoring: bool = False
    replicas: dict[str, Replica] = field(default_factory=dict)

    def present(self) -> set[str]:
        return {t for t, r in self.replicas.items() if r.state in PRESENT}

    def good_durable(self) -> set[str]:
        return {t for t, r in self.replicas.items() if DURABLE[t] and r.good}

    def copying(self) -> bool:
        return any(r.state is S.COPYING for r in self.replicas.values())


class RetentionMachine(RuleBasedStateMachine):
    """The model, the service's in-memory state, and the invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.now = datetime(2025, 1, 1, tzinfo=UTC)
        self.checkpoints: dict[int, Checkpoint] = {}
        self.retention = dict.fromkeys(TIERS, TierRetention())
        self.delay = dict.fromkeys(TIERS, timedelta(0))
        self.last_plan: Plan | None = None  # the service's memory: lost on restart
        self.protected_replicas: dict[int, set[str]] = {}
        self.good_before: dict[int, bool] = {}
        self.may_lose_durable: set[int] = set()  # re-verification failures and legal final deletions
        self.violations: list[str] = []

    # -- the model seen as the catalog --------------------------------------------------

    def tier_rules(self) -> tuple[TierRules, ...]:
        return tuple(TierRules(t, DURABLE[t], policies_for(self.retention[t])) for t in TIERS)

    def facts(self) -> list[CheckpointState]:
        return [
            CheckpointState(
                CheckpointFacts(c.id, c.run, c.step, c.at, c.at, {} if c.loss is None else {"loss": c.loss}),
                {t: r.state for t, r in c.replicas.items()},
                size_bytes=10,
                pinned=c.pinned,
                holds=tuple(sorted(c.holds)),
                in_use=c.copying() or c.restoring,
            )
            for c in self.checkpoints.values()
        ]

    def fresh_plan(self) -> Plan:
        return plan_retention(self.facts(), self.tier_rules(), self.now)

    def pick(self, n: int) -> Checkpoint:
        ids = sorted(self.checkpoints)  # never empty: the machine starts with a step
        return self.checkpoints[ids[n % len(ids)]]

    def newest(self) -> set[int]:
        best: dict[str, Checkpoint] = {}
        for c in self.checkpoints.values():
            if c.run not in best or c.step > best[c.run].step:
                best[c.run] = c
        return {c.id for c in best.values()}

    def protected(self, c: Checkpoint) -> bool:
        return c.pinned or bool(c.holds) or c.copying() or c.restoring or c.id in self.newest()

    def every_tier_drops(self, c: Checkpoint) -> bool:
        """An oracle for final deletion, straight from the policies."""
        facts = [s.facts for s in self.facts()]
        index = [f.id for f in facts].index(c.id)
        policies: list[Policy] = [policies_for(self.retention[t]) for t in TIERS]
        return not any(p.decide(facts, self.now)[index].kept for p in policies)

    # -- the world ------------------------------------------------------------------------

    @initialize(nvme=retentions, pfs=retentions, obj=retentions, delays=st.tuples(DELAYS, DELAYS, DELAYS))
    def first_step(
        self,
        nvme: TierRetention,
        pfs: TierRetention,
        obj: TierRetention,
        delays: tuple[timedelta, timedelta, timedelta],
    ) -> None:
        self.retention = {"nvme": nvme, "pfs": pfs, "object": obj}
        self.delay = dict(zip(TIERS, delays, strict=True))
        self.add_steps(run=RUNS[0], gaps=[1], loss=None)

    @rule(run=st.sampled_from(RUNS), gaps=st.lists(st.integers(1, 7), min_size=1, max_size=4), loss=metrics)
    def add_steps(self, run: str, gaps: list[int], loss: float | None) -> None:
        """The run saves a few steps (the first with ``loss``), seconds apart."""
        for gap in gaps:
            steps = [c.step for c in self.checkpoints.values() if c.run == run]
            new_id = len(self.checkpoints) + 1
            step = max(steps, default=0) + gap
            replicas = {"nvme": Replica(S.VERIFIED)}
            self.checkpoints[new_id] = Checkpoint(new_id, run, step, self.now, loss, replicas=replicas)
            self.now += timedelta(seconds=5)
            loss = None if loss is None else loss + gap / 10

    @rule(pick=picks, tier=st.sampled_from(TIERS[1:]), verified=st.booleans())
    def copy(self, pick: int, tier: str, verified: bool) -> None:
        """Copy a checkpoint to a tier: verified at once, or left copying (it is then in use)."""
        c = self.pick(pick)
        target = c.replicas.get(tier)
        has_source = any(r.state is S.VERIFIED for r in c.replicas.values())
        if has_source and (target is None or target.state in {S.DELETED, S.FAILED}):
            c.replicas[tier] = Replica(S.VERIFIED if verified else S.COPYING)

    @rule()
    def copy_everything(self) -> None:
        """The pipeline catches up: every checkpoint verified on every tier it is missing from."""
        for c in self.checkpoints.values():
            if any(r.state is S.VERIFIED for r in c.replicas.values()):
                for tier in TIERS[1:]:
                    if tier not in c.replicas or c.replicas[tier].state is S.DELETED:
                        c.replicas[tier] = Replica(S.VERIFIED)

    @rule(pick=picks)
    def finish_copies(self, pick: int) -> None:
        c = self.pick(pick)
        for replica in c.replicas.values():
            if replica.state is S.COPYING:
                replica.state = S.VERIFIED

    @rule(pick=picks, pinned=st.booleans())
    def pin(self, pick: int, pinned: bool) -> None:
        c = self.pick(pick)
        c.pinned = pinned

    @rule(pick=picks, name=st.sampled_from(HOLD_NAMES), held=st.booleans())
    def hold(self, pick: int, name: str, held: bool) -> None:
        c = self.pick(pick)
        if held:
            c.holds.add(name)
        else:
            c.holds.discard(name)

    @rule(pick=picks, reading=st.booleans())
    def restore(self, pick: int, reading: bool) -> None:
        c = self.pick(pick)
        c.restoring = reading

    @rule(tier=st.sampled_from(TIERS), retention=retentions)
    def set_policy(self, tier: str, retention: TierRetention) -> None:
        self.retention[tier] = retention

    @rule(pick=picks, tier=st.sampled_from(TIERS[1:]), silently=st.booleans())
    def durable_replica_goes_bad(self, pick: int, tier: str, silently: bool) -> None:
        """A scrub marks a durable replica failed, or its bytes rot unnoticed until re-verified."""
        c = self.pick(pick)
        replica = c.replicas.get(tier)
        if replica is None or replica.state is not S.VERIFIED:
            return
        if silently:
            replica.corrupt = True
        else:
            replica.state = S.FAILED
        self.may_lose_durable.add(c.id)

    @rule(pick=picks)
    def backing_copy_rots(self, pick: int) -> None:
        """The bytes of a durable copy rot while a replica waits for its delete (caught by re-verify)."""
        waiting = [
            c for c in self.checkpoints.values() if any(r.state is S.DELETING for r in c.replicas.values())
        ]
        if not waiting:
            return
        c = waiting[pick % len(waiting)]
        for tier, replica in c.replicas.items():
            if DURABLE[tier] and replica.state is S.VERIFIED:
                replica.corrupt = True
                self.may_lose_durable.add(c.id)

    @rule(seconds=st.sampled_from([1, 30, 200, 1000]))
    def advance_clock(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def restart(self) -> None:
        self.last_plan = None

    # -- the service ------------------------------------------------------------------------

    @rule(crash_after=st.none() | st.integers(0, 3))
    def retention_pass(self, crash_after: int | None) -> None:
        """One pass of the service, an interval after the last: schedule, cancel, execute what is due."""
        self.now += INTERVAL
        self.schedule()
        self.execute_due_deletions(crash_after)

    def schedule(self) -> None:
        plan = self.fresh_plan()
        self.check_plan(plan)
        for verdict in plan:
            replica = self.checkpoints[verdict.checkpoint_id].replicas[verdict.tier]
            if verdict.cancels_deletion:
                replica.state, replica.delete_after = replica.before_deleting, None
            elif verdict.schedules_deletion:
                replica.before_deleting, replica.state = replica.state, S.DELETING
                replica.delete_after = self.now + self.delay[verdict.tier]
        self.last_plan = plan
        # Stable: the plan's own schedules and cancellations never undo one of its deletes (a
        # cancelled replica may back new ones, so the next plan may delete more, never less).
        again = self.fresh_plan()
        assert again.cancellations() == [], again.cancellations()
        wanted = {(v.checkpoint_id, v.tier) for v in plan.deletions()}
        assert wanted <= {(v.checkpoint_id, v.tier) for v in again.deletions()}

    def execute_due_deletions(self, crash_after: int | None) -> None:
        due = [
            (c.id, t)
            for c in self.checkpoints.values()
            for t, r in c.replicas.items()
            if r.state is S.DELETING and r.delete_after is not None and r.delete_after <= self.now
        ]
        if self.last_plan is not None:  # the order the last plan gave, when the service remembers it
            order = {(v.checkpoint_id, v.tier): i for i, v in enumerate(self.last_plan.deletions())}
            due.sort(key=lambda key: order.get(key, len(order)))
        for done, (checkpoint_id, tier) in enumerate(due):
            if crash_after is not None and done == crash_after:
                self.restart()
                return
            self.delete_if_still_planned(checkpoint_id, tier)

    def delete_if_still_planned(self, checkpoint_id: int, tier: str) -> None:
        """Phase two: a fresh plan must still delete it, and its backing replica must re-verify."""
        verdict = self.fresh_plan().verdict(checkpoint_id, tier)
        if verdict is None or verdict.action is not Action.DELETE:
            return
        c = self.checkpoints[checkpoint_id]
        if verdict.backing_tier is not None and not self.reverify(c, verdict.backing_tier):
            return
        self.delete(c, tier, final=verdict.final)

    def reverify(self, c: Checkpoint, tier: str) -> bool:
        replica = c.replicas[tier]
        if replica.state is not S.VERIFIED:
            self.violations.append(f"{c.id}: backing replica on {tier} is {replica.state}")
            return False
        if replica.corrupt:
            replica.state = S.FAILED
            self.may_lose_durable.add(c.id)
            return False
        return True

    def delete(self, c: Checkpoint, tier: str, *, final: bool) -> None:
        if self.protected(c):
            self.violations.append(f"{c.id}: deleted on {tier} while protected")
        had_good = bool(c.good_durable())
        c.replicas[tier] = Replica(S.DELETED)
        if had_good and not c.good_durable():
            if final and self.every_tier_drops(c):
                self.may_lose_durable.add(c.id)
            else:
                self.violations.append(f"{c.id}: deleting {tier} lost the last good durable copy")

    @rule(tier=st.sampled_from(TIERS), needed=st.integers(0, 40))
    def evict(self, tier: str, needed: int) -> None:
        """Disk pressure: evict at once what the eviction rules allow, each backer re-verified."""
        eviction = eviction_candidates(self.facts(), tier, self.tier_rules(), needed)
        for candidate in eviction.candidates:
            c = self.checkpoints[candidate.checkpoint_id]
            if self.reverify(c, candidate.backing_tier):
                self.delete(c, tier, final=False)

    def check_plan(self, plan: Plan) -> None:
        for verdict in plan.deletions():
            c = self.checkpoints[verdict.checkpoint_id]
            backing = verdict.backing_tier
            if verdict.final:
                assert self.every_tier_drops(c), verdict
            else:
                assert backing is not None, verdict
                assert backing != verdict.tier, verdict
                assert DURABLE[backing], verdict
                assert c.replicas[backing].state is S.VERIFIED, verdict
                assert (c.id, backing) not in {(v.checkpoint_id, v.tier) for v in plan.deletions()}, verdict

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def no_violation(self) -> None:
        assert self.violations == []

    @invariant()
    def protected_checkpoints_keep_their_replicas(self) -> None:
        """Pinned, held, newest and in-use checkpoints lose no replica while protected."""
        for c in self.checkpoints.values():
            if not self.protected(c):
                self.protected_replicas.pop(c.id, None)
                continue
            before = self.protected_replicas.get(c.id, set())
            assert before <= c.present(), (c.id, before, c.present())
            self.protected_replicas[c.id] = c.present()

    @invariant()
    def no_checkpoint_loses_its_last_good_durable_copy(self) -> None:
        """Only a re-verification failure or a final deletion every tier agreed to may do it."""
        for c in self.checkpoints.values():
            good = bool(c.good_durable())
            if self.good_before.get(c.id) and not good:
                assert c.id in self.may_lose_durable, c.id
            self.good_before[c.id] = good
        self.may_lose_durable.clear()


TestRetention = RetentionMachine.TestCase
TestRetention.settings = settings(
    max_examples=150, stateful_step_count=50, derandomize=True, deadline=None, database=None
)

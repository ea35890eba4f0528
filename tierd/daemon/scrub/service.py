"""The scrubber: re-checks every verified replica on a tier once per ``scrub.every``.

One loop per tier with a ``scrub`` block. Each replica is due ``every`` after its last
check (its copy's verification, until a scrub first re-checks it), so a pass is spread
over ``every`` as the checkpoints were, rather than bunched at one moment; replicas never
re-checked go first, then the oldest check. The bytes read are capped by the tier's
``scrub.bandwidth`` with transfer's TokenBucket (a backlog, as on the first start
after an upgrade, is worked off at that rate). Shared tiers are scrubbed by the fleet's
leader alone (``ctx.acts_on``, asked before each replica); a node-local tier by each
daemon, for the checkpoints its node wrote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta

from tierd.config import ScrubConfig
from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.catalog.models import ReplicaState, utcnow
from tierd.daemon.catalog.part_deletions import part_files
from tierd.daemon.catalog.scrub import ScrubCandidate, VerifyTarget, due_for_scrub, verify_target
from tierd.daemon.context import Context
from tierd.daemon.scrub.check import ReplicaChecker
from tierd.daemon.service import InFlight, PassLoop
from tierd.daemon.transfer.recheck import CheckOutcome
from tierd.daemon.transfer.throttle import TokenBucket
from tierd.logs import get_logger

__all__ = ["ScrubService"]

log = get_logger(__name__)

ACTOR = "scrub"
#: Replicas read from the catalog at a time.
BATCH = 50
#: Bounds on the wait between looks for due replicas when none is due.
IDLE_MIN_SECONDS, IDLE_MAX_SECONDS = 0.5, 60.0


class ScrubService:
    """Runs each scrubbed tier's loop; ``check_round`` is one look for due replicas."""

    name = "scrub"

    def __init__(
        self,
        ctx: Context,
        backends: Mapping[str, Backend],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        """``clock`` and ``sleep`` drive the bandwidth cap, ``now`` the schedule (tests inject them)."""
        self.ctx = ctx
        self.now = now
        self.checker = ReplicaChecker(
            ctx.config, ctx.db, backends, ctx.metrics, on_bad_copy=ctx.wake_pipeline, now=now
        )
        self.settings: dict[str, ScrubConfig] = {
            t.name: t.scrub for t in ctx.config.tiers if t.scrub is not None and t.name in backends
        }
        # The bucket's burst (a tenth of a second's bytes) is credit the scrub earns while it
        # records a replica and fetches the next, so those pauses do not lower its rate; the
        # long-run rate never exceeds ``bandwidth``. Without it, 200MB gave 144 MB/s here.
        self.buckets = {
            name: TokenBucket(int(s.bandwidth), clock=clock, sleep=sleep) for name, s in self.settings.items()
        }
        #: When each tier last had every verified replica checked within ``every`` (since start).
        self.last_pass_at: dict[str, datetime | None] = dict.fromkeys(self.settings)
        self._checked_since_pass: dict[str, int] = dict.fromkeys(self.settings, 0)
        self.loops = {tier: self._loop(tier) for tier in self.settings}
        self._inflight = InFlight(self.name)

    async def start(self) -> None:
        """Start one loop per tier with a ``scrub`` block."""
        self.ctx.scrub = self
        for tier, loop in self.loops.items():
            self._inflight.spawn(loop.run(), f"scrub {tier}")
        log.info("scrub_started", tiers=list(self.settings))

    async def stop(self, timeout: float) -> None:
        """Take no new replica; let the ones being checked finish for up to ``timeout``."""
        for loop in self.loops.values():
            loop.halt()
        await self._inflight.drain(timeout)

    def _loop(self, tier: str) -> PassLoop:
        """Rounds on ``tier``: the next at once after one that checked replicas, else after an idle wait."""
        every = self.settings[tier].every
        idle = min(max(every / 10, IDLE_MIN_SECONDS), IDLE_MAX_SECONDS)

        async def round_() -> bool:
            return await self.check_round(tier) > 0

        return PassLoop(self.name, round_, idle, what="round", log_fields={"tier": tier})

    async def check_round(self, tier: str) -> int:
        """Re-check up to ``BATCH`` due replicas on ``tier``, oldest check first.

        Returns how many were checked, not counting those the store could not answer for
        (``inconclusive``: still due, tried again after the idle wait rather than at once).
        Raises CatalogError when the catalog fails.
        """
        if not self.ctx.acts_on(tier):
            return 0
        now = self.now()
        checked_before = now - timedelta(seconds=self.settings[tier].every)
        due = await blocking(self._due, tier, checked_before)
        if not due:
            if self.last_pass_at[tier] is None or self._checked_since_pass[tier]:
                self.last_pass_at[tier], self._checked_since_pass[tier] = now, 0
            return 0
        checked = 0
        for candidate in due:
            if self.loops[tier].stopping or not self.ctx.acts_on(tier):
                break
            outcome = await self.check(candidate)
            checked += outcome.result != "inconclusive"
        self._checked_since_pass[tier] += checked
        return checked

    async def check(self, candidate: ScrubCandidate) -> CheckOutcome:
        """Re-check one replica within its tier's bandwidth, and record the outcome."""
        bucket = self.buckets[candidate.tier]
        reads_back = self.checker.reads_back(candidate.tier)

        async def pay(size: int) -> None:
            if reads_back and size:
                await bucket.take(size)

        return await self.checker.check(candidate, actor=ACTOR, pay=pay)

    async def verify(self, checkpoint_id: int, *, actor: str) -> list[CheckOutcome]:
        """Re-check every verified replica of a checkpoint now, the tiers at once, uncapped.

        One outcome per replica in tier order (``skipped`` for one not verified, or on another
        node's local tier); of a step in several parts, a node-local tier's is this node's part
        (``detail`` says which parts are not on this node). Bad bytes are handled as a scrub's.
        Raises NotFound, CatalogError.
        """
        target = await blocking(self._verify_target, checkpoint_id)
        outcomes: list[CheckOutcome | None] = []
        checks = []
        for replica_id, tier, state in target.replicas:
            skipped = self._skip_reason(target, tier, state)
            outcomes.append(CheckOutcome(tier, "skipped", detail=skipped) if skipped else None)
            if not skipped:
                candidate = await blocking(self._candidate, target, replica_id, tier)
                checks.append(self.checker.check(candidate, actor=actor))
        checked = iter(await asyncio.gather(*checks))
        return [outcome or self._of_part(target, next(checked)) for outcome in outcomes]

    def _of_part(self, target: VerifyTarget, outcome: CheckOutcome) -> CheckOutcome:
        """A node-local tier's outcome for a step in several parts says what it covered."""
        node = self.ctx.config.node
        if not target.parts or self.ctx.config.tier(outcome.tier).shared:
            return outcome
        others = ", ".join(n for n in sorted(target.parts) if n != node)
        note = f"this node's part ({node}) checked; the parts of {others} are not on this node"
        return dataclasses.replace(outcome, detail=f"{outcome.detail}; {note}" if outcome.detail else note)

    def _candidate(self, target: VerifyTarget, replica_id: int, tier: str) -> ScrubCandidate:
        """The whole replica, or on a node-local tier this node's part of a step in several parts."""
        part = target.parts.get(self.ctx.config.node)
        if part is None or self.ctx.config.tier(tier).shared:
            return ScrubCandidate(replica_id, target.checkpoint_id, tier, target.files)
        with self.ctx.db.read_session() as session:
            return ScrubCandidate(replica_id, target.checkpoint_id, tier, part_files(session, part), part)

    def _skip_reason(self, target: VerifyTarget, tier: str, state: str) -> str:
        if tier not in self.checker.backends:
            return "not a configured tier"
        if state != ReplicaState.VERIFIED.value:
            return f"the replica is {state}: nothing to check"
        local = not self.ctx.config.tier(tier).shared
        if local and target.parts:
            others = ", ".join(n for n in sorted(target.parts) if n != self.ctx.config.node)
            if self.ctx.config.node not in target.parts:
                return f"no part on this node: the parts of {others} are on their nodes"
            return ""
        if local and target.node not in ("", self.ctx.config.node):
            return f"on node {target.node}'s own tier: checked by its daemon"
        return ""

    def _verify_target(self, checkpoint_id: int) -> VerifyTarget:
        with self.ctx.db.read_session() as session:
            return verify_target(session, checkpoint_id)

    def _due(self, tier: str, checked_before: datetime) -> list[ScrubCandidate]:
        with self.ctx.db.read_session() as session:
            return due_for_scrub(session, tier, checked_before, BATCH, node=self._node(tier))

    def _node(self, tier: str) -> str | None:
        return None if self.ctx.config.tier(tier).shared else self.ctx.config.node

"""Running deletions that are due: the one path by which tierd removes a replica's bytes.

For each due deletion, in order:

1. claim it (``begin_deletion``): from here on it cannot be undeleted; after a crash it
   is found again and finished;
2. refuse it when the checkpoint is pinned or held (checked again right before the delete);
3. re-check a verified replica on another durable tier (``verify_before_delete`` of that
   tier). A failed re-check deletes nothing: the bad replica is marked failed, so the
   scheduler copies it again from a good one, and the deletion waits for the next pass.
   Only when every other copy is itself on its way out (the whole checkpoint is deleted,
   by the API or because every tier's policy drops it) is no durable copy required;
4. remove the bytes, completion markers first (a POSIX tier renames the directory out of
   sight before anything), then mark the replica ``deleted``.

On a node-local tier, a step written by several nodes is deleted part by part: each node
claims, checks and removes only its own part's files (``catalog.part_deletions``); the step's
replica there is ``deleted`` once every part's is.

On a shared tier only the fleet's leader deletes: ``acts_on(tier)`` is asked before a
deletion is claimed, and again right before its bytes go (the fence: a leader paused or cut
off meanwhile has lost the right). A deletion skipped for this reason is not an error; one
claimed already stays claimed, and the leader finishes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tierd.config import Config
from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.catalog import mismatches, part_deletions, replica_deletions
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import ReplicaState, utcnow
from tierd.daemon.catalog.replica_deletions import DeletionContext, DueDeletion, Origin
from tierd.daemon.markers import split_markers
from tierd.daemon.metrics import Metrics
from tierd.daemon.retention.state import tier_rules
from tierd.daemon.transfer.recheck import FileRecord, Recheck, recheck_replica
from tierd.errors import TierdError
from tierd.logs import get_logger

__all__ = ["NOT_LEADER", "Deleter", "Outcome", "Veto"]

log = get_logger(__name__)

ACTOR = "retention"
#: Why a deletion on a shared tier was skipped on a daemon that does not lead the fleet.
NOT_LEADER = "not the leader of the shared tiers"
#: Replica states that mean the copy is leaving or was never made: no longer a copy to rely on.
NOT_A_COPY = frozenset(
    {
        ReplicaState.DELETING.value,
        ReplicaState.DELETED.value,
        ReplicaState.PENDING.value,
        ReplicaState.FAILED.value,
    }
)


#: Looks at a due deletion before it is claimed and returns why it must not run, or None.
Veto = Callable[[DueDeletion], "str | None"]


@dataclass(frozen=True)
class Outcome:
    """One deletion's end: ``deleted``, ``skipped`` (undeleted meanwhile), ``refused`` or ``failed``."""

    result: str
    detail: str = ""


class Deleter:
    """Runs due deletions with their re-checks (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        db: Database,
        backends: Mapping[str, Backend],
        metrics: Metrics,
        *,
        on_bad_copy: Callable[[], None] = lambda: None,
        acts_on: Callable[[str], bool] = lambda _tier: True,
    ) -> None:
        """Deletes on ``backends``; two callbacks tie it to the rest of the daemon.

        ``on_bad_copy`` runs when a re-check marks a replica failed (the pipeline copies it
        again); ``acts_on(tier)`` says whether this daemon may delete on ``tier`` now.
        """
        self.on_bad_copy = on_bad_copy
        self.acts_on = acts_on
        # In a fleet (PostgreSQL) a node-local tier's replicas are deleted by their own node only.
        self.node = None if db.is_sqlite else config.node
        self.node_local = [t.name for t in config.tiers if not t.shared]
        self.config = config
        self.db = db
        self.backends = backends
        self.metrics = metrics
        self.rules = tier_rules(config)
        self.durable = [t.name for t in config.tiers if t.durable]
        self._tiers = {t.name: t for t in config.tiers}

    def reconfigure(self, config: Config) -> None:
        """Take a reload's tier rules (the tiers themselves, their names and kinds, are the same)."""
        self.config = config
        self.rules = tier_rules(config)
        self._tiers = {t.name: t for t in config.tiers}

    def due(
        self, now: datetime, *, tiers: Sequence[str] | None = None, checkpoint_id: int | None = None
    ) -> list[DueDeletion]:
        """The deletions whose time has come on this daemon's tiers, or that had begun (blocking).

        A multi-part step on a node-local tier is this node's part of it, if it holds one.
        """
        with self.db.read_session() as session:
            due = replica_deletions.due_deletions(
                session,
                now,
                list(self.backends) if tiers is None else tiers,
                checkpoint_id=checkpoint_id,
                node=self.node,
                node_local=self.node_local,
            )
            return part_deletions.for_own_parts(session, due, self.node_local, self.config.node)

    async def run(self, due: Sequence[DueDeletion], now: datetime, *, veto: Veto) -> list[Outcome]:
        """Run each due deletion, unless ``veto`` refuses it (returning why) before it is claimed.

        The veto is the pass's fresh plan no longer deleting it, or a protection.
        """
        outcomes = []
        for item in due:
            if not self.acts_on(item.tier):
                outcomes.append(Outcome("skipped", NOT_LEADER))
                continue
            # A deletion that had begun before a crash may have removed bytes: it is finished,
            # or (when refused below) its replica is copied again; never given back as it was.
            refusal = veto(item) if not item.begun else None
            if refusal is not None:
                await blocking(self._cancel, item, refusal)
                outcomes.append(Outcome("refused", refusal))
                continue
            outcomes.append(await self.delete(item, now=now))
        return outcomes

    def _cancel(self, due: DueDeletion, refusal: str) -> None:
        with self.db.session() as session:
            replica_deletions.cancel_deletion(session, due.replica_id, reason=refusal, actor=ACTOR)

    async def delete(self, due: DueDeletion, *, now: datetime | None = None) -> Outcome:
        """Run one deletion (claimed first unless it has begun already)."""
        if not self.acts_on(due.tier):
            return Outcome("skipped", NOT_LEADER)
        if not due.begun and not await blocking(self._begin, due, now or utcnow()):
            return Outcome("skipped", "undeleted or changed before it began")
        try:
            return await self._run(due)
        except TierdError as exc:
            # The claim stays: the next pass finds the begun deletion and tries again.
            log.warning("deletion_failed", checkpoint=due.checkpoint_id, tier=due.tier, error=str(exc))
            self.metrics.deletion_failures.labels(due.tier).inc()
            return Outcome("failed", str(exc))

    def _begin(self, due: DueDeletion, now: datetime) -> bool:
        with self.db.session() as session:
            if due.part_id is not None:
                return part_deletions.begin_part_deletion(session, due.replica_id, due.part_id, now)
            return replica_deletions.begin_deletion(session, due.replica_id, now)

    async def _run(self, due: DueDeletion) -> Outcome:
        context = await blocking(self._context, due)
        refusal = context.protected_by or await self._recheck_elsewhere(due, context)
        if refusal:
            await blocking(self._abandon, due, refusal)
            self.metrics.deletions_refused.labels(due.tier, _kind(refusal)).inc()
            log.warning("deletion_refused", checkpoint=due.checkpoint_id, tier=due.tier, reason=refusal)
            return Outcome("refused", refusal)
        # Looked at again right before the bytes go: a pin or hold set meanwhile still wins.
        context = await blocking(self._context, due)
        if context.protected_by:
            await blocking(self._abandon, due, context.protected_by)
            return Outcome("refused", context.protected_by)
        if not self._fence(due):
            return Outcome("skipped", NOT_LEADER)
        if due.part_id is not None:
            await blocking(self._start_removal, due)
        await self._remove(due, [f[0] for f in context.files])
        await blocking(self._finish, due)
        self.metrics.deletions.labels(due.tier, due.origin.value).inc()
        log.info(
            "replica_deleted",
            checkpoint=due.checkpoint_id,
            run=due.run,
            step=due.step,
            tier=due.tier,
            part=due.part_id,
            reason=due.reason,
        )
        return Outcome("deleted", due.reason)

    def _fence(self, due: DueDeletion) -> bool:
        """Whether the bytes may go now; on a shared tier, logs the leader's act (or its stand-down)."""
        if not self.acts_on(due.tier):
            log.info("deletion_left_to_leader", checkpoint=due.checkpoint_id, tier=due.tier)
            return False
        if self._tiers[due.tier].shared:
            log.info("leader_acts", action="delete", checkpoint=due.checkpoint_id, tier=due.tier)
        return True

    def _context(self, due: DueDeletion) -> DeletionContext:
        """What the deletion must know; for a part, only that part's files are removed and re-checked."""
        with self.db.read_session() as session:
            context = replica_deletions.deletion_context(session, due.checkpoint_id)
            if due.part_id is None:
                return context
            return dataclasses.replace(context, files=part_deletions.part_files(session, due.part_id))

    async def _recheck_elsewhere(self, due: DueDeletion, context: DeletionContext) -> str | None:
        """None when a durable copy elsewhere re-checked good (or none is needed); else why not."""
        others = [
            t for t in self.durable if t != due.tier and context.states.get(t) == ReplicaState.VERIFIED.value
        ]
        if not others:
            leaving = all(state in NOT_A_COPY for tier, state in context.states.items() if tier != due.tier)
            if leaving and due.origin is not Origin.EVICTION:
                return None  # the whole checkpoint is being removed: no copy to keep
            return "no verified copy on another durable tier"
        # The most durable copy is the one re-checked (the planner backs deletes the same way).
        tier = others[-1]
        files = [FileRecord(*f) for f in context.files]
        result = await recheck_replica(self.backends[tier], files, self._tiers[tier].verify_before_delete)
        if result.ok:
            return None
        await self._recheck_failed(due, tier, result)
        return f"re-check of the copy on {tier} failed: {result.problem}"

    async def _recheck_failed(self, due: DueDeletion, tier: str, result: Recheck) -> None:
        if result.inconclusive:
            return  # the store did not answer: nothing is known to be wrong with the copy
        self.metrics.reverify_failures.labels(tier).inc()
        log.error("reverify_failed", checkpoint=due.checkpoint_id, tier=tier, problem=result.problem)
        await blocking(self._mark_failed, due.checkpoint_id, tier, result)
        self.on_bad_copy()

    def _mark_failed(self, checkpoint_id: int, tier: str, result: Recheck) -> None:
        bad = [b.audit() for b in result.bad]
        with self.db.session() as session:
            mismatches.mark_recheck_failed(
                session, checkpoint_id, tier, error=result.problem, actor=ACTOR, bad_files=bad
            )

    def _abandon(self, due: DueDeletion, reason: str) -> None:
        with self.db.session() as session:
            if due.part_id is not None:
                part_deletions.abandon_part_deletion(
                    session, due.replica_id, due.part_id, reason=reason, actor=ACTOR, node=self.config.node
                )
                return
            replica_deletions.abandon_deletion(
                session, due.replica_id, reason=reason, actor=ACTOR, touched=due.begun
            )

    async def _remove(self, due: DueDeletion, relpaths: Sequence[str]) -> None:
        markers, rest = split_markers(due.format, relpaths, marker=self.config.marker_for(due.path))
        await self.backends[due.tier].remove_checkpoint(due.path, markers, rest)

    def _start_removal(self, due: DueDeletion) -> None:
        assert due.part_id is not None
        with self.db.session() as session:
            part_deletions.start_part_removal(session, due.part_id, due.tier)

    def _finish(self, due: DueDeletion) -> None:
        action = "evicted" if due.origin is Origin.EVICTION else "deleted"
        with self.db.session() as session:
            if due.part_id is not None:
                part_deletions.finish_part_deletion(
                    session, due.replica_id, due.part_id, node=self.config.node, actor=ACTOR, action=action
                )
                return
            replica_deletions.finish_deletion(session, due.replica_id, actor=ACTOR, action=action)


def _kind(refusal: str) -> str:
    """A bounded metric label for a refusal's reason."""
    if refusal == "pinned":
        return "pinned"
    if refusal.startswith("held"):
        return "held"
    if refusal.startswith("re-check"):
        return "recheck_failed"
    return "no_durable_copy"

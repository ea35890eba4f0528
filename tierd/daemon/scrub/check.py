"""One replica's re-check and what follows from it: the same for the scrubber and a verify call.

The bytes are re-checked by ``transfer.recheck`` (the re-check deletion runs), every file
of the replica. Good: ``checked_at`` moves on. Bad (a file missing or not matching): the
replica is marked failed by the one way tierd has (``mark_recheck_failed``, audited per
file with the expected and actual checksum) and the pipeline is woken to copy it again
from a good copy on another tier. A replica that left meanwhile (retention deleted it
while it was read) is ``gone``, not rot: the mark only takes a replica still verified.
A candidate naming a part (this node's, on its node-local tier) checks that part's files and
records the outcome on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from tierd.config import Config
from tierd.daemon.aio import blocking
from tierd.daemon.backends import Backend
from tierd.daemon.catalog import mismatches
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.catalog.scrub import ScrubCandidate, mark_part_checked, mark_replica_checked
from tierd.daemon.metrics import Metrics
from tierd.daemon.transfer.recheck import CheckOutcome, FileRecord, Pay, Recheck, recheck_replica
from tierd.logs import get_logger

__all__ = ["ReplicaChecker"]

log = get_logger(__name__)


class ReplicaChecker:
    """Re-checks one replica and records the outcome (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        db: Database,
        backends: Mapping[str, Backend],
        metrics: Metrics,
        *,
        on_bad_copy: Callable[[], None],
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        """``on_bad_copy`` runs when a replica is marked failed (the pipeline copies it again)."""
        self.now = now
        self.config = config
        self.db = db
        self.backends = backends
        self.metrics = metrics
        self.on_bad_copy = on_bad_copy

    def reads_back(self, tier: str) -> bool:
        """Whether a re-check on ``tier`` reads every byte (POSIX, or an S3 tier set to ``readback``).

        An S3 object without a stored full-object checksum is read back too, uncharged.
        """
        config = self.config.tier(tier)
        return config.kind == "posix" or config.verify == "readback"

    async def check(self, candidate: ScrubCandidate, *, actor: str, pay: Pay | None = None) -> CheckOutcome:
        """Re-check every file of the replica and record the outcome; ``pay`` before each file.

        Raises CatalogError when the catalog cannot record it.
        """
        tier = candidate.tier
        files = [FileRecord(*f) for f in candidate.files]
        result = await recheck_replica(self.backends[tier], files, "checksum", every_file=True, pay=pay)
        self.metrics.scrub_bytes.labels(tier).inc(candidate.total_bytes)
        outcome = await self._record(candidate, result, actor)
        self.metrics.scrub_replicas.labels(tier, outcome.result).inc()
        return outcome

    async def _record(self, candidate: ScrubCandidate, result: Recheck, actor: str) -> CheckOutcome:
        tier, checkpoint_id = candidate.tier, candidate.checkpoint_id
        if result.ok:
            await blocking(self._mark_checked, candidate)
            return CheckOutcome(tier, "ok")
        if result.inconclusive:
            log.warning("scrub_inconclusive", checkpoint=checkpoint_id, tier=tier, problem=result.problem)
            return CheckOutcome(tier, "inconclusive", detail=result.problem)
        if not await blocking(self._mark_failed, candidate, result, actor):
            log.info("scrub_replica_gone", checkpoint=checkpoint_id, tier=tier)
            return CheckOutcome(tier, "gone", detail="the replica left while it was checked")
        self.metrics.scrub_mismatches.labels(tier).inc(len(result.bad))
        log.error(
            "scrub_mismatch",
            checkpoint=checkpoint_id,
            tier=tier,
            files=[b.audit() for b in result.bad],
            problem=result.problem,
        )
        self.on_bad_copy()
        return CheckOutcome(tier, "missing" if result.missing else "mismatch", result.bad, result.problem)

    def _mark_checked(self, candidate: ScrubCandidate) -> None:
        with self.db.session() as session:
            if candidate.part_id is not None:
                mark_part_checked(session, candidate.part_id, candidate.tier, self.now())
                return
            mark_replica_checked(session, candidate.replica_id, self.now())

    def _mark_failed(self, candidate: ScrubCandidate, result: Recheck, actor: str) -> bool:
        with self.db.session() as session:
            return mismatches.mark_recheck_failed(
                session,
                candidate.checkpoint_id,
                candidate.tier,
                error=result.problem,
                actor=actor,
                bad_files=[b.audit() for b in result.bad],
                part_id=candidate.part_id,
            )

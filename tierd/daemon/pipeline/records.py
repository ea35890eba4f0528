"""The catalog transactions of one running hop: start, progress, verified, failed, cancelled.

Each function is one transaction made of the catalog's named functions (``catalog.jobs``,
``replicas``, ``progress``, ``uploads``, ``audit``); choosing the source tier is the
scheduler's rule. Every write is conditional on the job's lease owner, so a worker that
lost its lease (it stalled, another worker took the job) changes nothing; the functions
then return False or None and the worker stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tierd.daemon.backends.base import Ownership
from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.checkpoints import files_of, find_checkpoint
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.jobs import (
    Claim,
    end_job_run,
    extend_lease,
    fail_job_run,
    owned_job,
    set_job_source,
)
from tierd.daemon.catalog.models import Job, JobState, Replica, ReplicaState
from tierd.daemon.catalog.ownership import directories_of
from tierd.daemon.catalog.part_replicas import (
    files_of_part,
    mark_part_copying,
    mark_part_failed,
    mark_part_verified,
    mark_step_copying,
    part_replica,
    record_part_bytes,
    set_part_copies,
    settle_parts,
    share_replica,
)
from tierd.daemon.catalog.progress import files_done, mark_job_started, record_bytes_done, record_files_done
from tierd.daemon.catalog.replicas import (
    GONE,
    find_replica,
    mark_replica_copying,
    mark_replica_failed,
    mark_replica_verified,
    replicas_by_tier,
)
from tierd.daemon.catalog.uploads import forget_part_uploads, forget_uploads
from tierd.daemon.pipeline.scheduler import choose_source
from tierd.daemon.transfer.spec import FileSpec
from tierd.errors import CatalogError
from tierd.logs import get_logger

__all__ = [
    "ACTOR",
    "HopPlan",
    "Verified",
    "cancel",
    "mark_failed",
    "mark_verified",
    "save_progress",
    "start_hop",
]

ACTOR = "pipeline"

log = get_logger(__name__)


@dataclass(frozen=True)
class HopPlan:
    """What a claimed job copies: from which tier, which files, and what is already done."""

    claim: Claim
    src_tier: str
    path: str
    files: tuple[FileSpec, ...]
    done: frozenset[str]
    file_ids: Mapping[str, int] = field(default_factory=dict)  # the catalog's row of each file
    #: An earlier run of the job started: the destination may hold files it did not record.
    resumed: bool = False
    #: The recorded owner and mode of each directory the files lie in, by path under the tier root.
    directories: Mapping[str, Ownership] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        """Bytes of every file of the checkpoint."""
        return sum(f.size for f in self.files)


def start_hop(db: Database, claim: Claim, owner: str, tiers: Sequence[str]) -> HopPlan | None:
    """Pick the source, mark the replica ``copying``; None when there is nothing to do.

    When no tier can serve as source any more (or the destination no longer needs a
    copy) the job is cancelled; the scheduler queues a new one when that changes.
    """
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        ckpt = find_checkpoint(session, claim.checkpoint_id)
        if job is None:
            return None
        if ckpt is None:
            end_job_run(session, job, JobState.CANCELLED, "checkpoint is gone")
            return None
        rows = replicas_by_tier(session, ckpt.id)
        states = [rows[t].state if t in rows else None for t in tiers]
        dst = rows.get(claim.dst_tier)
        src = choose_source(states, tiers.index(claim.dst_tier)) if claim.dst_tier in tiers else None
        if src is None or dst is None or dst.state == ReplicaState.VERIFIED.value or dst.state in GONE:
            end_job_run(session, job, JobState.CANCELLED, "no verified source tier, or nothing left to copy")
            return None
        set_job_source(job, tiers[src])
        if claim.part_id is not None:
            return _start_part(session, job, claim, ckpt.path, dst)
        mark_replica_copying(dst)
        files = files_of(session, ckpt.id)
        specs = tuple(FileSpec.of(f) for f in files)
        ids = {f.relpath: f.id for f in files}
        done = files_done(session, job, ids)
        return HopPlan(
            claim,
            tiers[src],
            ckpt.path,
            specs,
            done,
            ids,
            resumed=mark_job_started(job),
            directories=_directories(session, ckpt.id),
        )


def _start_part(session: Session, job: Job, claim: Claim, path: str, dst: Replica) -> HopPlan | None:
    """Start a one-part hop: the part's replica ``copying`` (the step's too), its files to copy."""
    assert claim.part_id is not None
    row = part_replica(session, claim.part_id, claim.dst_tier)
    if row is None or row.state == ReplicaState.VERIFIED.value:
        end_job_run(session, job, JobState.CANCELLED, "the part is already there, or gone")
        return None
    mark_part_copying(row)
    mark_step_copying(session, dst)
    files = files_of_part(session, claim.part_id)
    specs = tuple(FileSpec.of(f) for f in files)
    ids = {f.relpath: f.id for f in files}
    done = files_done(session, job, ids)
    directories = _directories(session, claim.checkpoint_id)
    return HopPlan(
        claim,
        job.src_tier or "",
        path,
        specs,
        done,
        ids,
        resumed=mark_job_started(job),
        directories=directories,
    )


def _directories(session: Session, checkpoint_id: int) -> dict[str, Ownership]:
    """The checkpoint's recorded directories: path -> owner (parents first)."""
    return {d.relpath: Ownership(d.uid, d.gid, d.mode) for d in directories_of(session, checkpoint_id)}


def save_progress(
    db: Database,
    claim: Claim,
    owner: str,
    bytes_done: int,
    finished: Sequence[int],
    *,
    lease_seconds: float | None = None,
) -> bool:
    """Record bytes copied and the files (by id) finished since, renewing the lease when asked.

    Files already recorded are ignored. False if the lease is lost.
    """
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        if job is None:
            return False
        record_files_done(session, job, finished)
        if lease_seconds is not None:
            extend_lease(job, lease_seconds)
        if claim.part_id is not None:
            record_part_bytes(session, claim.part_id, claim.dst_tier, bytes_done)
        else:
            record_bytes_done(session, claim.checkpoint_id, claim.dst_tier, bytes_done)
        return True


@dataclass(frozen=True)
class Verified:
    """How ``mark_verified`` ended: recorded (else the lease was lost), and whether hops may be ready.

    ``unlocks`` is False for a part whose step still has two or more parts to verify on the
    tier: nothing new can be scheduled (the marker's part waits for every other part), so
    the pipeline need not look at the step again.
    """

    recorded: bool
    unlocks: bool = True


def mark_verified(db: Database, plan: HopPlan, owner: str, location: str, seconds: float) -> Verified:
    """Every file matched: replica verified, job done, audit event, upload records dropped."""
    claim = plan.claim
    if claim.part_id is not None:
        return _part_verified(db, plan, owner, location, seconds)
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        replica = find_replica(session, claim.checkpoint_id, claim.dst_tier)
        # A replica deleted meanwhile (by an operator) is not brought back by a copy that finished.
        if job is None or replica is None or replica.state != ReplicaState.COPYING.value:
            return Verified(recorded=False)
        mark_replica_verified(replica, location, plan.total_bytes)
        set_part_copies(session, claim.checkpoint_id, claim.dst_tier, ReplicaState.VERIFIED)
        end_job_run(session, job, JobState.DONE, None)
        forget_uploads(session, claim.checkpoint_id, claim.dst_tier)
        detail = {
            "source": plan.src_tier,
            "files": len(plan.files),
            "bytes": plan.total_bytes,
            "seconds": round(seconds, 3),
        }
        reason = f"copied from {plan.src_tier}; every checksum matched"
        append_event(
            session,
            actor=ACTOR,
            action="replica_verified",
            checkpoint_id=claim.checkpoint_id,
            tier=claim.dst_tier,
            reason=reason,
            detail=detail,
        )
        return Verified(recorded=True)


def _part_verified(db: Database, plan: HopPlan, owner: str, location: str, seconds: float) -> Verified:
    """A part matched on its destination; the step's replica there is verified once every part is.

    The part is recorded with the step's replica share-locked: parts finishing on many nodes
    at once do not wait for each other, and a deletion of the replica waits for them (or they
    see it). Then ``settle_parts`` looks whether every part is verified.
    """
    claim = plan.claim
    assert claim.part_id is not None
    cid, tier = claim.checkpoint_id, claim.dst_tier
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        replica = share_replica(session, cid, tier)
        row = part_replica(session, claim.part_id, tier)
        if job is None or replica is None or row is None or replica.state in GONE:
            return Verified(recorded=False)
        mark_part_verified(row, plan.total_bytes)
        end_job_run(session, job, JobState.DONE, None)
        forget_part_uploads(session, cid, tier, [f.relpath for f in plan.files])
        detail = {"source": plan.src_tier, "files": len(plan.files), "bytes": plan.total_bytes}
        detail |= {"part": claim.part_id, "seconds": round(seconds, 3)}
        append_event(
            session,
            actor=ACTOR,
            action="part_verified",
            checkpoint_id=cid,
            tier=tier,
            reason="every checksum matched",
            detail=detail,
        )
    try:
        left = settle_parts(db, cid, tier, location, actor=ACTOR).left
    except CatalogError as exc:  # the part is recorded; the scheduler's next pass settles the step
        log.warning("replica_not_settled", checkpoint=cid, tier=tier, error=str(exc))
        return Verified(recorded=True)
    return Verified(recorded=True, unlocks=left is None or left <= 1)


def mark_failed(
    db: Database, plan: HopPlan, owner: str, error: str, *, retry_at: datetime | None, reason: str
) -> bool:
    """The hop failed: replica failed with ``error``; the job retried at ``retry_at`` or failed for good."""
    claim = plan.claim
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        if job is None:
            return False
        replica = find_replica(session, claim.checkpoint_id, claim.dst_tier)
        if replica is not None:
            mark_replica_failed(replica, error)
        part = part_replica(session, claim.part_id, claim.dst_tier) if claim.part_id is not None else None
        if part is not None:
            mark_part_failed(part, error)
        fail_job_run(session, job, error, reason=reason, retry_at=retry_at)
        if retry_at is None and claim.part_id is not None:
            forget_part_uploads(session, claim.checkpoint_id, claim.dst_tier, [f.relpath for f in plan.files])
        elif retry_at is None:
            forget_uploads(session, claim.checkpoint_id, claim.dst_tier)
        detail: dict[str, Any] = {"source": plan.src_tier, "reason": reason, "attempts": job.attempts}
        detail["retry_at"] = retry_at.isoformat() if retry_at is not None else None
        append_event(
            session,
            actor=ACTOR,
            action="replica_failed",
            checkpoint_id=claim.checkpoint_id,
            tier=claim.dst_tier,
            reason=error,
            detail=detail,
        )
        return True


def cancel(db: Database, claim: Claim, owner: str, why: str) -> bool:
    """Cancel a job that has nothing to do."""
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        if job is None:
            return False
        end_job_run(session, job, JobState.CANCELLED, why)
        return True

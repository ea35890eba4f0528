"""Restore jobs: rows of the ``jobs`` table with kind ``restore``, their leases and their audit events.

A restore is a job like a copy, so it shares the copy jobs' leases (claim, renew, requeue of
a dead worker's job at start-up: ``catalog.jobs``) and, while ``running``, protects its
checkpoint from deletion and eviction on every tier (``catalog.retention.READING_JOBS``).
What a copy job keeps in columns a restore keeps in ``detail`` (a JSON object): the request
(``target``, ``to_tier0``, ``files``, ``ranks``, ``source_tier``, ``overwrite``, and
``owner``: ``{"uid", "gid"}`` to give the restored tree to, None to keep each file's), the node
whose daemon restores it, whether the target was empty when asked (``fresh``), and the
progress (``bytes_done``, ``files_done``, totals, rate, ETA, ``fallbacks``). ``src_tier``
holds the tier it reads from now; the files it placed are ``job_files_done`` rows, so a
cancel after a restart still knows what to remove. Audit actions: ``restore_requested``,
``restore_done``, ``restore_failed``, ``restore_cancelled``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import lease_clock
from tierd.daemon.catalog.jobs import end_job_run, owned_job
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    File,
    Job,
    JobKind,
    JobState,
    Part,
    Replica,
    ReplicaState,
    Run,
)
from tierd.daemon.catalog.ownership import RecordedDirectory, directories_of
from tierd.daemon.catalog.part_replicas import (
    mark_part_verified,
    part_replica,
    parts_verified_on,
    set_part_copies,
)
from tierd.daemon.catalog.parts import find_part
from tierd.daemon.catalog.peer_reads import has_peer_copies, peer_copied_checkpoints
from tierd.daemon.catalog.progress import files_done, record_files_done
from tierd.daemon.catalog.replicas import first_tier_replica, mark_replica_verified
from tierd.errors import Conflict, NotFound

__all__ = [
    "FINISHED",
    "OPEN",
    "RestoreClaim",
    "RestoreFile",
    "RestorePlan",
    "RestoreRow",
    "cancel_restore",
    "claim_next_restore",
    "create_restore",
    "file_sizes",
    "finish_restore",
    "get_restore",
    "list_restores",
    "node_part_files",
    "release_restore",
    "resolve_checkpoint",
    "restore_record",
    "save_restore_progress",
    "start_restore",
]

#: States of a restore still to run or running.
OPEN = (JobState.QUEUED.value, JobState.RUNNING.value)
#: States a restore never leaves.
FINISHED = (JobState.DONE.value, JobState.FAILED.value, JobState.CANCELLED.value)


@dataclass(frozen=True)
class RestoreRow:
    """A restore job with the run and step of its checkpoint (what the API shows)."""

    job: Job
    run: str
    step: int


@dataclass(frozen=True)
class RestoreClaim:
    """A restore this worker now holds a lease on."""

    job_id: int
    checkpoint_id: int
    attempts: int
    detail: dict[str, Any]


@dataclass(frozen=True)
class RestoreFile:
    """A file of the checkpoint as the catalog holds it (``relpath`` relative to a tier's root)."""

    id: int
    relpath: str
    size: int
    checksum: str
    mtime_ns: int
    #: Owner, group and permission bits at first sight (None: recorded before tierd kept them).
    uid: int | None = None
    gid: int | None = None
    mode: int | None = None


@dataclass(frozen=True)
class RestorePlan:
    """What a claimed restore reads: the checkpoint, its files, and where verified copies are."""

    claim: RestoreClaim
    path: str
    format: str
    files: tuple[RestoreFile, ...]
    verified_tiers: frozenset[str]
    done: frozenset[str] = field(default_factory=frozenset)  # relpaths an earlier attempt placed
    #: Of a step in several parts, the relpaths this node's node-local tier 0 holds (None: all).
    local_part: frozenset[str] | None = None
    #: That part's id (None: no part of this node's, or one part only).
    local_part_id: int | None = None
    #: The directories the files lie in, with their owners and modes at first sight.
    directories: tuple[RecordedDirectory, ...] = ()


def resolve_checkpoint(
    session: Session, *, checkpoint_id: int | None, run: str | None, step: int | None, latest: bool
) -> Checkpoint:
    """The checkpoint a restore names: by id, by run and step, or the run's newest restorable step.

    The newest restorable step is the newest complete one with a verified replica somewhere, or a
    verified copy of one of its parts on a peer (what ``create_restore`` accepts).
    Raises NotFound (no such checkpoint or run), Conflict (the run has no such step).
    """
    if checkpoint_id is not None:
        row = session.get(Checkpoint, checkpoint_id)
        if row is None:
            raise NotFound(f"checkpoint {checkpoint_id} does not exist")
        return row
    run_id = session.scalar(select(Run.id).where(Run.name == run))
    if run_id is None:
        raise NotFound(f"run {run!r} does not exist")
    query = select(Checkpoint).where(Checkpoint.run_id == run_id)
    if not latest:
        row = session.scalars(query.where(Checkpoint.step == step)).one_or_none()
        if row is None:
            raise NotFound(f"run {run!r} has no checkpoint at step {step}")
        return row
    verified = select(Replica.checkpoint_id).where(Replica.state == ReplicaState.VERIFIED.value)
    restorable = or_(Checkpoint.id.in_(verified), Checkpoint.id.in_(peer_copied_checkpoints()))
    row = session.scalars(
        query.where(Checkpoint.state == CheckpointState.COMPLETE.value, restorable)
        .order_by(Checkpoint.step.desc())
        .limit(1)
    ).first()
    if row is None:
        raise Conflict(f"run {run!r} has no complete checkpoint with a verified replica or peer copy")
    return row


def create_restore(session: Session, checkpoint: Checkpoint, detail: dict[str, Any], *, actor: str) -> Job:
    """Queue a restore of ``checkpoint`` (inside the caller's transaction), in the audit log.

    Raises Conflict when the checkpoint is not complete, or when no tier holds a verified
    replica and no peer a verified copy of one of its parts.
    """
    if checkpoint.state != CheckpointState.COMPLETE.value:
        raise Conflict(f"checkpoint {checkpoint.id} is {checkpoint.state}, not complete")
    tiers = session.scalars(
        select(Replica.tier).where(
            Replica.checkpoint_id == checkpoint.id, Replica.state == ReplicaState.VERIFIED.value
        )
    ).all()
    if not tiers and not has_peer_copies(session, checkpoint.id):
        raise Conflict(
            f"checkpoint {checkpoint.id} has no verified replica on any tier, nor a verified peer copy,"
            " to restore from"
        )
    job = Job(
        kind=JobKind.RESTORE.value,
        checkpoint_id=checkpoint.id,
        state=JobState.QUEUED.value,
        priority=0,
        detail={**detail, "actor": actor},
    )
    session.add(job)
    session.flush()
    append_event(
        session,
        actor=actor,
        action="restore_requested",
        checkpoint_id=checkpoint.id,
        reason=f"restore {job.id} into {detail['target']}",
        detail={"restore": job.id, **_request_of(detail)},
    )
    return job


def _request_of(detail: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("target", "to_tier0", "files", "ranks", "part_of", "source_tier", "overwrite", "owner")
    return {key: detail.get(key) for key in keys}


def get_restore(session: Session, job_id: int) -> RestoreRow:
    """One restore with its checkpoint's run and step. Raises NotFound."""
    row = session.execute(_rows().where(Job.id == job_id)).first()
    if row is None:
        raise NotFound(f"restore {job_id} does not exist")
    return RestoreRow(row[0], row[1], row[2])


def list_restores(session: Session, *, states: Sequence[str] = (), limit: int = 100) -> list[RestoreRow]:
    """Restores newest first, only in ``states`` when given."""
    query = _rows().order_by(Job.id.desc()).limit(limit)
    if states:
        query = query.where(Job.state.in_(list(states)))
    return [RestoreRow(job, run, step) for job, run, step in session.execute(query)]


def _rows() -> Any:
    return (
        select(Job, Run.name, Checkpoint.step)
        .join(Checkpoint, Checkpoint.id == Job.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .where(Job.kind == JobKind.RESTORE.value)
        .execution_options(populate_existing=True)
    )


def claim_next_restore(
    db: Database, owner: str, node: str, *, lease_seconds: float, now: datetime | None = None
) -> RestoreClaim | None:
    """Take the oldest claimable restore of ``node`` (queued, or running under an expired lease)."""
    with db.session() as session:
        now = now or lease_clock(session)
        candidates = session.scalars(
            select(Job)
            .where(
                Job.kind == JobKind.RESTORE.value,
                (Job.state == JobState.QUEUED.value)
                | ((Job.state == JobState.RUNNING.value) & (Job.lease_expires_at < now)),
            )
            .order_by(Job.id)
        ).all()
        job = next((j for j in candidates if (j.detail or {}).get("node") == node), None)
        if job is None:
            return None
        job.state = JobState.RUNNING.value
        job.lease_owner = owner
        job.lease_expires_at = now + timedelta(seconds=lease_seconds)
        return RestoreClaim(job.id, job.checkpoint_id, job.attempts, dict(job.detail or {}))


def file_sizes(session: Session, checkpoint_id: int) -> list[tuple[str, int]]:
    """(relpath, size) of the checkpoint's files, by relative path (columns, not entities)."""
    query = select(File.relpath, File.size).where(File.checkpoint_id == checkpoint_id).order_by(File.relpath)
    return [(relpath, size) for relpath, size in session.execute(query)]


def start_restore(
    db: Database, claim: RestoreClaim, owner: str, *, node: str | None = None
) -> RestorePlan | None:
    """The claimed restore's checkpoint, files and verified tiers; None when the lease is gone.

    ``node`` (tier 0 node-local): the plan says which files of a step in several parts are its.
    """
    with db.session() as session:
        job = owned_job(session, claim.job_id, owner)
        checkpoint = session.get(Checkpoint, claim.checkpoint_id)
        if job is None or checkpoint is None:
            return None
        # Columns, not ``File`` entities: 5,000 ORM objects (each with its state and dict) took
        # ~7 MB of a restoring daemon's resident memory for the moment they lived.
        fields = (File.id, File.relpath, File.size, File.checksum, File.mtime_ns, File.uid, File.gid)
        query = select(*fields, File.mode).where(File.checkpoint_id == checkpoint.id).order_by(File.relpath)
        files = tuple(RestoreFile(*row) for row in session.execute(query))
        verified = session.scalars(
            select(Replica.tier).where(
                Replica.checkpoint_id == checkpoint.id, Replica.state == ReplicaState.VERIFIED.value
            )
        ).all()
        done = files_done(session, job, {f.relpath: f.id for f in files})
        local = None if node is None else node_part_files(session, checkpoint.id, node)
        part = find_part(session, checkpoint.id, node) if local is not None and node is not None else None
        if part is not None and not _part_on_tier0(session, checkpoint.id, part.id):
            local = frozenset()  # its copy there is gone (a wiped NVMe): never read from tier 0
        return RestorePlan(
            claim,
            checkpoint.path,
            checkpoint.format,
            files,
            frozenset(verified),
            done,
            local,
            None if part is None else part.id,
            tuple(directories_of(session, checkpoint.id)),
        )


def _part_on_tier0(session: Session, checkpoint_id: int, part_id: int) -> bool:
    """Whether the part's copy on tier 0 is verified (or the catalog keeps no state for it)."""
    replica = first_tier_replica(session, checkpoint_id)
    own = None if replica is None else part_replica(session, part_id, replica.tier)
    return own is None or own.state == ReplicaState.VERIFIED.value


def node_part_files(session: Session, checkpoint_id: int, node: str) -> frozenset[str] | None:
    """The relpaths of ``node``'s part of a step in several parts (empty: none); None for one part."""
    query = select(Part.id, Part.node).where(Part.checkpoint_id == checkpoint_id)
    parts = {pid: name for pid, name in session.execute(query)}
    if len(parts) <= 1:
        return None
    mine = [pid for pid, name in parts.items() if name == node]
    return frozenset(session.scalars(select(File.relpath).where(File.part_id.in_(mine))))


def save_restore_progress(
    db: Database,
    job_id: int,
    owner: str,
    progress: Mapping[str, Any],
    placed: Sequence[int],
    *,
    source_tier: str | None,
    lease_seconds: float | None,
) -> bool:
    """Record progress (into ``detail``) and the files placed since; False when the lease is gone.

    The lease is lost when the job was cancelled (``DELETE``) or another worker took it.
    """
    with db.session() as session:
        job = owned_job(session, job_id, owner)
        if job is None:
            return False
        record_files_done(session, job, placed)
        job.detail = {**(job.detail or {}), **progress}
        if source_tier is not None:
            job.src_tier = source_tier
        if lease_seconds is not None:
            job.lease_expires_at = lease_clock(session) + timedelta(seconds=lease_seconds)
        return True


def release_restore(db: Database, job_id: int, owner: str) -> bool:
    """Put a running restore back in the queue (shutdown): it resumes at the next start."""
    with db.session() as session:
        job = owned_job(session, job_id, owner)
        if job is None:
            return False
        job.state, job.lease_owner, job.lease_expires_at = JobState.QUEUED.value, None, None
        return True


def finish_restore(
    db: Database,
    job_id: int,
    owner: str,
    *,
    error: str | None,
    progress: Mapping[str, Any],
    source_tier: str | None = None,
    tier0_location: str | None = None,
    tier0_part: str | None = None,
) -> bool:
    """End a restore ``done`` (``error`` None) or ``failed``, in the audit log.

    With ``tier0_location`` (what tier 0 records, restored to it) the tier-0 copy is verified
    again, at that location: the whole checkpoint's, or with ``tier0_part`` only that node's
    part (``_back_on_tier0``). False when the lease was gone (nothing is changed).
    """
    with db.session() as session:
        job = owned_job(session, job_id, owner)
        if job is None:
            return False
        job.detail = {**(job.detail or {}), **progress}
        if source_tier is not None:
            job.src_tier = source_tier
        state = JobState.DONE if error is None else JobState.FAILED
        end_job_run(session, job, state, error)
        if tier0_location is not None and error is None:
            _back_on_tier0(session, job.checkpoint_id, tier0_location, tier0_part)
        append_event(
            session,
            actor="restore",
            action=f"restore_{state.value}",
            checkpoint_id=job.checkpoint_id,
            tier=job.src_tier,
            reason=error or f"restore {job.id} into {job.detail.get('target')}",
            detail={"restore": job.id, "fallbacks": job.detail.get("fallbacks", [])},
        )
        return True


def _back_on_tier0(session: Session, checkpoint_id: int, location: str, node: str | None) -> None:
    """The restored files are tier 0's again: its copy there is verified, at ``location``.

    ``node`` None: the whole checkpoint, so the step's replica and every part's copy. Else only
    that node's part (its tier 0 was wiped, then restored): its part's copy, and the step's
    replica once every part is verified there again.
    """
    replica = first_tier_replica(session, checkpoint_id)
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if replica is None or checkpoint is None:
        return
    if node is None:
        mark_replica_verified(replica, location, checkpoint.total_bytes)
        set_part_copies(session, checkpoint.id, replica.tier, ReplicaState.VERIFIED)
        return
    part = find_part(session, checkpoint_id, node)
    own = None if part is None else part_replica(session, part.id, replica.tier)
    if part is None or own is None:
        return
    mark_part_verified(own, part.total_bytes)
    settled = replica.state == ReplicaState.VERIFIED.value
    if not settled and parts_verified_on(session, checkpoint_id, replica.tier):
        mark_replica_verified(replica, location, checkpoint.total_bytes)


def cancel_restore(session: Session, job_id: int, *, actor: str, reason: str) -> bool:
    """Cancel a restore (inside the caller's transaction); returns whether it was open.

    A cancelled one is returned as it is. Raises NotFound, Conflict when it is done or failed.
    """
    job = session.get(Job, job_id)
    if job is None or job.kind != JobKind.RESTORE.value:
        raise NotFound(f"restore {job_id} does not exist")
    if job.state == JobState.CANCELLED.value:
        return False
    if job.state in FINISHED:
        raise Conflict(f"restore {job_id} is already {job.state}")
    job.state, job.lease_owner, job.lease_expires_at = JobState.CANCELLED.value, None, None
    job.last_error = reason
    append_event(
        session,
        actor=actor,
        action="restore_cancelled",
        checkpoint_id=job.checkpoint_id,
        reason=reason,
        detail={"restore": job.id, "target": (job.detail or {}).get("target")},
    )
    return True


def restore_record(
    session: Session, job_id: int
) -> tuple[dict[str, Any], str, list[str], frozenset[str]] | None:
    """A restore's detail, its checkpoint's path and files, and the files it recorded as placed.

    None when there is no such restore (or its checkpoint is gone).
    """
    job = session.get(Job, job_id)
    checkpoint = session.get(Checkpoint, job.checkpoint_id) if job is not None else None
    if job is None or checkpoint is None or job.kind != JobKind.RESTORE.value:
        return None
    ids = {
        relpath: file_id
        for relpath, file_id in session.execute(
            select(File.relpath, File.id).where(File.checkpoint_id == job.checkpoint_id)
        )
    }
    return dict(job.detail or {}), checkpoint.path, sorted(ids), files_done(session, job, ids)

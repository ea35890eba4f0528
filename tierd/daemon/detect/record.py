"""Recording a detected checkpoint: hash its files, then write it in one transaction.

Files are hashed in parallel on the I/O pool. A file whose size or mtime moves while it
is hashed (or since the detector saw it) makes the whole recording unstable: nothing is
written and the caller tries again later. The catalog write is idempotent: a step that
is already recorded (by this daemon, the notify call, or another daemon sharing the
PostgreSQL catalog) is returned as it is, never recorded twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from tierd.config import Config
from tierd.daemon import checksum
from tierd.daemon.aio import blocking
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import (
    AuditEvent,
    Checkpoint,
    CheckpointState,
    File,
    Replica,
    ReplicaState,
    Run,
    utcnow,
)
from tierd.daemon.context import Context
from tierd.daemon.detect.layout import FileStat, Verdict
from tierd.errors import Unstable

__all__ = [
    "Detection",
    "HashedFile",
    "Outcome",
    "get_or_create_run",
    "hash_stable",
    "load_checkpoint",
    "record_checkpoint",
    "write_complete",
    "write_waiting",
]


@dataclass(frozen=True)
class HashedFile:
    """A file's catalog fields: path relative to the tier-0 root, size, mtime, checksum."""

    relpath: str
    size: int
    mtime_ns: int
    checksum: str


@dataclass(frozen=True)
class Detection:
    """Everything the catalog needs about one complete checkpoint."""

    run: str
    step: int
    format: str
    relpath: str
    files: tuple[HashedFile, ...]
    actor: str
    action: str
    reason: str


class Outcome(Enum):
    """What ``write_complete`` did."""

    CREATED = "created"
    COMPLETED = "completed"  # a waiting (notified) row got its files
    EXISTING = "existing"  # already recorded: nothing written


def _block_size(size: int) -> int:
    """A read buffer no larger than the file needs (small files are common: skip 8 MiB)."""
    return min(checksum.BLOCK_SIZE, max(64 * 1024, size + 1))


def _hash_one(f: FileStat, tier0: Path) -> HashedFile:
    before = os.stat(f.path, follow_symlinks=False)
    if (before.st_size, before.st_mtime_ns) != (f.size, f.mtime_ns):
        raise Unstable(f"{f.path} changed since it was seen")
    size, value = checksum.hash_file(f.path, block_size=_block_size(f.size))
    after = os.stat(f.path, follow_symlinks=False)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or size != before.st_size:
        raise Unstable(f"{f.path} changed while it was hashed")
    return HashedFile(f.path.relative_to(tier0).as_posix(), size, before.st_mtime_ns, value)


async def hash_stable(files: tuple[FileStat, ...], tier0: Path) -> tuple[HashedFile, ...]:
    """Hash every file in parallel off the event loop; raises Unstable if any moved."""
    try:
        hashed = await asyncio.gather(*(blocking(_hash_one, f, tier0) for f in files))
    except FileNotFoundError as exc:
        raise Unstable(f"{exc.filename} vanished while it was hashed") from None
    return tuple(hashed)


def get_or_create_run(session: Session, name: str) -> Run:
    """The run named ``name``, created if needed (safe against a concurrent creator)."""
    run = session.scalars(select(Run).where(Run.name == name)).one_or_none()
    if run is not None:
        return run
    try:
        with session.begin_nested():
            run = Run(name=name)
            session.add(run)
    except IntegrityError:
        run = session.scalars(select(Run).where(Run.name == name)).one()
    return run


def load_checkpoint(session: Session, checkpoint_id: int) -> Checkpoint:
    """A checkpoint with its run and replicas loaded (for the API's CheckpointOut)."""
    return session.scalars(
        select(Checkpoint)
        .where(Checkpoint.id == checkpoint_id)
        .options(selectinload(Checkpoint.run), selectinload(Checkpoint.replicas))
        .execution_options(populate_existing=True)
    ).one()


def _existing(session: Session, run: Run, step: int, relpath: str, node: str) -> Checkpoint | None:
    """The row for this step: by run and step, else the row recorded at the same path.

    A path names one step, except nvidia-resiliency-ext's session directory (one per node,
    holding every iteration), where the step must match too.
    """
    row = session.scalars(
        select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.step == step)
    ).one_or_none()
    if row is not None:
        return row
    same_path = session.scalars(
        select(Checkpoint).where(Checkpoint.path == relpath, Checkpoint.node == node).order_by(Checkpoint.id)
    ).all()
    for other in same_path:
        if other.format != "nvrx_local" or other.step == step:
            return other
    return None


def _fill(session: Session, config: Config, row: Checkpoint, det: Detection, now: datetime) -> None:
    newest = max((f.mtime_ns for f in det.files), default=0)
    row.state = CheckpointState.COMPLETE.value
    row.total_bytes = sum(f.size for f in det.files)
    row.file_count = len(det.files)
    row.created_at = datetime.fromtimestamp(newest / 1e9, UTC) if newest else now
    row.completed_at = now
    for f in det.files:
        session.add(
            File(
                checkpoint_id=row.id,
                relpath=f.relpath,
                size=f.size,
                mtime_ns=f.mtime_ns,
                checksum_algo=checksum.ALGORITHM,
                checksum=f.checksum,
            )
        )
    location = str(config.tier0.path.resolve() / det.relpath)
    for index, tier in enumerate(config.tiers):
        first = index == 0
        session.add(
            Replica(
                checkpoint_id=row.id,
                tier=tier.name,
                tier_index=index,
                state=(ReplicaState.VERIFIED if first else ReplicaState.PENDING).value,
                location=location if first else "",
                verified_at=now if first else None,
            )
        )


def write_complete(db: Database, config: Config, det: Detection) -> tuple[Outcome, int]:
    """Record ``det`` in one transaction (blocking); returns what happened and the row id."""
    with db.session() as session:
        run = get_or_create_run(session, det.run)
        now = utcnow()
        row = _existing(session, run, det.step, det.relpath, config.node)
        outcome = Outcome.COMPLETED
        if row is not None and row.state != CheckpointState.WAITING.value:
            return Outcome.EXISTING, row.id
        if row is None:
            outcome = Outcome.CREATED
            row = Checkpoint(
                run_id=run.id, step=det.step, path=det.relpath, format=det.format, node=config.node
            )
            try:
                with session.begin_nested():
                    session.add(row)
            except IntegrityError:
                row = _existing(session, run, det.step, det.relpath, config.node)
                assert row is not None
                if row.state != CheckpointState.WAITING.value:
                    return Outcome.EXISTING, row.id
                outcome = Outcome.COMPLETED
        _fill(session, config, row, det, now)
        session.add(_audit(row, det, outcome))
        session.flush()
        return outcome, row.id


def _audit(row: Checkpoint, det: Detection, outcome: Outcome) -> AuditEvent:
    return AuditEvent(
        actor=det.actor,
        action=det.action,
        checkpoint_id=row.id,
        reason=det.reason,
        detail={
            "run": det.run,
            "step": det.step,
            "format": det.format,
            "path": det.relpath,
            "files": len(det.files),
            "bytes": sum(f.size for f in det.files),
            "outcome": outcome.value,
        },
    )


def write_waiting(
    db: Database, config: Config, *, run: str, step: int, fmt: str, relpath: str, actor: str, reason: str
) -> tuple[Outcome, int]:
    """Record an announced step whose files the detector does not accept yet (blocking)."""
    with db.session() as session:
        run_row = get_or_create_run(session, run)
        row = _existing(session, run_row, step, relpath, config.node)
        if row is not None:
            return Outcome.EXISTING, row.id
        row = Checkpoint(
            run_id=run_row.id,
            step=step,
            path=relpath,
            format=fmt,
            node=config.node,
            state=CheckpointState.WAITING.value,
        )
        try:
            with session.begin_nested():
                session.add(row)
        except IntegrityError:
            existing = _existing(session, run_row, step, relpath, config.node)
            assert existing is not None
            return Outcome.EXISTING, existing.id
        detail = {"run": run, "step": step, "format": fmt, "path": relpath, "state": "waiting"}
        session.add(
            AuditEvent(actor=actor, action="notified", checkpoint_id=row.id, reason=reason, detail=detail)
        )
        return Outcome.CREATED, row.id


async def record_checkpoint(
    ctx: Context,
    verdict: Verdict,
    *,
    run: str,
    step: int,
    fmt: str,
    relpath: str,
    actor: str,
    action: str,
    recheck: Callable[[], Verdict] | None = None,
) -> tuple[Outcome, int]:
    """Hash a complete verdict's files, check nothing moved meanwhile, and record it.

    ``recheck`` runs the detector again after hashing: the verdict must still be
    complete with exactly the same files, sizes and mtimes. Raises Unstable otherwise,
    and CatalogError when the catalog fails.
    """
    tier0 = ctx.config.tier0.path.resolve()
    hashed = await hash_stable(verdict.files, tier0)
    if recheck is not None:
        again = await blocking(recheck)
        if not again.complete or set(again.files) != set(verdict.files):
            raise Unstable("the checkpoint changed while it was hashed")
    det = Detection(run, step, fmt, relpath, hashed, actor, action, verdict.reason)
    outcome, checkpoint_id = await blocking(write_complete, ctx.db, ctx.config, det)
    if outcome is not Outcome.EXISTING:
        ctx.metrics.detected.labels(fmt).inc()
        ctx.wake_pipeline()
    return outcome, checkpoint_id

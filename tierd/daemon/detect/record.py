"""Recording a detected checkpoint: hash its files, then write it in one transaction.

Files are hashed in parallel on the I/O pool; each file's owner, group and mode are taken
from the same ``fstat`` that checks its size and mtime, and the directories the files lie in
are recorded with theirs (``detect.owners``), so every copy can keep them. A file whose
size or mtime moves while it is hashed (or since the detector saw it) makes the whole
recording unstable: nothing is written and the caller tries again later. The catalog write
is idempotent: a step that is already recorded (by this daemon, the notify call, or another
daemon sharing the PostgreSQL catalog) is returned as it is, never recorded twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

from tierd.config import Config
from tierd.daemon.aio import blocking
from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.checkpoints import (
    find_run,
    find_step,
    get_or_create_run,
    insert_checkpoint,
    mark_waiting,
    merge_metrics,
)
from tierd.daemon.catalog.db import Database, Session
from tierd.daemon.catalog.dialect import notify_steps
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, utcnow
from tierd.daemon.catalog.ownership import record_directories
from tierd.daemon.catalog.parts import (
    Expectation,
    add_part,
    complete_parts,
    extend_part,
    find_part,
    has_expectation,
    lock_checkpoint,
    missing_of,
    set_expectation,
    settle_step,
    unheld_files,
)
from tierd.daemon.catalog.recording import Claimed, claim_recording
from tierd.daemon.context import Context
from tierd.daemon.detect.detector import Verdict
from tierd.daemon.detect.hashing import HashedFile, hash_stable
from tierd.daemon.detect.hostile import check_checkpoint, printable
from tierd.daemon.detect.owners import DirectoryStat, stat_directories
from tierd.errors import CatalogConflict, Refused, Unstable

__all__ = [
    "Detection",
    "Outcome",
    "record_checkpoint",
    "write_complete",
    "write_refused",
    "write_waiting",
]


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
    metrics: Mapping[str, float] = field(default_factory=dict)
    detail: Mapping[str, Any] = field(default_factory=dict)
    #: The directories ``files`` lie in, with their owners and modes (``detect.owners``).
    directories: tuple[DirectoryStat, ...] = ()


class Outcome(Enum):
    """What ``write_complete`` did."""

    CREATED = "created"
    COMPLETED = "completed"  # a waiting (notified) row got its files
    EXISTING = "existing"  # already recorded: nothing written
    PART = "part"  # this node's part recorded; the step still waits for others


def write_complete(
    db: Database,
    config: Config,
    det: Detection,
    *,
    whole: bool = True,
    marked: bool | None = None,
    expect: Expectation | None = None,
) -> tuple[Outcome, int]:
    """Record ``det`` as this node's part of its step (blocking).

    ``whole``: the detector says the part is the whole checkpoint (it completes a step with
    no expectation). ``marked`` (default: ``whole``): the part holds the format's completion
    marker. ``expect`` is what the part says the step holds. A node's unmarked part of a
    waiting step is extended by a marked recording (the marker landed after the node's
    shards were recorded).

    The part is recorded without locking the step's row (every node's part would queue on
    it). A part that sees the step complete (the single node's, or the last of many) locks
    it and completes it in the same transaction; any other looks again once committed
    (``complete_parts``), since two last parts committing together each miss the other.
    Returns what happened and the row
    id. Raises Unstable when the node's part was recorded meanwhile by another pass (the
    caller looks again later), CatalogError when the catalog fails.
    """
    marked = whole if marked is None else marked
    try:
        with db.session() as session:
            recorded = _record_part(session, config, det, whole=whole, marked=marked, expect=expect)
            outcome, checkpoint_id, created = recorded[0], recorded[1].id, recorded[2]
    except CatalogConflict as exc:  # the detector and the waiting sweep recorded this part at once
        raise Unstable(f"this node's part of {det.relpath} was being recorded meanwhile") from exc
    if outcome is not Outcome.PART:
        return outcome, checkpoint_id
    location = str(config.tier0.path.resolve() / det.relpath)
    tiers = [t.name for t in config.tiers]
    if complete_parts(db, checkpoint_id, tiers, location, actor=det.actor):
        return (Outcome.CREATED if created else Outcome.COMPLETED), checkpoint_id
    return Outcome.PART, checkpoint_id


def _record_part(
    session: Session,
    config: Config,
    det: Detection,
    *,
    whole: bool,
    marked: bool,
    expect: Expectation | None,
) -> tuple[Outcome, Checkpoint, bool]:
    """Record the part, and complete the step if it looks complete from here (``_settle_here``).

    Returns what happened, the row, and whether this call inserted it.
    """
    now = utcnow()
    row, created = _step_row(session, config, det, now)
    if row.state != CheckpointState.WAITING.value:
        return Outcome.EXISTING, row, created
    mark_waiting(row, now)
    part = find_part(session, row.id, config.node)
    if part is not None and (part.marked or not marked) and not unheld_files(session, row, det.files):
        return Outcome.EXISTING, row, created
    if expect:
        set_expectation(row, expect)
    if det.metrics:
        merge_metrics(row, det.metrics)
    tiers = [t.name for t in config.tiers]
    if part is None:
        add_part(session, row, config.node, det.files, tiers, now=now, marked=marked)
    else:  # the marker, or a late rank's file, landed beside shards recorded as its part
        extend_part(session, row, part, det.files, tiers[0], marked=marked)
    record_directories(session, row.id, det.directories)
    outcome = Outcome.PART
    if _settle_here(session, row, config, det, whole=whole, now=now):
        outcome = Outcome.CREATED if created else Outcome.COMPLETED
    elif created:  # a new waiting step: the other daemons' sweeps look (and poll while they owe it)
        notify_steps(session, config.node)
    append_event(
        session,
        actor=det.actor,
        action=det.action,
        checkpoint_id=row.id,
        reason=det.reason,
        detail={**_audit_detail(det, outcome), "node": config.node},
    )
    return outcome, row, created


def _step_row(session: Session, config: Config, det: Detection, now: datetime) -> tuple[Checkpoint, bool]:
    """The step's row, inserted as waiting if there is none yet; and whether this call inserted it.

    The run's row is created only with the step's (a step found at the same path under
    another run leaves no empty run behind).
    """
    found = find_step(session, find_run(session, det.run), det.step, det.relpath, config.node)
    if found is not None:
        return found, False
    run = get_or_create_run(session, det.run)
    waiting = CheckpointState.WAITING.value
    row = insert_checkpoint(
        session, run, det.step, det.relpath, det.format, config.node, state=waiting, waiting_since=now
    )
    if row is not None:
        return row, True
    found = find_step(session, run, det.step, det.relpath, config.node)  # another writer was first
    assert found is not None
    return found, False


def _settle_here(
    session: Session, row: Checkpoint, config: Config, det: Detection, *, whole: bool, now: datetime
) -> bool:
    """Complete the step in the recording's transaction when it looks complete from here.

    Only then is its row locked (and the step checked again under the lock): the single
    node's step, or the part that finds every other committed. Parts that do not see the
    step complete take no lock; ``complete_parts`` looks again once they committed.
    """
    session.flush()
    if missing_of(session, row) if has_expectation(row) else not whole:
        return False
    locked = lock_checkpoint(session, row.id)
    if locked is None:
        return False
    location = str(config.tier0.path.resolve() / det.relpath)
    tiers = [t.name for t in config.tiers]
    return settle_step(session, locked, tiers, whole=whole, location=location, now=now)


def _audit_detail(det: Detection, outcome: Outcome) -> dict[str, Any]:
    return {
        "run": det.run,
        "step": det.step,
        "format": det.format,
        "path": det.relpath,
        "files": len(det.files),
        "bytes": sum(f.size for f in det.files),
        "outcome": outcome.value,
        **det.detail,
    }


def write_waiting(
    db: Database,
    config: Config,
    *,
    run: str,
    step: int,
    fmt: str,
    relpath: str,
    actor: str,
    reason: str,
    detail: Mapping[str, Any] | None = None,
    expect: Expectation | None = None,
) -> tuple[Outcome, int]:
    """Record an announced step whose files the detector does not accept yet (blocking).

    ``detail`` joins the audit event's; ``expect`` (the notify call's world size or file
    list) is set on the step, whether it is new or already waiting.

    Raises CatalogError when the catalog fails.
    """
    with db.session() as session:
        row = find_step(session, find_run(session, run), step, relpath, config.node)
        if row is not None:
            _expect_more(session, row.id, config, expect)
            return Outcome.EXISTING, row.id
        run_row = get_or_create_run(session, run)  # only now: a step is inserted under it
        waiting = CheckpointState.WAITING.value
        row = insert_checkpoint(
            session, run_row, step, relpath, fmt, config.node, state=waiting, waiting_since=utcnow()
        )
        if row is None:  # another writer recorded the step since we looked
            existing = find_step(session, run_row, step, relpath, config.node)
            assert existing is not None
            _expect_more(session, existing.id, config, expect)
            return Outcome.EXISTING, existing.id
        if expect:
            set_expectation(row, expect)
        notify_steps(session, config.node)  # at commit: the other daemons' sweeps may owe it a part
        event = {
            "run": run,
            "step": step,
            "format": fmt,
            "path": relpath,
            "state": "waiting",
            **(detail or {}),
        }
        append_event(
            session, actor=actor, action="notified", checkpoint_id=row.id, reason=reason, detail=event
        )
        return Outcome.CREATED, row.id


def write_refused(
    db: Database,
    *,
    refused: Refused,
    run: str,
    step: int,
    fmt: str,
    relpath: str,
    actor: str,
    checkpoint_id: int | None = None,
) -> None:
    """Audit a refused checkpoint (action ``refused``, with the offending entries) (blocking).

    ``checkpoint_id`` is the waiting row of a notified step, if there is one. Raises
    CatalogError when the catalog fails.
    """
    detail = {
        "run": printable(run),
        "step": step,
        "format": fmt,
        "path": printable(relpath),
        "offending": refused.offending,
        "count": refused.count,
    }
    with db.session() as session:
        append_event(
            session,
            actor=actor,
            action="refused",
            checkpoint_id=checkpoint_id,
            reason=str(refused),
            detail=detail,
        )


def _expect_more(session: Session, checkpoint_id: int, config: Config, expect: Expectation | None) -> None:
    """A waiting step told what it expects: set it, and complete the step if that is all there."""
    if not expect:
        return
    row = lock_checkpoint(session, checkpoint_id)
    if row is None or row.state != CheckpointState.WAITING.value or not set_expectation(row, expect):
        return
    location = str(config.tier0.path.resolve() / row.path)
    settle_step(session, row, [t.name for t in config.tiers], whole=False, location=location)


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
    detail: Mapping[str, Any] | None = None,
    expect: Expectation | None = None,
) -> tuple[Outcome, int]:
    """Hash a verdict's files, check nothing moved meanwhile, and record them as this node's part.

    On a shared tier 0 the recording is claimed first (``catalog.recording``): a step another
    daemon records or recorded is not hashed again (Unstable, or EXISTING).

    A complete verdict is the whole checkpoint; a partial one (``Verdict.partial``) is this
    node's part of a step that spans nodes, never complete on its own. ``recheck`` runs
    the detector again after hashing: the verdict must be the same kind with exactly the
    same files, sizes and mtimes. Raises Unstable otherwise, Refused (nothing opened,
    nothing written) when the checkpoint holds what tierd will not read (``hostile``),
    OSError when a file became a symlink or no regular file while it was hashed, and
    CatalogError when the catalog fails. ``detail`` joins the audit event's; ``expect``
    adds to what the format says.
    """
    tier0 = ctx.config.tier0.path.resolve()
    await blocking(check_checkpoint, tier0, relpath, verdict.files)
    if ctx.config.tier0.shared:  # every daemon sees this step: one of them records it
        recorded = await _claim(ctx, run=run, step=step, relpath=relpath, fmt=fmt)
        if recorded is not None:
            return Outcome.EXISTING, recorded
    hashed, directories = await _hash_unchanged(verdict, tier0, recheck)
    det = Detection(
        run,
        step,
        fmt,
        relpath,
        hashed,
        actor,
        action,
        verdict.reason,
        verdict.metrics,
        dict(detail or {}),
        directories,
    )
    return await _write(ctx, det, verdict, expect)


async def _write(
    ctx: Context, det: Detection, verdict: Verdict, expect: Expectation | None
) -> tuple[Outcome, int]:
    """Record the hashed detection (``write_complete``); a new checkpoint wakes the pipeline.

    A part of a step still waiting for others wakes peer replication (it is sent to its peers
    at once, while no tier's hop copies it before the step completes) and this node's waiting
    sweep: a part recorded before its marker landed is the sweep's to extend once it does (the
    scans skip a recorded path), and it polls for that only while it knows it owes the step.
    """
    write = functools.partial(
        write_complete,
        ctx.db,
        ctx.config,
        det,
        whole=verdict.complete,
        marked=verdict.vouched,
        expect=_merged(verdict, expect),
    )
    outcome, checkpoint_id = await blocking(write)
    if outcome not in (Outcome.EXISTING, Outcome.PART):
        ctx.metrics.detected.labels(det.format).inc()
        ctx.wake_pipeline(checkpoint_id)
    elif outcome is Outcome.PART:
        ctx.peer_wakeup.set()
        ctx.wake_waiting()
    return outcome, checkpoint_id


async def _claim(ctx: Context, *, run: str, step: int, relpath: str, fmt: str) -> int | None:
    """Claim a step's recording on a shared tier 0: its id if recorded; Unstable while another records it."""
    claimed, checkpoint_id = await blocking(
        claim_recording, ctx.db, run=run, step=step, relpath=relpath, fmt=fmt, node=ctx.config.node
    )
    if claimed is Claimed.DONE:
        return checkpoint_id
    if claimed is Claimed.BUSY:
        raise Unstable("another daemon is recording this step")
    return None


async def _hash_unchanged(
    verdict: Verdict, tier0: Path, recheck: Callable[[], Verdict] | None
) -> tuple[tuple[HashedFile, ...], tuple[DirectoryStat, ...]]:
    """The verdict's files hashed and their directories; Unstable if ``recheck`` then disagrees."""
    hashed = await hash_stable(verdict.files, tier0)
    directories = await _directories(tier0, hashed)
    if recheck is not None:
        again = await blocking(recheck)
        if again.complete != verdict.complete or set(again.files) != set(verdict.files):
            raise Unstable("the checkpoint changed while it was hashed")
    return hashed, directories


async def _directories(tier0: Path, files: tuple[HashedFile, ...]) -> tuple[DirectoryStat, ...]:
    """The owners and modes of the directories ``files`` lie in. Raises Unstable, OSError."""
    try:
        return await blocking(stat_directories, tier0, [f.relpath for f in files])
    except FileNotFoundError as exc:
        raise Unstable(f"{exc.filename or 'a directory'} vanished while the step was recorded") from None


def _merged(verdict: Verdict, expect: Expectation | None) -> Expectation | None:
    """The format's expected files win; the rest of ``expect`` (ranks, nodes) is kept."""
    if verdict.expected is None:
        return expect
    base = expect or Expectation()
    return Expectation(tuple(verdict.expected), base.ranks, base.nodes, "format")

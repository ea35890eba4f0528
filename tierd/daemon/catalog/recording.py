"""Who records a step on a shared tier 0, so every daemon watching it does not hash it too.

When every daemon of a fleet watches one shared directory, each sees the same step complete
at about the same time. Before hashing, a daemon claims the recording: it inserts the step
``waiting`` under its own node name (or takes over a claim older than the lease, left by a
daemon that died); the others see the claim and leave the step alone. The claim is the
step's row itself, so finishing the recording (``write_complete``) ends it, in one commit.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

from sqlalchemy import select, update

from tierd.daemon.catalog.checkpoints import find_run, find_step, get_or_create_run, insert_checkpoint
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import lease_clock
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, Part

__all__ = ["RECORDING_LEASE_SECONDS", "Claimed", "claim_recording"]

#: How long a claim holds before another daemon may take the recording over.
RECORDING_LEASE_SECONDS = 120.0


class Claimed(enum.Enum):
    """What ``claim_recording`` found."""

    MINE = "mine"  # record it now
    BUSY = "busy"  # another daemon is recording it
    DONE = "done"  # already recorded


def claim_recording(
    db: Database,
    *,
    run: str,
    step: int,
    relpath: str,
    fmt: str,
    node: str,
    lease_seconds: float = RECORDING_LEASE_SECONDS,
    now: datetime | None = None,
) -> tuple[Claimed, int]:
    """Claim the recording of a step on a shared tier 0; returns what was found and the row id.

    Raises CatalogError when the catalog fails.
    """
    with db.session() as session:
        now = now or lease_clock(session)
        row = find_step(session, find_run(session, run), step, relpath, node)
        if row is None:
            run_row = get_or_create_run(session, run)  # only with a step under it
            waiting = CheckpointState.WAITING.value
            row = insert_checkpoint(session, run_row, step, relpath, fmt, node, state=waiting)
            if row is not None:
                row.waiting_since = now
                return Claimed.MINE, row.id
            row = find_step(session, run_row, step, relpath, node)
            assert row is not None
        if row.state != CheckpointState.WAITING.value:
            return Claimed.DONE, row.id
        if session.scalar(select(Part.id).where(Part.checkpoint_id == row.id).limit(1)) is not None:
            return Claimed.DONE, row.id
        if row.node == node:
            return Claimed.MINE, row.id
        stale = row.waiting_since is None or row.waiting_since < now - timedelta(seconds=lease_seconds)
        if not stale:
            return Claimed.BUSY, row.id
        taken = session.execute(  # only if no other daemon took it over since we looked
            update(Checkpoint)
            .where(Checkpoint.id == row.id, Checkpoint.node == row.node)
            .values(node=node, waiting_since=now)
            .execution_options(synchronize_session=False)
        )
        return (Claimed.MINE if getattr(taken, "rowcount", 0) == 1 else Claimed.BUSY), row.id

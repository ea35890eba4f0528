"""Parts of a step, what the step expects, and when it is complete.

A *part* is the files of one step that one node holds (its node-local tier 0), recorded by
that node's daemon. A step is ``complete`` when its parts together hold every expected
file; until then it is ``waiting`` (since ``waiting_since``) and ``missing_of`` says what
it lacks. The expectation, strongest first:

- ``expected_files`` (relative to the step's path): from the format's own metadata (DCP's
  ``.metadata`` names every storage file) or the notify call's ``expected_files``;
- ``expected_ranks``: the notify call's ``world_size``; DCP names each rank's shards
  ``__R_I.distcp``, so every rank below it must have one (other formats: not used);
- ``expected_nodes``: the watch's ``nodes: N``, so N parts, one of them *marked* (recorded
  by the node whose detector saw the format's completion marker: a count of parts alone
  cannot tell a coordinator's shards recorded before its marker landed from a whole step).

With no expectation at all, a step is complete when a node's detector says its part is the
whole checkpoint (the single-node case). Nodes record their parts without locking the
step's row (32 nodes' parts would queue on it). A part that sees the step complete locks the
row and completes it in its own transaction; every other part looks again once committed
(``complete_parts``), so of parts committing together, the last to commit sees them all.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tierd.daemon import checksum
from tierd.daemon.catalog.audit import append_event
from tierd.daemon.catalog.checkpoints import FileFields
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import insert_ignoring_duplicates
from tierd.daemon.catalog.models import (
    Checkpoint,
    CheckpointState,
    File,
    Part,
    PartReplica,
    ReplicaState,
    utcnow,
)
from tierd.daemon.catalog.part_replicas import part_replica
from tierd.daemon.catalog.peer_copies import reopen_copies
from tierd.daemon.catalog.replicas import add_first_replicas

__all__ = [
    "MISSING_LIMIT",
    "Expectation",
    "Missing",
    "add_part",
    "complete_parts",
    "extend_part",
    "find_part",
    "has_expectation",
    "lacking_files",
    "unheld_files",
    "lock_checkpoint",
    "missing_of",
    "missing_ranks",
    "missing_while_waiting",
    "nodes_of_parts",
    "set_expectation",
    "settle_step",
]

#: At most this many missing files or ranks are listed (the counts are always exact).
MISSING_LIMIT = 1000
DCP_METADATA = ".metadata"
_FILES = File.metadata.tables[File.__tablename__]
_RANK_SHARD = re.compile(r"(?:^|/)__(\d+)_\d+\.distcp$")
_STRENGTH = {"config": 1, "notify": 2, "format": 3}


@dataclass(frozen=True)
class Expectation:
    """What a recorder or the notify call says the step holds; None: says nothing about it."""

    files: tuple[str, ...] | None = None
    ranks: int | None = None
    nodes: int | None = None
    source: str = "config"

    def __bool__(self) -> bool:
        return self.files is not None or self.ranks is not None or self.nodes is not None


@dataclass(frozen=True)
class Missing:
    """What an incomplete step lacks: files, ranks (first ``MISSING_LIMIT``), and how many parts."""

    files: tuple[str, ...] = ()
    file_count: int = 0
    ranks: tuple[int, ...] = ()
    rank_count: int = 0
    nodes: int = 0
    nodes_heard: tuple[str, ...] = field(default_factory=tuple)
    #: No part holds the format's completion marker yet (a step expecting a count of parts).
    marker: bool = False

    def __bool__(self) -> bool:
        return bool(self.file_count or self.rank_count or self.nodes or self.marker)


def lock_checkpoint(session: Session, checkpoint_id: int) -> Checkpoint | None:
    """The checkpoint row, locked until the transaction ends (PostgreSQL; SQLite locks all).

    ``FOR NO KEY UPDATE``: rows that refer to the checkpoint (parts, files, audit events)
    are still inserted meanwhile; their foreign keys only share-lock its key.
    """
    return session.scalars(
        select(Checkpoint)
        .where(Checkpoint.id == checkpoint_id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    ).one_or_none()


def set_expectation(row: Checkpoint, exp: Expectation) -> bool:
    """Add what ``exp`` says to the row; a weaker source never overrides a stronger one's files.

    Returns whether anything changed.
    """
    changed = False
    strength = _STRENGTH.get(exp.source, 0)
    if exp.files is not None and strength >= _STRENGTH.get(row.expected_source or "", 0):
        files = sorted(set(exp.files))
        if row.expected_files != files:
            row.expected_files, row.expected_source, changed = files, exp.source, True
    if exp.ranks is not None and row.expected_ranks != exp.ranks:
        row.expected_ranks, changed = exp.ranks, True
        row.expected_source = row.expected_source if row.expected_files is not None else exp.source
    if exp.nodes is not None and row.expected_nodes is None:
        row.expected_nodes, changed = exp.nodes, True
        row.expected_source = row.expected_source or exp.source
    return changed


def find_part(session: Session, checkpoint_id: int, node: str) -> Part | None:
    """The part ``node`` recorded of the checkpoint, or None."""
    return session.scalars(
        select(Part).where(Part.checkpoint_id == checkpoint_id, Part.node == node)
    ).one_or_none()


def add_part(
    session: Session,
    row: Checkpoint,
    node: str,
    files: Sequence[FileFields],
    tiers: Sequence[str],
    *,
    now: datetime,
    marked: bool = False,
) -> Part:
    """Record ``node``'s part with its files and a replica per tier (verified on tier 0).

    A file another part already holds stays in that part (the first recorder keeps it).
    ``marked``: the node's detector saw the checkpoint complete (its completion marker).
    """
    kept = unheld_files(session, row, files)
    part = Part(
        checkpoint_id=row.id,
        node=node,
        file_count=len(kept),
        total_bytes=sum(f.size for f in kept),
        recorded_at=now,
        marked=marked,
    )
    session.add(part)
    session.flush()
    _insert_files(session, row, part, kept)
    session.add_all(
        PartReplica(
            part_id=part.id,
            tier=tier,
            state=(ReplicaState.VERIFIED if index == 0 else ReplicaState.PENDING).value,
            bytes_done=part.total_bytes if index == 0 else 0,
            verified_at=now if index == 0 else None,
        )
        for index, tier in enumerate(tiers)
    )
    return part


def extend_part(
    session: Session, row: Checkpoint, part: Part, files: Sequence[FileFields], tier0: str, *, marked: bool
) -> int:
    """Add to a part of a waiting step the files it did not hold when it was recorded.

    Either the format's completion marker landed beside shards the node had recorded (it
    cannot know it is the coordinator until then: ``marked``, and the part becomes marked), or
    a file the step expects appeared on the node after its part was recorded (a rank that
    wrote late). The tier-0 replica counts the new bytes. No tier's hop copies a part before
    its step completes; the part's peer copies (made as soon as it was recorded) are reopened
    for the new files (``reopen_copies``). Returns how many files were added.
    """
    kept = unheld_files(session, row, files)
    part.file_count += len(kept)
    part.total_bytes += sum(f.size for f in kept)
    _insert_files(session, row, part, kept)
    part.marked = part.marked or marked
    if (local := part_replica(session, part.id, tier0)) is not None:
        local.bytes_done = part.total_bytes
    if kept:
        reopen_copies(session, part.id)
    return len(kept)


def unheld_files(session: Session, row: Checkpoint, files: Sequence[FileFields]) -> list[FileFields]:
    """The ``files`` no part of the step holds yet."""
    taken = set(session.scalars(select(File.relpath).where(File.checkpoint_id == row.id)))
    return [f for f in files if f.relpath not in taken]


def _insert_files(session: Session, row: Checkpoint, part: Part, files: Sequence[FileFields]) -> None:
    """Insert ``files`` into ``part`` (counted in it already), skipping any another part took since.

    Parts are recorded without the step's row locked: two nodes holding the same path (a
    layout that repeats a file on every node) may both try to add it. The first keeps it,
    and the other part's counts drop it.
    """
    if not files:
        return
    values = [
        {
            "checkpoint_id": row.id,
            "part_id": part.id,
            "relpath": f.relpath,
            "size": f.size,
            "mtime_ns": f.mtime_ns,
            "checksum_algo": checksum.ALGORITHM,
            "checksum": f.checksum,
            "uid": f.uid,
            "gid": f.gid,
            "mode": f.mode,
        }
        for f in files
    ]
    statement = insert_ignoring_duplicates(session, _FILES).returning(_FILES.c.relpath)
    stored = set(session.scalars(statement, values))
    if len(stored) == len(files):
        return
    lost = [f for f in files if f.relpath not in stored]
    part.file_count -= len(lost)
    part.total_bytes -= sum(f.size for f in lost)


def missing_of(session: Session, row: Checkpoint) -> Missing:
    """What the step still lacks against its expectation (nothing when it has none)."""
    recorded = set(session.scalars(select(File.relpath).where(File.checkpoint_id == row.id)))
    nodes = tuple(session.scalars(select(Part.node).where(Part.checkpoint_id == row.id).order_by(Part.node)))
    prefix = f"{row.path}/"
    if row.expected_files is not None:
        lacking = [f for f in row.expected_files if prefix + f not in recorded]
        return Missing(tuple(lacking[:MISSING_LIMIT]), len(lacking), nodes_heard=nodes)
    if row.expected_ranks is not None and row.format == "dcp":
        present = {int(m.group(1)) for r in recorded if (m := _RANK_SHARD.search(r))}
        ranks, rank_count = missing_ranks(row.expected_ranks, present)
        # Only .metadata makes the shards a checkpoint; once recorded, its file list takes over.
        meta = () if prefix + DCP_METADATA in recorded else (DCP_METADATA,)
        return Missing(meta, len(meta), ranks, rank_count, nodes_heard=nodes)
    if row.expected_nodes is not None:
        marked = session.scalar(select(func.count()).where(Part.checkpoint_id == row.id, Part.marked))
        parts_to_come = max(0, row.expected_nodes - len(nodes))
        return Missing(nodes=parts_to_come, nodes_heard=nodes, marker=not marked)
    return Missing(nodes_heard=nodes)


def nodes_of_parts(session: Session, part_ids: Collection[int]) -> set[str]:
    """The nodes holding the parts ``part_ids`` (each node once)."""
    return set(session.scalars(select(Part.node).where(Part.id.in_(part_ids)).distinct()))


def missing_while_waiting(session: Session, row: Checkpoint) -> Missing | None:
    """What the step lacks while it is ``waiting`` (``missing_of``); None in any other state."""
    if row.state != CheckpointState.WAITING.value:
        return None
    return missing_of(session, row)


def missing_ranks(expected: int, present: Iterable[int]) -> tuple[tuple[int, ...], int]:
    """The first ``MISSING_LIMIT`` ranks below ``expected`` not in ``present``, and how many there are.

    Never builds ``range(expected)``: a catalog row may hold any ``expected_ranks`` (one
    written before notify bounded ``world_size`` held 2**31 - 1), and this runs on every
    look at a waiting step. Time and memory grow with ``present`` and the limit only.
    """
    held = {rank for rank in present if 0 <= rank < expected}
    first = itertools.islice((rank for rank in range(expected) if rank not in held), MISSING_LIMIT)
    return tuple(first), max(0, expected - len(held))


def lacking_files(session: Session, checkpoint_id: int) -> list[str]:
    """The files a waiting step's expected list names that no part holds (relative to the step)."""
    row = session.get(Checkpoint, checkpoint_id)
    if row is None or row.state != CheckpointState.WAITING.value or row.expected_files is None:
        return []
    recorded = set(session.scalars(select(File.relpath).where(File.checkpoint_id == row.id)))
    return [f for f in row.expected_files if f"{row.path}/{f}" not in recorded]


def has_expectation(row: Checkpoint) -> bool:
    """Whether the step says what it holds (files, DCP ranks, or a count of parts)."""
    ranks = row.expected_ranks is not None and row.format == "dcp"
    return row.expected_files is not None or ranks or row.expected_nodes is not None


def settle_step(
    session: Session,
    row: Checkpoint,
    tiers: Sequence[str],
    *,
    whole: bool,
    location: str,
    now: datetime | None = None,
) -> bool:
    """Mark a waiting step complete if its parts now hold everything; True when it did.

    ``whole``: the recorder's detector said its part is the whole checkpoint, which is what
    completes a step with no expectation. Completion sums the parts, sets the creation time
    from the newest file, and adds the step's replicas (verified on tier 0 at ``location``).
    """
    if row.state != CheckpointState.WAITING.value:
        return False
    if has_expectation(row):
        if missing_of(session, row):
            return False
    elif not whole:
        return False
    now = now or utcnow()
    files = list(session.scalars(select(File).where(File.checkpoint_id == row.id)))
    if not files:
        return False
    _complete(row, files, now)
    add_first_replicas(session, row.id, tiers, location=location, verified_at=now)
    return True


def _complete(row: Checkpoint, files: Iterable[File], now: datetime) -> None:
    listed = list(files)
    newest = max((f.mtime_ns for f in listed), default=0)
    row.state = CheckpointState.COMPLETE.value
    row.total_bytes = sum(f.size for f in listed)
    row.file_count = len(listed)
    row.created_at = datetime.fromtimestamp(newest / 1e9, UTC) if newest else now
    row.completed_at = now
    row.waiting_since = None


def complete_parts(
    db: Database,
    checkpoint_id: int,
    tiers: Sequence[str],
    location: str,
    *,
    actor: str,
    quiet_for: timedelta | None = None,
) -> bool:
    """Complete a waiting step whose parts hold all it expects; whether this call did.

    Called after a part's own transaction committed, so the part that commits last sees
    every other; only a step that looks complete is then locked and checked again. The
    waiting sweep calls it too, for a step whose last recorder died in between, with
    ``quiet_for``: only once no part was recorded for that long (else the sweep would race
    the last recorder for a step that is not late). ``location`` is the step's directory on
    this node's tier 0. Raises CatalogError.
    """
    with db.read_session() as session:
        row = session.get(Checkpoint, checkpoint_id)
        if row is None or row.state != CheckpointState.WAITING.value or not has_expectation(row):
            return False
        if quiet_for is not None and _newest_part(session, checkpoint_id) > utcnow() - quiet_for:
            return False
        if missing_of(session, row):
            return False
    with db.session() as session:
        row = lock_checkpoint(session, checkpoint_id)
        if row is None or not settle_step(session, row, tiers, whole=False, location=location):
            return False
        append_event(
            session,
            actor=actor,
            action="completed",
            checkpoint_id=checkpoint_id,
            reason="every part the step expects is recorded",
            detail={"files": row.file_count, "bytes": row.total_bytes},
        )
        return True


def _newest_part(session: Session, checkpoint_id: int) -> datetime:
    """When the step's newest part was recorded (its recorder's clock)."""
    newest = session.scalar(select(func.max(Part.recorded_at)).where(Part.checkpoint_id == checkpoint_id))
    return newest if newest is not None else datetime.min.replace(tzinfo=UTC)

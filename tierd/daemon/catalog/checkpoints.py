"""Runs, checkpoints and their files: record, look up, list.

Detection records steps here (``find_run``, ``find_step``, ``get_or_create_run``,
``insert_checkpoint``, ``complete_checkpoint``), the reconcile scan and the in-memory index
read them back, and the API lists and shows them (``list_checkpoints``, ``get_checkpoint``,
``load_checkpoint``). Inserts that another daemon may race (a run, a step) run in a SAVEPOINT
and report the lost race instead of failing the caller's transaction. A run's row is created
only in the transaction that inserts a step under it, so a call that records nothing leaves
no empty run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from sqlalchemy import ColumnElement, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, selectinload

from tierd.daemon import checksum
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, CheckpointState, File, Part, Replica, ReplicaState, Run
from tierd.errors import NotFound

__all__ = [
    "FileFields",
    "checkpoint_path",
    "checkpoint_state",
    "complete_checkpoint",
    "complete_checkpoints_with_files",
    "creation_times",
    "files_of",
    "files_on_node",
    "find_checkpoint",
    "find_run",
    "find_step",
    "get_checkpoint",
    "get_or_create_run",
    "insert_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "mark_checkpoint_changed",
    "mark_waiting",
    "merge_metrics",
    "recorded_steps",
    "step_id_and_state",
    "steps_awaiting_part",
    "steps_to_grow",
    "update_file_mtimes",
    "waiting_steps",
]


class FileFields(Protocol):
    """A file to record: path relative to the tier-0 root, size, mtime, checksum, owner and mode."""

    @property
    def relpath(self) -> str:
        """Path relative to the tier-0 root."""

    @property
    def size(self) -> int:
        """Bytes."""

    @property
    def mtime_ns(self) -> int:
        """Modification time in nanoseconds."""

    @property
    def checksum(self) -> str:
        """The checksum (base64)."""

    @property
    def uid(self) -> int | None:
        """Owner at first sight (None: not known)."""

    @property
    def gid(self) -> int | None:
        """Group at first sight (None: not known)."""

    @property
    def mode(self) -> int | None:
        """Permission bits (``stat.S_IMODE``) at first sight (None: not known)."""


def find_run(session: Session, name: str) -> Run | None:
    """The run named ``name``, or None."""
    return session.scalars(select(Run).where(Run.name == name)).one_or_none()


def get_or_create_run(session: Session, name: str) -> Run:
    """The run named ``name``, created if needed (safe against a concurrent creator).

    Call it only right before inserting a step under the run, in the same transaction.
    """
    run = find_run(session, name)
    if run is not None:
        return run
    try:
        with session.begin_nested():
            run = Run(name=name)
            session.add(run)
    except sa_exc.IntegrityError:
        run = session.scalars(select(Run).where(Run.name == name)).one()
    return run


def find_checkpoint(session: Session, checkpoint_id: int) -> Checkpoint | None:
    """The checkpoint row, or None."""
    return session.get(Checkpoint, checkpoint_id)


def find_step(session: Session, run: Run | None, step: int, relpath: str, node: str) -> Checkpoint | None:
    """The row for this step: by run and step, else the row recorded at the same path.

    ``run`` is None for a run not recorded yet. A path names one step, except
    nvidia-resiliency-ext's session directory (one per node, holding every iteration), where
    the step must match too.
    """
    if run is not None:
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


def insert_checkpoint(
    session: Session,
    run: Run,
    step: int,
    relpath: str,
    fmt: str,
    node: str,
    *,
    state: str | None = None,
    waiting_since: datetime | None = None,
) -> Checkpoint | None:
    """Add a checkpoint row (in ``state``, else the default).

    Returns None when a concurrent writer recorded the step first.
    """
    row = Checkpoint(
        run_id=run.id, step=step, path=relpath, format=fmt, node=node, waiting_since=waiting_since
    )
    if state is not None:
        row.state = state
    try:
        with session.begin_nested():
            session.add(row)
    except sa_exc.IntegrityError:
        return None
    return row


def complete_checkpoint(
    session: Session,
    row: Checkpoint,
    files: Sequence[FileFields],
    *,
    created_at: datetime,
    completed_at: datetime,
    metrics: Mapping[str, float] | None = None,
) -> None:
    """Mark ``row`` complete with ``files`` (checksums taken with this build's algorithm).

    ``metrics`` the format wrote join those already set (by a notify call, which wins).
    """
    row.state = CheckpointState.COMPLETE.value
    if metrics:
        row.metrics = {**metrics, **(row.metrics or {})}
    row.total_bytes = sum(f.size for f in files)
    row.file_count = len(files)
    row.created_at = created_at
    row.completed_at = completed_at
    for f in files:
        session.add(
            File(
                checkpoint_id=row.id,
                relpath=f.relpath,
                size=f.size,
                mtime_ns=f.mtime_ns,
                checksum_algo=checksum.ALGORITHM,
                checksum=f.checksum,
                uid=f.uid,
                gid=f.gid,
                mode=f.mode,
            )
        )


def mark_checkpoint_changed(row: Checkpoint) -> None:
    """Its files changed after they were recorded."""
    row.state = CheckpointState.CHANGED.value


def mark_waiting(row: Checkpoint, since: datetime) -> None:
    """The step waits for more of its files from ``since`` on, unless it was waiting already."""
    if row.waiting_since is None:
        row.waiting_since = since


def merge_metrics(row: Checkpoint, metrics: Mapping[str, float]) -> None:
    """Metrics a format wrote join those already set (by a notify call, which wins)."""
    row.metrics = {**metrics, **(row.metrics or {})}


def update_file_mtimes(session: Session, mtimes: Mapping[int, int]) -> None:
    """Set each file's (by id) mtime; files gone meanwhile are skipped."""
    for file_id, mtime_ns in mtimes.items():
        if (f := session.get(File, file_id)) is not None:
            f.mtime_ns = mtime_ns


def checkpoints_at(session: Session, paths: Sequence[str]) -> list[int]:
    """The ids of the checkpoints at any of ``paths`` (relative to tier 0) not deleted there."""
    if not paths:
        return []
    found = session.scalars(
        select(Checkpoint.id)
        .join(Replica, Replica.checkpoint_id == Checkpoint.id)
        .where(Checkpoint.path.in_(list(paths)), Replica.tier_index == 0)
        .where(Replica.state != ReplicaState.DELETED.value)
        .distinct()
        .limit(16)
    )
    return [int(i) for i in found]


def files_of(session: Session, checkpoint_id: int) -> list[File]:
    """The checkpoint's files by relative path."""
    query = select(File).where(File.checkpoint_id == checkpoint_id).order_by(File.relpath)
    return list(session.scalars(query))


def creation_times(session: Session, checkpoint_ids: Sequence[int]) -> list[tuple[int, datetime]]:
    """(id, created_at) of the given checkpoints."""
    query = select(Checkpoint.id, Checkpoint.created_at).where(Checkpoint.id.in_(checkpoint_ids))
    return [(checkpoint_id, created_at) for checkpoint_id, created_at in session.execute(query)]


def step_id_and_state(db: Database, run: str, step: int) -> tuple[int, str] | None:
    """(id, state) of the run's step, or None when it is not recorded."""
    with db.read_session() as session:
        row = session.execute(
            select(Checkpoint.id, Checkpoint.state)
            .join(Checkpoint.run)
            .where(Run.name == run, Checkpoint.step == step)
        ).first()
    return (row[0], row[1]) if row is not None else None


def checkpoint_state(db: Database, checkpoint_id: int) -> str | None:
    """The checkpoint's state, or None when there is no such checkpoint."""
    with db.read_session() as session:
        return session.scalar(select(Checkpoint.state).where(Checkpoint.id == checkpoint_id))


def checkpoint_path(db: Database, checkpoint_id: int) -> str | None:
    """The checkpoint's path (relative to the tier roots), or None when there is no such checkpoint."""
    with db.read_session() as session:
        return session.scalar(select(Checkpoint.path).where(Checkpoint.id == checkpoint_id))


def recorded_steps(db: Database, node: str | None = None) -> list[tuple[str, int, str, str]]:
    """(run, step, path, format) of every recorded (not waiting) checkpoint.

    With ``node``: also the waiting steps of which ``node`` recorded its part.
    """
    recorded: ColumnElement[bool] = Checkpoint.state != CheckpointState.WAITING.value
    if node is not None:
        recorded = recorded | Checkpoint.id.in_(select(Part.checkpoint_id).where(Part.node == node))
    with db.read_session() as session:
        rows = session.execute(
            select(Run.name, Checkpoint.step, Checkpoint.path, Checkpoint.format)
            .join(Checkpoint.run)
            .where(recorded)
        ).all()
    return [(run, step, path, fmt) for run, step, path, fmt in rows]


def steps_awaiting_part(db: Database, node: str) -> list[tuple[int, str, int, str, str, bool, bool]]:
    """(id, run, step, path, format, spans, unmarked) of the waiting steps ``node`` owes a part to.

    That is, it has no part of them, or (``unmarked``) a part recorded before its format's
    completion marker could have landed beside it. ``spans``: the step is known to span
    nodes (it has an expectation, or another node's part).
    """
    of_step = Part.checkpoint_id == Checkpoint.id  # each subquery reads only the step's own parts
    mine = select(Part.id).where(of_step, Part.node == node, Part.marked).exists()
    unmarked = select(Part.id).where(of_step, Part.node == node, ~Part.marked).exists()
    others = select(Part.id).where(of_step, Part.node != node).exists()
    spans = (
        Checkpoint.expected_files.is_not(None)
        | Checkpoint.expected_ranks.is_not(None)
        | Checkpoint.expected_nodes.is_not(None)
        | others
    )
    with db.read_session() as session:
        rows = session.execute(
            select(
                Checkpoint.id, Run.name, Checkpoint.step, Checkpoint.path, Checkpoint.format, spans, unmarked
            )
            .join(Checkpoint.run)
            .where(Checkpoint.state == CheckpointState.WAITING.value, ~mine)
        ).all()
    return [(cid, run, step, path, fmt, bool(wide), bool(un)) for cid, run, step, path, fmt, wide, un in rows]


def steps_to_grow(db: Database, node: str) -> list[tuple[int, str, int, str, str]]:
    """(id, run, step, path, format) of the waiting steps ``node`` has a part of.

    A file the step's list names may appear on the node after its part was recorded (a rank
    that wrote late): the part grows by it (``detect.service``). A step whose parts hold all
    it expects, though its last recorder died before completing it, is completed there too.
    """
    mine = select(Part.id).where(Part.checkpoint_id == Checkpoint.id, Part.node == node).exists()
    with db.read_session() as session:
        rows = session.execute(
            select(Checkpoint.id, Run.name, Checkpoint.step, Checkpoint.path, Checkpoint.format)
            .join(Checkpoint.run)
            .where(Checkpoint.state == CheckpointState.WAITING.value, mine)
        ).all()
    return [(checkpoint_id, run, step, path, fmt) for checkpoint_id, run, step, path, fmt in rows]


def waiting_steps(db: Database, node: str) -> list[tuple[int, str, int, str, str]]:
    """(id, run, step, path, format) of the waiting checkpoints of ``node``."""
    with db.read_session() as session:
        rows = session.execute(
            select(Checkpoint.id, Run.name, Checkpoint.step, Checkpoint.path, Checkpoint.format)
            .join(Checkpoint.run)
            .where(Checkpoint.node == node, Checkpoint.state == CheckpointState.WAITING.value)
        ).all()
    return [(checkpoint_id, run, step, path, fmt) for checkpoint_id, run, step, path, fmt in rows]


def complete_checkpoints_with_files(
    session: Session,
    node: str | None,
    *,
    ids: Collection[int] | None = None,
    paths: Collection[str] | None = None,
    states: Collection[CheckpointState] = (CheckpointState.COMPLETE,),
) -> Sequence[Checkpoint]:
    """Every complete checkpoint of which ``node`` holds a part (or, before parts, recorded).

    Loaded with its run, its parts and its files (every part's: see ``files_on_node``).
    ``node`` None: whoever holds it (a shared tier 0). ``ids`` or ``paths``: only those;
    ``states``: those states instead of complete only.
    """
    query = select(Checkpoint).where(Checkpoint.state.in_([s.value for s in states]))
    if node is not None:
        mine = select(Part.checkpoint_id).where(Part.node == node)
        partless = ~select(Part.id).where(Part.checkpoint_id == Checkpoint.id).exists()
        query = query.where(Checkpoint.id.in_(mine) | ((Checkpoint.node == node) & partless))
    if ids is not None:
        query = query.where(Checkpoint.id.in_(list(ids)))
    if paths is not None:
        query = query.where(Checkpoint.path.in_(list(paths)))
    return session.scalars(
        query.options(
            selectinload(Checkpoint.files), selectinload(Checkpoint.run), selectinload(Checkpoint.parts)
        )
    ).all()


def files_on_node(row: Checkpoint, node: str | None) -> list[File]:
    """The files of a loaded checkpoint that ``node``'s tier 0 holds: its part's (else all)."""
    part = next((p.id for p in row.parts if p.node == node), None)
    if part is None:
        return list(row.files)
    return [f for f in row.files if f.part_id in (part, None)]


def load_checkpoint(session: Session, checkpoint_id: int) -> Checkpoint:
    """A checkpoint with its run and replicas loaded (for the API's CheckpointOut)."""
    return session.scalars(
        select(Checkpoint)
        .where(Checkpoint.id == checkpoint_id)
        .options(
            selectinload(Checkpoint.run),
            selectinload(Checkpoint.replicas),
            selectinload(Checkpoint.holds),
            selectinload(Checkpoint.parts).selectinload(Part.replicas),
        )
        .execution_options(populate_existing=True)
    ).one()


def list_checkpoints(
    session: Session, *, run: str | None = None, step: int | None = None, limit: int = 50, offset: int = 0
) -> tuple[list[Checkpoint], int]:
    """Checkpoints newest first (by creation time, then id), with replicas loaded; and the total.

    ``run`` and ``step`` filter (together they name at most one checkpoint: ``RUN:STEP``).
    """
    query = select(Checkpoint).join(Checkpoint.run)
    if run is not None:
        query = query.where(Run.name == run)
    if step is not None:
        query = query.where(Checkpoint.step == step)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.options(
            selectinload(Checkpoint.replicas),
            selectinload(Checkpoint.run),
            selectinload(Checkpoint.holds),
            selectinload(Checkpoint.parts).selectinload(Part.replicas),
        )
        .order_by(Checkpoint.created_at.desc(), Checkpoint.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total


def get_checkpoint(session: Session, checkpoint_id: int) -> Checkpoint:
    """One checkpoint with its run, replicas, files and directories; raises NotFound."""
    row = session.scalars(
        select(Checkpoint)
        .where(Checkpoint.id == checkpoint_id)
        .options(
            selectinload(Checkpoint.replicas),
            selectinload(Checkpoint.files),
            selectinload(Checkpoint.directories),
            selectinload(Checkpoint.run),
            selectinload(Checkpoint.holds),
            selectinload(Checkpoint.parts).selectinload(Part.replicas),
        )
    ).one_or_none()
    if row is None:
        raise NotFound(f"checkpoint {checkpoint_id} does not exist")
    return row

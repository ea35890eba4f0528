"""Nodes record their parts of a step without queueing on its row (PostgreSQL).

A part takes the step's row lock only when it sees the step complete. Two last parts that
commit together each miss the other; the one that looks again after committing completes
the step, and if its daemon died first, the waiting sweep does.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tests.unit.detect.fleet import node_context, step_row
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import AuditEvent, Part, utcnow
from tierd.daemon.catalog.parts import Expectation
from tierd.daemon.context import Context
from tierd.daemon.detect.hashing import HashedFile
from tierd.daemon.detect.record import Detection, Outcome, _record_part, write_complete
from tierd.daemon.detect.service import DetectService
from tierd.daemon.detect.waiting import LATE
from tierd.errors import Unstable

STEP = 7


def _part(ctx: Context, rank: int, *, marker: bool = False) -> Detection:
    """Node ``ctx``'s shard of the step (and the coordinator's ``.metadata``), as hashed."""
    names = [f"__{rank}_0.distcp", *([".metadata"] if marker else [])]
    files = tuple(HashedFile(f"demo/step_{STEP}/{n}", 10 + rank, 1_000 + rank, f"c{rank}{n}") for n in names)
    return Detection("demo", STEP, "dcp", f"demo/step_{STEP}", files, "test", "detected", "a part")


def _record(ctx: Context, rank: int, *, marker: bool = False) -> tuple[Outcome, int]:
    det = _part(ctx, rank, marker=marker)
    expect = Expectation(nodes=3, source="config")
    return write_complete(ctx.db, ctx.config, det, whole=marker, marked=marker, expect=expect)


def _record_in(session: Session, ctx: Context, rank: int) -> Outcome:
    """Record an unmarked part in the caller's open transaction; what happened."""
    return _record_part(session, ctx.config, _part(ctx, rank), whole=False, marked=False, expect=None)[0]


def _actions(db: Database, checkpoint_id: int) -> list[str]:
    with db.read_session() as session:
        query = select(AuditEvent.action).where(AuditEvent.checkpoint_id == checkpoint_id)
        return list(session.scalars(query.order_by(AuditEvent.id)))


def _state(db: Database) -> str:
    row = step_row(db, STEP)
    assert row is not None
    return row.state


def _lock_row(db: Database, checkpoint_id: int) -> psycopg.Connection:
    """A connection holding the step's row as a settling part does, until it is closed."""
    conn = psycopg.connect(db.url.replace("postgresql+psycopg", "postgresql"))
    conn.execute("SELECT id FROM checkpoints WHERE id = %s FOR NO KEY UPDATE", (checkpoint_id,))
    return conn


def test_a_part_is_recorded_while_the_steps_row_is_locked(pg_db: Database, tmp_path: Path) -> None:
    nodes = [node_context(pg_db, tmp_path, f"n{i}", nodes=3, format="dcp") for i in range(3)]
    outcome, checkpoint_id = _record(nodes[1], 1)
    assert outcome is Outcome.PART
    holder = _lock_row(pg_db, checkpoint_id)
    try:
        done: list[Outcome] = []
        thread = threading.Thread(target=lambda: done.append(_record(nodes[2], 2)[0]))
        thread.start()
        thread.join(timeout=20)
        assert done == [Outcome.PART], "recording a part that does not complete the step waited on its row"
    finally:
        holder.close()
    assert _record(nodes[0], 0, marker=True) == (Outcome.COMPLETED, checkpoint_id)
    row = step_row(pg_db, STEP)
    assert row is not None
    assert (row.state, row.file_count, len(row.parts)) == ("complete", 4, 3)


async def test_two_last_parts_committing_together_complete_the_step(pg_db: Database, tmp_path: Path) -> None:
    nodes = [node_context(pg_db, tmp_path, f"n{i}", nodes=3, format="dcp") for i in range(3)]
    _, checkpoint_id = _record(nodes[0], 0, marker=True)
    with pg_db.session() as first:  # n1 and n2 record at once; neither sees the other's part
        seen = _record_part(
            first, nodes[1].config, _part(nodes[1], 1), whole=False, marked=False, expect=None
        )
        with pg_db.session() as second:
            other = _record_part(
                second, nodes[2].config, _part(nodes[2], 2), whole=False, marked=False, expect=None
            )
    assert (seen[0], other[0]) == (Outcome.PART, Outcome.PART)
    row = step_row(pg_db, STEP)
    assert row is not None
    assert row.state == "waiting"
    # Both daemons died before looking again. A sweep right away leaves the step to them
    # (it would race a live last recorder); once no part came for LATE, n1's sweep completes it.
    await DetectService(nodes[1]).waiting.grow_parts()
    assert _state(pg_db) == "waiting"
    with pg_db.session() as session:
        session.execute(update(Part).values(recorded_at=utcnow() - LATE))
    await DetectService(nodes[1]).waiting.grow_parts()
    row = step_row(pg_db, STEP)
    assert row is not None
    assert (row.state, row.file_count) == ("complete", 4)
    assert min(row.replicas, key=lambda r: r.tier_index).state == "verified"
    assert _actions(pg_db, checkpoint_id).count("completed") == 1
    await DetectService(nodes[2]).waiting.grow_parts()  # nothing left to do
    assert _actions(pg_db, checkpoint_id).count("completed") == 1


def test_the_last_part_completes_the_step_once_it_committed(pg_db: Database, tmp_path: Path) -> None:
    """Parts recorded by threads at once: the step ends complete, once, with every file."""
    nodes = [node_context(pg_db, tmp_path, f"n{i}", nodes=3, format="dcp") for i in range(3)]
    barrier = threading.Barrier(3)
    outcomes: list[Outcome] = []

    def record(rank: int) -> None:
        barrier.wait()
        outcomes.append(_record(nodes[rank], rank, marker=rank == 0)[0])

    threads = [threading.Thread(target=record, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(o.value for o in outcomes if o is not Outcome.PART) in (["created"], ["completed"])
    row = step_row(pg_db, STEP)
    assert row is not None
    assert (row.state, row.file_count, len(row.parts)) == ("complete", 4, 3)


def test_a_part_recorded_twice_at_once_is_unstable_for_the_second(pg_db: Database, tmp_path: Path) -> None:
    """The detector and the waiting sweep of one node record its part together: one wins."""
    nodes = [node_context(pg_db, tmp_path, f"n{i}", nodes=3, format="dcp") for i in range(3)]
    _record(nodes[0], 0, marker=True)
    errors: list[BaseException] = []

    def second() -> None:
        try:
            _record(nodes[1], 1)
        except Unstable as exc:
            errors.append(exc)

    with pg_db.session() as first:
        seen = _record_part(
            first, nodes[1].config, _part(nodes[1], 1), whole=False, marked=False, expect=None
        )
        assert seen[0] is Outcome.PART
        thread = threading.Thread(target=second)
        thread.start()
        _wait_for_a_lock_wait(pg_db)  # the second insert of the part waits on the first's key
    thread.join(timeout=20)
    assert [str(e) for e in errors] == [f"this node's part of demo/step_{STEP} was being recorded meanwhile"]
    row = step_row(pg_db, STEP)
    assert row is not None
    assert sorted(p.node for p in row.parts) == ["n0", "n1"]


def _wait_for_a_lock_wait(db: Database, timeout: float = 20.0) -> None:
    with psycopg.connect(db.url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            if waiting is not None and waiting[0]:
                return
            time.sleep(0.05)
    raise AssertionError("no statement came to wait on the first recording")

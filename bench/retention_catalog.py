"""A big catalog for the retention benchmark, written straight into the tables.

``Shape`` (10 runs x 1,000 steps, 100 files each: 10,000 checkpoints, 1,000,000 file rows,
40,000 replicas on four tiers) is inserted with Core ``insert()`` executemany in one
transaction; on PostgreSQL the files go in with ``COPY`` (psycopg), and the sequences are
moved past the ids given. No bytes exist on any tier: nothing in the timed part deletes.

What the rows hold:

- steps 100, 200, ... of each run, created over the ``span_days`` before ``now``, the runs
  interleaved in time; ids follow creation order; each completed 5 s after it was created;
- every replica ``verified`` (so the pipeline has nothing to copy), except the tier-0
  replica of one checkpoint in 200, ``deleted`` (the training job rotated it away);
- every 500th checkpoint pinned, every 1,000th (offset 250) under a legal hold (one of them
  under two), and ``eval_loss`` on every 5th step of each run (falling, with noise);
- recorded by node ``trainer``: not the benchmark daemon's node, whose detection would
  otherwise compare every recorded file with tier 0 (where none exists) at start-up.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, text

from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import Checkpoint, File, Hold, Replica, Run

__all__ = ["TIERS", "Built", "Shape", "describe_built", "fill_catalog"]

TIERS = ("nvme", "pfs", "s3", "dr")
NODE = "trainer"
SHARD_BYTES = 64 * 1024 * 1024
METADATA_BYTES = 1024 * 1024
FILE_BATCH = 100_000


@dataclass(frozen=True)
class Shape:
    """How big the catalog is."""

    runs: int = 10
    steps: int = 1000
    files: int = 100
    step_every: int = 100
    span_days: float = 60.0

    @property
    def checkpoints(self) -> int:
        """Checkpoint rows."""
        return self.runs * self.steps

    def describe(self) -> dict[str, Any]:
        """The catalog's sizes, for a result line."""
        return {
            "checkpoints": self.checkpoints,
            "file_rows": self.checkpoints * self.files,
            "replica_rows": self.checkpoints * len(TIERS),
            "runs": self.runs,
            "steps_per_run": self.steps,
            "files_per_checkpoint": self.files,
            "step_spacing": self.step_every,
            "created_over_days": self.span_days,
        }


@dataclass(frozen=True)
class Built:
    """What was written: row counts and the seconds it took."""

    seconds: float
    pinned: int
    held: int
    with_metrics: int
    tier0_deleted: int


@dataclass(frozen=True)
class _Checkpoint:
    id: int
    run_id: int
    step: int
    index: int  # the step's position in its run
    created_at: datetime

    @property
    def path(self) -> str:
        return f"run-{self.run_id:02d}/step_{self.step:08d}"


def _checkpoints(shape: Shape, now: datetime) -> list[_Checkpoint]:
    start = now - timedelta(days=shape.span_days)
    spacing = timedelta(days=shape.span_days) / shape.steps
    out: list[_Checkpoint] = []
    for index in range(shape.steps):
        for run in range(1, shape.runs + 1):
            created = start + index * spacing + timedelta(seconds=run)
            out.append(_Checkpoint(len(out) + 1, run, (index + 1) * shape.step_every, index, created))
    return out


def _checkpoint_row(c: _Checkpoint, shape: Shape, rng: random.Random) -> dict[str, Any]:
    metrics = {}
    if c.index % 5 == 4:
        metrics["eval_loss"] = round(3.0 * math.exp(-c.index / 400) + rng.uniform(0, 0.05), 5)
    return {
        "id": c.id,
        "run_id": c.run_id,
        "step": c.step,
        "path": c.path,
        "format": "dcp",
        "state": "complete",
        "node": NODE,
        "pinned": c.id % 500 == 0,
        "metrics": metrics,
        "total_bytes": (shape.files - 1) * SHARD_BYTES + METADATA_BYTES,
        "file_count": shape.files,
        "created_at": c.created_at,
        "completed_at": c.created_at + timedelta(seconds=5),
    }


def _replica_rows(c: _Checkpoint, total_bytes: int) -> list[dict[str, Any]]:
    rows = []
    for index, tier in enumerate(TIERS):
        gone = index == 0 and c.id % 200 == 7
        verified_at = c.created_at + timedelta(minutes=2 * (index + 1))
        rows.append(
            {
                "id": (c.id - 1) * len(TIERS) + index + 1,
                "checkpoint_id": c.id,
                "tier": tier,
                "tier_index": index,
                "state": "deleted" if gone else "verified",
                "location": c.path,
                "bytes_done": total_bytes,
                "verified_at": verified_at,
                "error": None,
                "delete_after": None,
                "delete_reason": None,
                "updated_at": verified_at,
            }
        )
    return rows


def _hold_rows(checkpoints: list[_Checkpoint]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for c in checkpoints:
        if c.id % 1000 != 250:
            continue
        names = ["audit-2026", "litigation-7"] if not rows else ["audit-2026"]
        for name in names:
            rows.append(
                {
                    "id": len(rows) + 1,
                    "checkpoint_id": c.id,
                    "name": name,
                    "reason": "kept for the 2026 model audit",
                    "actor": "admin",
                    "created_at": c.created_at + timedelta(hours=1),
                }
            )
    return rows


def _file_tuples(checkpoints: list[_Checkpoint], shape: Shape) -> Iterator[tuple[Any, ...]]:
    """(id, checkpoint_id, relpath, size, mtime_ns, checksum_algo, checksum) of every file."""
    file_id = 0
    for c in checkpoints:
        mtime = int(c.created_at.timestamp()) * 1_000_000_000
        for k in range(shape.files):
            last = k == shape.files - 1
            file_id += 1
            relpath = f"{c.path}/.metadata" if last else f"{c.path}/__{k}_0.distcp"
            size = METADATA_BYTES if last else SHARD_BYTES
            yield file_id, c.id, relpath, size, mtime, "crc64nvme", f"{file_id * 2654435761 % 2**64:016x}"


_FILE_COLUMNS = ("id", "checkpoint_id", "relpath", "size", "mtime_ns", "checksum_algo", "checksum")


def fill_catalog(db: Database, shape: Shape, now: datetime) -> Built:
    """Write the catalog ``Shape`` describes into a freshly migrated, empty ``db``."""
    started = time.perf_counter()
    rng = random.Random(15)
    checkpoints = _checkpoints(shape, now)
    runs = [
        {"id": r, "name": f"run-{r:02d}", "created_at": checkpoints[0].created_at}
        for r in range(1, shape.runs + 1)
    ]
    rows = [_checkpoint_row(c, shape, rng) for c in checkpoints]
    pairs = zip(checkpoints, rows, strict=True)
    replicas = [r for c, row in pairs for r in _replica_rows(c, row["total_bytes"])]
    holds = _hold_rows(checkpoints)
    with db.engine.begin() as conn:
        conn.execute(insert(Run), runs)
        conn.execute(insert(Checkpoint), rows)
        conn.execute(insert(Replica), replicas)
        if holds:
            conn.execute(insert(Hold), holds)
        if db.is_sqlite:
            _insert_files(conn, _file_tuples(checkpoints, shape))
    if not db.is_sqlite:
        _copy_files(db, _file_tuples(checkpoints, shape))
        _after_bulk_load(db)
    else:
        _checkpoint_wal(db)
    return Built(
        seconds=time.perf_counter() - started,
        pinned=sum(1 for r in rows if r["pinned"]),
        held=len({h["checkpoint_id"] for h in holds}),
        with_metrics=sum(1 for r in rows if r["metrics"]),
        tier0_deleted=sum(1 for r in replicas if r["state"] == "deleted"),
    )


def _insert_files(conn: Any, files: Iterator[tuple[Any, ...]]) -> None:
    statement = insert(File)
    batch: list[dict[str, Any]] = []
    for values in files:
        batch.append(dict(zip(_FILE_COLUMNS, values, strict=True)))
        if len(batch) == FILE_BATCH:
            conn.execute(statement, batch)
            batch = []
    if batch:
        conn.execute(statement, batch)


def _checkpoint_wal(db: Database) -> None:
    """Fold SQLite's write-ahead log into the database file (outside a transaction)."""
    raw = db.engine.raw_connection()
    try:
        raw.driver_connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
    finally:
        raw.close()


def _copy_files(db: Database, files: Iterator[tuple[Any, ...]]) -> None:
    """The file rows through PostgreSQL's ``COPY ... FROM STDIN`` (psycopg), in one transaction."""
    raw = db.engine.raw_connection()
    try:
        driver: Any = raw.driver_connection
        columns = ", ".join(_FILE_COLUMNS)
        with driver.cursor() as cursor, cursor.copy(f"COPY files ({columns}) FROM STDIN") as copy:
            for values in files:
                copy.write_row(values)
        driver.commit()
    finally:
        raw.close()


def _after_bulk_load(db: Database) -> None:
    """Sequences past the ids given, and statistics (what autovacuum would gather soon after)."""
    with db.engine.begin() as conn:
        for table in ("runs", "checkpoints", "replicas", "holds", "files"):
            conn.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
            )
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))


def describe_built(built: Built) -> dict[str, Any]:
    """The protections and metrics written, for a result line."""
    return {
        "pinned_checkpoints": built.pinned,
        "held_checkpoints": built.held,
        "checkpoints_with_eval_loss": built.with_metrics,
        "tier0_replicas_deleted": built.tier0_deleted,
        "catalog_build_seconds": round(built.seconds, 2),
    }

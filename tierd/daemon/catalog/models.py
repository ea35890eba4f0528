"""The catalog's tables (SQLAlchemy 2.x declarative models).

States are stored as short strings so the schema stays portable between SQLite and
PostgreSQL; the Python enums below are the only place their values are spelled.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

__all__ = [
    "AuditEvent",
    "Base",
    "Checkpoint",
    "CheckpointState",
    "Directory",
    "File",
    "FleetLease",
    "Hold",
    "Node",
    "Job",
    "JobFileDone",
    "Part",
    "PartReplica",
    "Upload",
    "UploadPart",
    "JobKind",
    "JobState",
    "Replica",
    "ReplicaState",
    "Run",
    "utcnow",
]


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always returned timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to the catalog")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class CheckpointState(enum.StrEnum):
    """Where a checkpoint is in its life."""

    WAITING = "waiting"  # announced (notify) but files still missing
    COMPLETE = "complete"  # every file recorded with its checksum
    CHANGED = "changed"  # files changed after they were recorded
    DELETED = "deleted"  # no replica left on any tier


class ReplicaState(enum.StrEnum):
    """A checkpoint's copy on one tier. These names are part of the API contract."""

    PENDING = "pending"
    COPYING = "copying"
    VERIFIED = "verified"
    FAILED = "failed"
    DELETING = "deleting"
    DELETED = "deleted"


class JobKind(enum.StrEnum):
    """What a job does."""

    COPY = "copy"
    RESTORE = "restore"
    DELETE = "delete"


class JobState(enum.StrEnum):
    """A job's progress; ``running`` jobs hold a lease."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base with stable constraint names (needed by Alembic batch mode)."""

    metadata = MetaData(naming_convention=NAMING)


class Run(Base):
    """A training run: a namespace for steps."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    checkpoints: Mapped[list[Checkpoint]] = relationship(back_populates="run")


_WAITING = text("state = 'waiting'")


class Checkpoint(Base):
    """One checkpoint step of one run; ``path`` is relative to every tier's root."""

    __tablename__ = "checkpoints"
    __table_args__ = (
        UniqueConstraint("run_id", "step"),
        Index("ix_checkpoints_created", "created_at"),
        # Every daemon looks for the few waiting steps every two seconds.
        Index("ix_checkpoints_waiting", "id", postgresql_where=_WAITING, sqlite_where=_WAITING),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    step: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(String(4096))
    format: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), default=CheckpointState.COMPLETE.value)
    node: Mapped[str] = mapped_column(String(255), default="")
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Figures of merit (``eval_loss`` ...) from the notify call, the API or the format's own files.
    metrics: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    file_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    #: What makes the step complete when it spans nodes: the files (relative to ``path``) the
    #: format's metadata or the notify call named, the ranks (DCP ``__R_*.distcp``), the parts.
    expected_files: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    expected_ranks: Mapped[int | None] = mapped_column(Integer, default=None)
    expected_nodes: Mapped[int | None] = mapped_column(Integer, default=None)
    #: Where the expectation came from: ``format``, ``notify`` or ``config``.
    expected_source: Mapped[str | None] = mapped_column(String(16), default=None)
    #: Since when the step has been ``waiting`` (None once complete).
    waiting_since: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    run: Mapped[Run] = relationship(back_populates="checkpoints")
    parts: Mapped[list[Part]] = relationship(
        back_populates="checkpoint", order_by="Part.node", cascade="all, delete-orphan"
    )
    files: Mapped[list[File]] = relationship(
        back_populates="checkpoint", order_by="File.relpath", cascade="all, delete-orphan"
    )
    replicas: Mapped[list[Replica]] = relationship(
        back_populates="checkpoint", order_by="Replica.tier_index", cascade="all, delete-orphan"
    )
    holds: Mapped[list[Hold]] = relationship(
        back_populates="checkpoint", order_by="Hold.name", cascade="all, delete-orphan"
    )
    directories: Mapped[list[Directory]] = relationship(
        back_populates="checkpoint", order_by="Directory.relpath", cascade="all, delete-orphan"
    )


class Hold(Base):
    """A legal hold on a checkpoint: while any exists, no tier deletes any of its replicas."""

    __tablename__ = "holds"
    __table_args__ = (UniqueConstraint("checkpoint_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    checkpoint: Mapped[Checkpoint] = relationship(back_populates="holds")


class Part(Base):
    """The files of a checkpoint one node holds (its node-local tier 0), recorded by that node."""

    __tablename__ = "parts"
    __table_args__ = (UniqueConstraint("checkpoint_id", "node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    node: Mapped[str] = mapped_column(String(255))
    file_count: Mapped[int] = mapped_column(Integer, default=0)
    total_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: The node's detector called the checkpoint complete: this part holds the format's
    #: completion marker (DCP's ``.metadata``, a tracker file). A step whose only expectation
    #: is a count of parts is complete only once one part is marked.
    marked: Mapped[bool] = mapped_column(Boolean, default=False)

    checkpoint: Mapped[Checkpoint] = relationship(back_populates="parts")
    replicas: Mapped[list[PartReplica]] = relationship(
        back_populates="part", order_by="PartReplica.tier", cascade="all, delete-orphan"
    )


class PartReplica(Base):
    """A part's copy on one tier (``ReplicaState`` values); the checkpoint's replica sums them up."""

    __tablename__ = "part_replicas"
    __table_args__ = (UniqueConstraint("part_id", "tier"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    part_id: Mapped[int] = mapped_column(ForeignKey("parts.id", ondelete="CASCADE"))
    tier: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), default=ReplicaState.PENDING.value)
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    #: A node-local tier's part last re-checked by its node (a step in several parts is scrubbed per part).
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

    part: Mapped[Part] = relationship(back_populates="replicas")


class PeerCopy(Base):
    """A part's copy on another node's peer tier (``ReplicaState`` values); ``holder`` names that node."""

    __tablename__ = "peer_copies"
    __table_args__ = (UniqueConstraint("part_id", "holder"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    part_id: Mapped[int] = mapped_column(ForeignKey("parts.id", ondelete="CASCADE"))
    holder: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16), default=ReplicaState.PENDING.value)
    verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class File(Base):
    """One file of a checkpoint with the checksum taken at first sight, in the part that holds it."""

    __tablename__ = "files"
    __table_args__ = (UniqueConstraint("checkpoint_id", "relpath"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    part_id: Mapped[int | None] = mapped_column(
        ForeignKey("parts.id", ondelete="CASCADE"), default=None, index=True
    )
    relpath: Mapped[str] = mapped_column(String(4096))
    size: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger, default=0)
    checksum_algo: Mapped[str] = mapped_column(String(32))
    checksum: Mapped[str] = mapped_column(String(128))
    #: Owner, group and permission bits (``stat.S_IMODE``) at first sight; None for files
    #: recorded before tierd kept them (every copy of those gets the store's default).
    uid: Mapped[int | None] = mapped_column(BigInteger, default=None)
    gid: Mapped[int | None] = mapped_column(BigInteger, default=None)
    mode: Mapped[int | None] = mapped_column(Integer, default=None)

    checkpoint: Mapped[Checkpoint] = relationship(back_populates="files")


class Directory(Base):
    """A directory a checkpoint's files lie in, with its owner, group and mode at first sight.

    ``relpath`` is relative to the tier-0 root, as files' are: the step's own directory, the
    directories below it, and those above it up to the root (the run's directory), so that a
    copy can give each directory it creates its recorded owner and mode.
    """

    __tablename__ = "directories"
    __table_args__ = (UniqueConstraint("checkpoint_id", "relpath"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    relpath: Mapped[str] = mapped_column(String(4096))
    uid: Mapped[int] = mapped_column(BigInteger)
    gid: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[int] = mapped_column(Integer)

    checkpoint: Mapped[Checkpoint] = relationship(back_populates="directories")


class Replica(Base):
    """A checkpoint's copy on one tier."""

    __tablename__ = "replicas"
    __table_args__ = (
        UniqueConstraint("checkpoint_id", "tier"),
        Index("ix_replicas_tier_state", "tier", "state"),  # the scheduler's and /metrics' queries
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    tier: Mapped[str] = mapped_column(String(32))
    tier_index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default=ReplicaState.PENDING.value)
    location: Mapped[str] = mapped_column(String(4096), default="")
    bytes_done: Mapped[int] = mapped_column(BigInteger, default=0)
    verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    #: When the scrubber (or a verify call) last re-checked the bytes; None until it first does.
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    #: While ``deleting``: when the delete may run (undelete until then); None once it has begun.
    delete_after: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    #: Why the replica is being (or was) deleted: the policy's reason, eviction, or the API's.
    delete_reason: Mapped[str | None] = mapped_column(Text, default=None)
    #: The legal hold last set on the store's objects (Object Lock): ON, OFF, None if never set.
    store_hold: Mapped[bool | None] = mapped_column(Boolean, default=None)
    #: When it was set: objects verified after it (copied again) have not had it.
    store_hold_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    checkpoint: Mapped[Checkpoint] = relationship(back_populates="replicas")


class Job(Base):
    """Work to do (copy, restore, delete), claimed by a worker under a lease."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_claim", "state", "priority"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    src_tier: Mapped[str | None] = mapped_column(String(32), default=None)
    dst_tier: Mapped[str | None] = mapped_column(String(32), default=None)
    #: A hop out of a node-local tier copies one node's part, and only that node claims it.
    part_id: Mapped[int | None] = mapped_column(ForeignKey("parts.id", ondelete="CASCADE"), default=None)
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED.value)
    priority: Mapped[int] = mapped_column(BigInteger, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    not_before: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class JobFileDone(Base):
    """A file a copy job has finished: committed on its destination, never to be copied again.

    A row per file, added as files finish, so that recording progress costs what is new,
    not the whole list again. Removed with the job's end, or with the file's row.
    """

    __tablename__ = "job_files_done"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    file_id: Mapped[int] = mapped_column(
        ForeignKey("files.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class AuditEvent(Base):
    """Append-only log of what happened, who did it and why."""

    __tablename__ = "audit_events"
    # The usage report's retention deletions of the last 30 days (action ``deleted``).
    __table_args__ = (Index("ix_audit_events_action_at", "action", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(64))
    checkpoint_id: Mapped[int | None] = mapped_column(
        ForeignKey("checkpoints.id", ondelete="SET NULL"), default=None, index=True
    )
    tier: Mapped[str | None] = mapped_column(String(32), default=None)
    reason: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class Upload(Base):
    """An S3 multipart upload in flight, kept so a restart resumes it instead of starting over."""

    __tablename__ = "uploads"
    __table_args__ = (UniqueConstraint("checkpoint_id", "tier", "relpath"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    checkpoint_id: Mapped[int] = mapped_column(ForeignKey("checkpoints.id", ondelete="CASCADE"))
    tier: Mapped[str] = mapped_column(String(32))
    relpath: Mapped[str] = mapped_column(String(4096))
    key: Mapped[str] = mapped_column(String(4096))
    upload_id: Mapped[str] = mapped_column(String(1024))
    part_size: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    parts: Mapped[list[UploadPart]] = relationship(
        back_populates="upload", order_by="UploadPart.part_number", cascade="all, delete-orphan"
    )


class UploadPart(Base):
    """A finished part of a multipart upload."""

    __tablename__ = "upload_parts"

    upload_pk: Mapped[int] = mapped_column(ForeignKey("uploads.id", ondelete="CASCADE"), primary_key=True)
    part_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    etag: Mapped[str] = mapped_column(String(255))
    checksum: Mapped[str] = mapped_column(String(128))

    upload: Mapped[Upload] = relationship(back_populates="parts")


class Node(Base):
    """A daemon of the fleet, as its heartbeats left it. Times are the database's clock, never the node's."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    version: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int] = mapped_column(Integer)
    api: Mapped[str] = mapped_column(String(255), default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: ``fleet.advertise_url``: where its peers reach its API (None: not reachable by peers).
    advertise_url: Mapped[str | None] = mapped_column(String(255), default=None)
    #: ``fleet.failure_domain``: what fails with it (None: a domain of its own).
    failure_domain: Mapped[str | None] = mapped_column(String(64), default=None)


class FleetLease(Base):
    """A lease one daemon holds at a time (``shared-tiers``: deleting, evicting, scrubbing shared tiers).

    ``holder`` is the lease owner ``node:pid``; ``term`` grows by one each time the lease changes
    hands (a fencing token); ``expires_at`` is on the database's clock.
    """

    __tablename__ = "fleet_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(255), default=None)
    term: Mapped[int] = mapped_column(BigInteger, default=0)
    acquired_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, default=None)

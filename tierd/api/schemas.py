"""The API's JSON shapes, in and out. Field names and state values are a contract scripts rely on."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tierd.config import Format
from tierd.daemon.catalog.models import Checkpoint, File, Replica

__all__ = [
    "BIGINT_MAX",
    "INTEGER_MAX",
    "NO_NUL",
    "CheckpointDetail",
    "CheckpointOut",
    "CheckpointPage",
    "FileOut",
    "Health",
    "NotifyIn",
    "Problem",
    "Ready",
    "ReplicaOut",
]

#: The catalog's BIGINT columns (steps) and SQL's LIMIT/OFFSET hold signed 64-bit integers;
#: a larger number would reach the database and fail there, so requests are bounded here.
BIGINT_MAX = 2**63 - 1
#: Row ids are INTEGER columns: 32 bits on PostgreSQL.
INTEGER_MAX = 2**31 - 1
#: PostgreSQL text cannot hold NUL: a run name with one would fail in the catalog (a 503).
NO_NUL = r"^[^\x00]*$"


class NotifyIn(BaseModel):
    """A checkpoint step the job has finished writing."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"run": "llama", "step": 1000, "path": "llama/step_1000"}]}
    )

    run: str = Field(min_length=1, max_length=255, pattern=NO_NUL)
    step: int = Field(ge=0, le=BIGINT_MAX)
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="absolute inside tier 0, or relative to it",
    )
    format: Format | None = None


class Problem(BaseModel):
    """An RFC 9457 problem: the body of every error, served as ``application/problem+json``."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    errors: list[dict[str, str]] | None = Field(
        default=None, description="on 422: each invalid input, as its location and message"
    )
    checks: list[str] | None = Field(default=None, description="on /readyz's 503: each failing check")


class Health(BaseModel):
    """The process answers (``/healthz``)."""

    status: Literal["ok"]
    version: str


class Ready(BaseModel):
    """Every readiness check passes (``/readyz``)."""

    status: Literal["ready"]
    node: str


class ReplicaOut(BaseModel):
    """A checkpoint's copy on one tier."""

    tier: str
    tier_index: int
    state: str
    location: str
    bytes_done: int
    verified_at: datetime | None
    error: str | None
    updated_at: datetime

    @classmethod
    def of(cls, row: Replica) -> ReplicaOut:
        """Build from a catalog row."""
        return cls.model_validate(row, from_attributes=True)


class FileOut(BaseModel):
    """One file of a checkpoint and the checksum taken at first sight."""

    path: str
    size: int
    checksum_algorithm: str
    checksum: str

    @classmethod
    def of(cls, row: File) -> FileOut:
        """Build from a catalog row."""
        return cls(
            path=row.relpath, size=row.size, checksum_algorithm=row.checksum_algo, checksum=row.checksum
        )


class CheckpointOut(BaseModel):
    """A checkpoint step and its replicas, in tier order."""

    id: int
    run: str
    step: int
    state: str
    path: str
    format: str
    node: str
    pinned: bool
    hold: str | None
    total_bytes: int
    file_count: int
    created_at: datetime
    completed_at: datetime | None
    replicas: list[ReplicaOut]

    @classmethod
    def of(cls, row: Checkpoint) -> CheckpointOut:
        """Build from a catalog row with its run and replicas loaded."""
        return cls(**_checkpoint_fields(row))


class CheckpointDetail(CheckpointOut):
    """A checkpoint with its files."""

    files: list[FileOut]

    @classmethod
    def of(cls, row: Checkpoint) -> CheckpointDetail:
        """Build from a catalog row with run, replicas and files loaded."""
        return cls(**_checkpoint_fields(row), files=[FileOut.of(f) for f in row.files])


class CheckpointPage(BaseModel):
    """One page of checkpoints, newest first."""

    items: list[CheckpointOut]
    total: int
    limit: int
    offset: int
    next_offset: int | None


def _checkpoint_fields(row: Checkpoint) -> dict[str, object]:
    return {
        "id": row.id,
        "run": row.run.name,
        "step": row.step,
        "state": row.state,
        "path": row.path,
        "format": row.format,
        "node": row.node,
        "pinned": row.pinned,
        "hold": row.hold,
        "total_bytes": row.total_bytes,
        "file_count": row.file_count,
        "created_at": row.created_at,
        "completed_at": row.completed_at,
        "replicas": [ReplicaOut.of(r) for r in row.replicas],
    }

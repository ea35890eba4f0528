"""Checkpoints: a notify; a step with its replicas, parts, files and directories; what an operator sets."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat

from tierd.api.bounds import (
    HOLD_NAME,
    MAX_EXPECTED_FILES,
    MAX_WORLD_SIZE,
    ExpectedFile,
    MetricName,
    PathText,
    Reason,
    RunName,
)
from tierd.api.schemas.common import BIGINT_MAX
from tierd.config import Format
from tierd.daemon.catalog.models import Checkpoint, Directory, File, Hold, Part, Replica
from tierd.daemon.catalog.parts import Missing

__all__ = [
    "CheckpointDetail",
    "CheckpointOut",
    "CheckpointPage",
    "DirectoryOut",
    "FileOut",
    "HoldIn",
    "HoldOut",
    "MetricsIn",
    "MissingOut",
    "NotifyIn",
    "PartOut",
    "PartTierOut",
    "ReasonIn",
    "ReplicaOut",
    "octal_mode",
]


#: A metric's name and value (finite), as ``keep_best`` reads them.
Metrics = Annotated[dict[MetricName, FiniteFloat], Field(max_length=64)]


class NotifyIn(BaseModel):
    """A checkpoint step the job has finished writing."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"run": "llama", "step": 1000, "path": "llama/step_1000"}]}
    )

    run: RunName
    step: int = Field(ge=0, le=BIGINT_MAX)
    path: PathText = Field(description="absolute inside tier 0, or relative to it")
    format: Format | None = None
    metrics: Metrics | None = Field(
        default=None, description="figures of merit for keep_best, e.g. eval_loss"
    )
    world_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_WORLD_SIZE,
        description="processes that wrote the step: DCP's step is complete once every rank's shards are",
    )
    expected_files: list[ExpectedFile] | None = Field(
        default=None,
        max_length=MAX_EXPECTED_FILES,
        description="every file of the step, relative to path, whichever node holds it",
    )


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
    delete_after: datetime | None = Field(description="while deleting: undelete until then")
    delete_reason: str | None

    @classmethod
    def of(cls, row: Replica) -> ReplicaOut:
        """Build from a catalog row."""
        return cls.model_validate(row, from_attributes=True)


class HoldOut(BaseModel):
    """A legal hold: while any is set, no tier deletes the checkpoint."""

    name: str
    reason: str
    actor: str
    created_at: datetime

    @classmethod
    def of(cls, row: Hold) -> HoldOut:
        """Build from a catalog row."""
        return cls.model_validate(row, from_attributes=True)


def octal_mode(mode: int | None) -> str | None:
    """Permission bits as ``ls`` and ``chmod`` spell them (``0640``); None stays None."""
    return None if mode is None else f"{mode:04o}"


class FileOut(BaseModel):
    """One file of a checkpoint, and its checksum, owner, group and mode taken at first sight."""

    path: str
    size: int
    checksum_algorithm: str
    checksum: str
    uid: int | None = Field(description="owner at first sight (null: recorded before tierd kept it)")
    gid: int | None = Field(description="group at first sight")
    mode: str | None = Field(description="permission bits at first sight, in octal: 0640")

    @classmethod
    def of(cls, row: File) -> FileOut:
        """Build from a catalog row."""
        return cls(
            path=row.relpath,
            size=row.size,
            checksum_algorithm=row.checksum_algo,
            checksum=row.checksum,
            uid=row.uid,
            gid=row.gid,
            mode=octal_mode(row.mode),
        )


class DirectoryOut(BaseModel):
    """A directory a checkpoint's files lie in, with its owner, group and mode at first sight."""

    path: str = Field(description="relative to the tier roots, as files' paths")
    uid: int
    gid: int
    mode: str = Field(description="permission bits, in octal: 0750")

    @classmethod
    def of(cls, row: Directory) -> DirectoryOut:
        """Build from a catalog row."""
        return cls(path=row.relpath, uid=row.uid, gid=row.gid, mode=f"{row.mode:04o}")


class PartTierOut(BaseModel):
    """A part's copy on one tier."""

    state: str
    bytes_done: int
    verified_at: datetime | None
    error: str | None


class PartOut(BaseModel):
    """The files of a step one node holds and recorded, and its copy on each tier."""

    node: str
    files: int
    bytes: int
    recorded_at: datetime
    tiers: dict[str, PartTierOut]

    @classmethod
    def of(cls, row: Part) -> PartOut:
        """Build from a catalog row with its replicas loaded."""
        tiers = {r.tier: PartTierOut.model_validate(r, from_attributes=True) for r in row.replicas}
        return cls(
            node=row.node,
            files=row.file_count,
            bytes=row.total_bytes,
            recorded_at=row.recorded_at,
            tiers=tiers,
        )


class MissingOut(BaseModel):
    """What a waiting step lacks: files and ranks (the first 1000 of each) and parts not heard from."""

    files: list[str] = Field(description="expected files no node has recorded, relative to the step's path")
    file_count: int
    ranks: list[int] = Field(description="ranks (world_size) with no shard recorded")
    rank_count: int
    nodes: int = Field(description="parts still to come, of the watch's nodes: N")
    nodes_expected: int | None
    nodes_heard: list[str] = Field(description="the nodes that recorded their part")
    marker: bool = Field(
        description="no part holds the format's completion marker yet (its node's detector has not "
        "seen the step complete): a count of parts alone never completes a step"
    )

    @classmethod
    def of(cls, missing: Missing, nodes_expected: int | None) -> MissingOut:
        """Build from the catalog's answer."""
        return cls(
            files=list(missing.files),
            file_count=missing.file_count,
            ranks=list(missing.ranks),
            rank_count=missing.rank_count,
            nodes=missing.nodes,
            nodes_expected=nodes_expected,
            nodes_heard=list(missing.nodes_heard),
            marker=missing.marker,
        )


class CheckpointOut(BaseModel):
    """A checkpoint step, its replicas in tier order, and its parts (one per node that holds files)."""

    id: int
    run: str
    step: int
    state: str
    path: str
    format: str
    node: str
    pinned: bool
    holds: list[HoldOut]
    metrics: dict[str, float]
    total_bytes: int
    file_count: int
    created_at: datetime
    completed_at: datetime | None
    replicas: list[ReplicaOut]
    parts: list[PartOut]
    waiting_since: datetime | None = Field(description="while waiting: since when")
    expected_source: str | None = Field(
        description="where the expected files came from: format, notify, config"
    )
    missing: MissingOut | None = Field(description="while waiting: what is not recorded yet")

    @classmethod
    def of(cls, row: Checkpoint, missing: Missing | None) -> CheckpointOut:
        """Build from a catalog row with its run and replicas loaded, and what it lacks while waiting."""
        return cls(**_checkpoint_fields(row, missing))


class PeerCopyOut(BaseModel):
    """A node's part copied to another node's peer tier."""

    node: str = Field(description="the node whose part it is")
    holder: str = Field(description="the node holding the copy")
    state: str


class NodeLossOut(BaseModel):
    """Whether the step survives the loss of any one node, and since when."""

    safe: bool = Field(description="every part verified on another node or on a shared tier")
    since: datetime | None = Field(description="when it became safe (None while it is not)")
    peer_copies: list[PeerCopyOut]


class CheckpointDetail(CheckpointOut):
    """A checkpoint with its files and the directories they lie in."""

    files: list[FileOut]
    directories: list[DirectoryOut] = Field(
        description="each directory holding a file, and those above it, with owner and mode at first sight"
    )
    node_loss: NodeLossOut | None = Field(default=None, description="whether one node's loss loses it")

    @classmethod
    def of(
        cls, row: Checkpoint, missing: Missing | None, node_loss: NodeLossOut | None = None
    ) -> CheckpointDetail:
        """Build from a catalog row with run, replicas, files and directories loaded."""
        return cls(
            **_checkpoint_fields(row, missing),
            files=[FileOut.of(f) for f in row.files],
            directories=[DirectoryOut.of(d) for d in row.directories],
            node_loss=node_loss,
        )


class CheckpointPage(BaseModel):
    """One page of checkpoints, newest first."""

    items: list[CheckpointOut]
    total: int
    limit: int
    offset: int
    next_offset: int | None


def _checkpoint_fields(row: Checkpoint, missing: Missing | None) -> dict[str, object]:
    return {
        "id": row.id,
        "run": row.run.name,
        "step": row.step,
        "state": row.state,
        "path": row.path,
        "format": row.format,
        "node": row.node,
        "pinned": row.pinned,
        "holds": [HoldOut.of(h) for h in row.holds],
        "metrics": dict(row.metrics or {}),
        "total_bytes": row.total_bytes,
        "file_count": row.file_count,
        "created_at": row.created_at,
        "completed_at": row.completed_at,
        "replicas": [ReplicaOut.of(r) for r in row.replicas],
        "parts": [PartOut.of(p) for p in row.parts],
        "waiting_since": row.waiting_since,
        "expected_source": row.expected_source,
        "missing": MissingOut.of(missing, row.expected_nodes) if missing is not None else None,
    }


class ReasonIn(BaseModel):
    """Why an operator does this (kept in the audit log)."""

    reason: Reason = ""


class HoldIn(BaseModel):
    """A legal hold to set."""

    name: str = Field(pattern=HOLD_NAME, examples=["litigation-2026-17"])
    reason: Reason = Field(min_length=1)


class MetricsIn(BaseModel):
    """Metrics to merge into the checkpoint's (a name given again is replaced)."""

    metrics: Metrics

"""The API's JSON shapes, in and out. Field names and state values are a contract scripts rely on."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator

from tierd.api.bounds import (
    HOLD_NAME,
    MAX_EXPECTED_FILES,
    MAX_WORLD_SIZE,
    ExpectedFile,
    Glob,
    MetricName,
    PathText,
    Reason,
    RunName,
    TierName,
)
from tierd.config import Format
from tierd.daemon.catalog.models import Checkpoint, Directory, File, Hold, Part, Replica
from tierd.daemon.catalog.parts import Missing
from tierd.daemon.catalog.restores import RestoreRow

__all__ = [
    "AuditOut",
    "AuditPage",
    "FreeSpaceOut",
    "HoldIn",
    "HoldOut",
    "MetricsIn",
    "PlanItem",
    "PlanOut",
    "ReasonIn",
    "ReservationIn",
    "ReservationOut",
    "RunOut",
    "RunPage",
    "RunTierOut",
    "ScrubOut",
    "TierOut",
    "VerifiedFileOut",
    "Tier0CheckOut",
    "VerifyOut",
    "VerifyTierOut",
    "TierPlan",
    "BIGINT_MAX",
    "INTEGER_MAX",
    "NO_NUL",
    "CheckpointDetail",
    "CheckpointOut",
    "CheckpointPage",
    "DirectoryOut",
    "MissingOut",
    "OwnerIn",
    "PartOut",
    "PartTierOut",
    "CopyJobOut",
    "DeletionOut",
    "FallbackOut",
    "FleetJobOut",
    "FleetNodeOut",
    "FleetOut",
    "UnfinishedOut",
    "FleetPartOut",
    "JobsOut",
    "RestoreIn",
    "RestoreOut",
    "RestorePage",
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
    warnings: list[str] = Field(
        default_factory=list,
        description="what needs an operator but does not stop the daemon (disk pressure)",
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


class CheckpointDetail(CheckpointOut):
    """A checkpoint with its files and the directories they lie in."""

    files: list[FileOut]
    directories: list[DirectoryOut] = Field(
        description="each directory holding a file, and those above it, with owner and mode at first sight"
    )

    @classmethod
    def of(cls, row: Checkpoint, missing: Missing | None) -> CheckpointDetail:
        """Build from a catalog row with run, replicas, files and directories loaded."""
        return cls(
            **_checkpoint_fields(row, missing),
            files=[FileOut.of(f) for f in row.files],
            directories=[DirectoryOut.of(d) for d in row.directories],
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


class ReservationIn(BaseModel):
    """Room a job asks for before it writes a checkpoint."""

    bytes: int = Field(ge=0, le=BIGINT_MAX)


class ReservationOut(BaseModel):
    """The room is there: ``bytes`` plus the tier's low mark are free."""

    tier: str
    free_bytes: int
    wanted_free_bytes: int
    evicted: list[int] = Field(description="checkpoints evicted from the tier to make the room")
    evicted_bytes: int


class PlanItem(BaseModel):
    """One replica's verdict: kept (by which policy), deleted (why) or blocked (why)."""

    checkpoint_id: int
    run: str
    step: int
    replica_state: str
    action: Literal["keep", "delete", "blocked"]
    policy: str
    reason: str
    backing_tier: str | None = Field(description="deletes: the durable tier re-checked before it")


class TierPlan(BaseModel):
    """The plan of one tier."""

    tier: str
    durable: bool
    policy: str
    delete_delay_seconds: float
    counts: dict[str, int] = Field(description="replicas by action")
    items: list[PlanItem]


class PlanOut(BaseModel):
    """What retention would do now, per tier (``GET /v1/retention/plan``)."""

    generated_at: datetime
    dry_run: bool
    tiers: list[TierPlan]


class FreeSpaceOut(BaseModel):
    """A POSIX tier's disk-pressure marks, as configured."""

    evict_below: str
    evict_to: str


class ScrubOut(BaseModel):
    """A tier's scrub: its settings and how far it is."""

    every: float = Field(description="seconds: each replica is re-checked once per this")
    bandwidth: int = Field(description="bytes per second the scrub may read")
    checked: int = Field(description="verified replicas checked (or copied) within the last `every`")
    total: int = Field(description="verified replicas on the tier")
    oldest_unchecked_age_seconds: float | None = Field(
        description="time since the longest-waiting replica was last checked (or verified)"
    )
    last_pass_at: datetime | None = Field(
        description="when every replica was last found checked within `every` (since the daemon started)"
    )


class TierOut(BaseModel):
    """One tier: what it is, how full, what it holds, and whether disk pressure is stuck."""

    name: str
    kind: str
    durable: bool
    policy: str
    delete_delay_seconds: float
    size_bytes: int | None
    free_bytes: int | None
    used_bytes: int | None
    free_space: FreeSpaceOut | None
    pressure_blocked: str | None = Field(description="set while below the low mark with nothing evictable")
    replicas: dict[str, int] = Field(description="replicas by state")
    newest_verified_age_seconds: float | None
    scrub: ScrubOut | None = Field(default=None, description="set when the tier is scrubbed")


class VerifiedFileOut(BaseModel):
    """A file a verify found missing or not matching its checksum."""

    file: str
    problem: Literal["missing", "mismatch"]
    expected: str = Field(description="the CRC64NVME recorded at first sight")
    actual: str | None = Field(description="the checksum found (when checksums differ)")
    detail: str


class VerifyTierOut(BaseModel):
    """One replica's re-check."""

    tier: str
    result: Literal["ok", "mismatch", "missing", "inconclusive", "gone", "skipped"]
    files: list[VerifiedFileOut] = Field(description="the bad files (mismatch, missing)")
    detail: str


class VerifyOut(BaseModel):
    """A checkpoint re-checked on every tier now; a bad replica is marked failed and copied again."""

    checkpoint_id: int
    ok: bool = Field(description="no replica checked was missing, mismatched or could not be checked")
    tiers: list[VerifyTierOut]


class Tier0CheckOut(BaseModel):
    """Whether this node's tier 0 holds the checkpoint now (``POST .../tier0-check``)."""

    checkpoint_id: int
    tier: str = Field(description="tier 0's name")
    here: bool = Field(description="every file this node's tier 0 holds of it is there at its recorded size")
    state: str | None = Field(description="the tier-0 replica's state after the look (None: it has none)")
    location: str | None = Field(description="where it is, when it is here")
    reason: str
    missing: list[str] = Field(description="files not there at their recorded size (the first 50)")


class AuditOut(BaseModel):
    """One audit event: who did what to which checkpoint, when and why."""

    id: int
    at: datetime
    actor: str
    action: str
    checkpoint_id: int | None
    tier: str | None
    reason: str
    detail: dict[str, Any]


class AuditPage(BaseModel):
    """Audit events newest first; pass ``next_before`` as ``before`` for the next page."""

    items: list[AuditOut]
    next_before: int | None


# Restores and the jobs in flight.

RestoreState = Literal["queued", "running", "done", "failed", "cancelled"]
#: chown takes 32-bit ids, and (uid_t)-1 means "leave it as it is".
ID_MAX = 2**32 - 2


class OwnerIn(BaseModel):
    """Whom a restored tree is given to: every file and directory gets this owner and group."""

    model_config = ConfigDict(extra="forbid")

    uid: int = Field(ge=0, le=ID_MAX)
    gid: int = Field(ge=0, le=ID_MAX)


class RestoreIn(BaseModel):
    """A restore: one way to name the checkpoint, and one destination."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"run": "llama", "latest": True, "target": "/nvme/restore/llama"}]},
    )

    checkpoint_id: int | None = Field(default=None, ge=0, le=INTEGER_MAX)
    run: RunName | None = None
    step: int | None = Field(default=None, ge=0, le=BIGINT_MAX)
    latest: bool = Field(default=False, description="with run: its newest complete step with a verified copy")
    target: PathText | None = Field(default=None, description="an absolute directory")
    to: Literal["tier0"] | None = Field(default=None, description="back to its own path on tier 0")
    files: list[Glob] | None = Field(default=None, min_length=1, max_length=1000)
    ranks: list[Annotated[int, Field(ge=0, le=MAX_WORLD_SIZE - 1)]] | None = Field(
        default=None, min_length=1, max_length=100_000
    )
    source_tier: TierName | None = None
    overwrite: bool = False
    owner: OwnerIn | None = Field(
        default=None,
        description="give the restored files and directories to this uid and gid, keeping their "
        "recorded modes (default: each keeps the owner recorded at first sight); needs the role "
        "restore.owner_role names (admin by default)",
    )

    @model_validator(mode="after")
    def _one_of_each(self) -> RestoreIn:
        ways = [self.checkpoint_id is not None, self.step is not None, self.latest]
        if sum(ways) != 1:
            raise ValueError("name the checkpoint one way: checkpoint_id, run and step, or run and latest")
        if (self.run is None) == (self.checkpoint_id is None):
            raise ValueError("run goes with step or latest, and not with checkpoint_id")
        if (self.target is None) == (self.to is None):
            raise ValueError('give exactly one destination: target or "to": "tier0"')
        return self


class FallbackOut(BaseModel):
    """A file taken from another tier because the first one's copy was bad."""

    file: str
    from_tier: str
    to_tier: str
    error: str


class RestoreOut(BaseModel):
    """A restore job: its request, state and progress."""

    id: int
    state: RestoreState
    checkpoint_id: int
    run: str
    step: int
    target: str = Field(description="the absolute path restored into")
    to_tier0: bool
    source_tier: str | None
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    rate_bytes_per_second: float | None
    eta_seconds: float | None
    error: str | None
    fallbacks: list[FallbackOut]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: RestoreRow) -> RestoreOut:
        """From a catalog restore row."""
        job, detail = row.job, dict(row.job.detail or {})
        return cls(
            id=job.id,
            state=job.state,
            checkpoint_id=job.checkpoint_id,
            run=row.run,
            step=row.step,
            target=str(detail.get("target", "")),
            to_tier0=bool(detail.get("to_tier0")),
            source_tier=job.src_tier,
            bytes_done=int(detail.get("bytes_done", 0)),
            bytes_total=int(detail.get("bytes_total", 0)),
            files_done=int(detail.get("files_done", 0)),
            files_total=int(detail.get("files_total", 0)),
            rate_bytes_per_second=detail.get("rate_bytes_per_second") if job.state == "running" else None,
            eta_seconds=detail.get("eta_seconds") if job.state == "running" else None,
            error=job.last_error,
            fallbacks=[FallbackOut(**item) for item in detail.get("fallbacks") or []],
            created_at=job.created_at,
            updated_at=job.updated_at,
        )


class RestorePage(BaseModel):
    """Restores, newest first."""

    items: list[RestoreOut]


class CopyJobOut(BaseModel):
    """A copy between tiers, queued or running."""

    id: int
    checkpoint_id: int
    run: str
    step: int
    src_tier: str | None
    dst_tier: str | None
    state: str
    attempts: int
    bytes_done: int
    bytes_total: int
    error: str | None


class DeletionOut(BaseModel):
    """A replica in ``deleting``: removed once ``delete_after`` passes (or now, when it is None)."""

    checkpoint_id: int
    run: str
    step: int
    tier: str
    delete_after: datetime | None
    reason: str | None


class JobsOut(BaseModel):
    """What is in flight: copies, deletions and restores."""

    copies: list[CopyJobOut]
    deletions: list[DeletionOut]
    restores: list[RestoreOut]


class RunTierOut(BaseModel):
    """A run on one tier."""

    newest_verified_step: int | None = Field(description="its newest complete step verified on the tier")


class RunOut(BaseModel):
    """A run: how many checkpoints, its newest complete step, and the newest verified per tier."""

    run: str
    checkpoints: int = Field(description="checkpoints recorded, in any state")
    newest_step: int | None = Field(description="the newest complete step")
    newest_checkpoint_id: int | None
    tiers: dict[str, RunTierOut] = Field(description="every configured tier (and any other holding one)")


class RunPage(BaseModel):
    """Every run by name (``GET /v1/runs``)."""

    items: list[RunOut]


class FleetJobOut(BaseModel):
    """A job a node runs (its lease ``owner`` is ``node:pid``) or owes (queued from its node-local tier)."""

    id: int
    kind: str
    state: str
    checkpoint_id: int
    run: str
    step: int
    src_tier: str | None
    dst_tier: str | None
    owner: str | None


class FleetPartOut(BaseModel):
    """A node's part of a step that no shared tier holds yet: only that node's tier 0 has it."""

    checkpoint_id: int
    run: str
    step: int
    step_state: str = Field(description="waiting (other parts still to come) or complete")
    files: int
    bytes: int
    state: str = Field(description="the part's state on the first shared tier")


class UnfinishedOut(BaseModel):
    """What a silent node left undone."""

    jobs: list[FleetJobOut] = Field(
        description="running under its lease (taken over once it expires), or copies only it can make"
    )
    parts: list[FleetPartOut] = Field(
        description="parts it holds that no shared tier has yet: stuck on its node while it is silent"
    )


class FleetNodeOut(BaseModel):
    """One daemon of the fleet; times and ages on the database's clock."""

    name: str
    version: str
    pid: int
    api: str = Field(description="where its API listens")
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: float
    leader: bool = Field(description="whether it holds the shared tiers' lease now")
    silent: bool = Field(description="not heard from for longer than fleet.node_timeout")
    copying: list[FleetJobOut] = Field(description="its running jobs")
    unfinished: UnfinishedOut | None = Field(description="only for a silent node: what it left")


class FleetOut(BaseModel):
    """Every node of the fleet and its leader (``GET /v1/fleet``)."""

    nodes: list[FleetNodeOut]
    leader: str | None = Field(description="the node leading the shared tiers, None while nobody does")
    term: int = Field(description="the lease's term: grows by one each time the leader changes")
    lease_expires_at: datetime | None
    node_timeout_seconds: float
    checked_at: datetime = Field(description="the database's clock when this was read")

"""Restores: the request (which checkpoint, where, whose), and the job's state and progress."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tierd.api.bounds import MAX_WORLD_SIZE, Glob, PathText, RunName, TierName
from tierd.api.schemas.common import BIGINT_MAX, INTEGER_MAX
from tierd.daemon.catalog.restores import RestoreRow

__all__ = [
    "FallbackOut",
    "ID_MAX",
    "OwnerIn",
    "RestoreIn",
    "RestoreOut",
    "RestorePage",
    "RestoreState",
]


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
    node: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$",
        description="only the part of the step this node recorded, nothing of other nodes' parts",
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
    node: str | None = Field(default=None, description="the node whose part alone was asked for")
    source_tier: str | None = Field(description="the source read first (a tier, or peer:<holder>)")
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    rate_bytes_per_second: float | None
    eta_seconds: float | None
    error: str | None
    fallbacks: list[FallbackOut]
    read_from: dict[str, int] = Field(
        default_factory=dict,
        description="how many files were copied from each source (a tier, or peer:<holder>); "
        "files found in place already are not counted",
    )
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
            node=detail.get("part_of"),
            source_tier=job.src_tier,
            bytes_done=int(detail.get("bytes_done", 0)),
            bytes_total=int(detail.get("bytes_total", 0)),
            files_done=int(detail.get("files_done", 0)),
            files_total=int(detail.get("files_total", 0)),
            rate_bytes_per_second=detail.get("rate_bytes_per_second") if job.state == "running" else None,
            eta_seconds=detail.get("eta_seconds") if job.state == "running" else None,
            error=job.last_error,
            fallbacks=[FallbackOut(**item) for item in detail.get("fallbacks") or []],
            read_from={str(k): int(v) for k, v in (detail.get("read_from") or {}).items()},
            created_at=job.created_at,
            updated_at=job.updated_at,
        )


class RestorePage(BaseModel):
    """Restores, newest first."""

    items: list[RestoreOut]

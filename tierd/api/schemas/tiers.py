"""Tiers: what each is, how full and what it holds (``GET /v1/tiers``), and reservations of room."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from tierd.api.schemas.common import BIGINT_MAX

__all__ = [
    "FreeSpaceOut",
    "ReservationIn",
    "ReservationOut",
    "ScrubOut",
    "TierOut",
]


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
    io_mode: Literal["direct", "buffered"] | None = Field(
        default=None,
        description="POSIX: how files bigger than a chunk are written now (O_DIRECT or through the page "
        "cache); null until the tier's first big write chooses (io_mode auto measures then), and for "
        "other kinds",
    )
    io_mode_reason: str | None = Field(
        default=None,
        description="why: 'configured', the probe's two rates, or 'the file system refuses O_DIRECT'",
    )

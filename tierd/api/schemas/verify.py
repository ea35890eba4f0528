"""Verification: a checkpoint re-checked on every tier, and the look at this node's tier 0."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "Tier0CheckOut",
    "VerifiedFileOut",
    "VerifyOut",
    "VerifyTierOut",
]


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

"""What each tier holds and costs, and in 30 days (``GET /v1/usage``).

Costs are in the currency the config's prices are written in, rounded to 1/10,000; ``null``
where the tier sets no price for that part (never 0 for "unknown").
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

__all__ = ["ClassUsageOut", "RunUsageOut", "TierUsageOut", "UsageOut", "UsageTotalsOut"]


class TierUsageOut(BaseModel):
    """One tier: what it holds verified, its prices and costs a month, what retention saved, in 30 days."""

    name: str
    kind: str
    storage_class: str = Field(description="the tier's storage_class, or default (the store's own)")
    checkpoints: int
    files: int
    bytes: int = Field(description="bytes of the checkpoints verified on the tier")
    price_per_gb_month: float | None = Field(description="per GiB (2^30 bytes) held a month")
    price_per_1000_writes: float | None
    price_per_1000_reads: float | None
    writes_per_month: int = Field(
        description="one per file of the steps the current cadence saves in 30 days"
    )
    reads_per_month: int = Field(description="the scrub's: one per stored file per scrub.every")
    storage_cost_per_month: float | None
    request_cost_per_month: float | None
    cost_per_month: float | None = Field(description="storage and requests; null when the tier is not priced")
    retention_deleted_checkpoints: int = Field(description="replicas retention deleted in the last 30 days")
    retention_deleted_bytes: int
    retention_saved_per_month: float | None = Field(description="what the deleted bytes would cost a month")
    projected_bytes: int = Field(description="bytes held 30 days on at the current save cadence")
    projected_cost_per_month: float | None


class ClassUsageOut(BaseModel):
    """The tiers of one storage class added up."""

    storage_class: str
    tiers: list[str]
    bytes: int
    cost_per_month: float | None = Field(description="storage only; null when no tier of the class is priced")


class RunUsageOut(BaseModel):
    """One run: bytes over every tier and per tier, and its cadence (null: no save in the window)."""

    run: str
    bytes: int
    tiers: dict[str, int]
    steps_per_day: float | None
    mean_step_bytes: int | None


class UsageTotalsOut(BaseModel):
    """Every tier added up; costs over the priced tiers only (``unpriced`` names the others)."""

    bytes: int
    cost_per_month: float
    retention_deleted_bytes: int
    retention_saved_per_month: float
    projected_bytes: int
    projected_cost_per_month: float
    unpriced: list[str]


class UsageOut(BaseModel):
    """The usage report (``GET /v1/usage``); docs/operations.md says what the projection assumes."""

    generated_at: datetime
    cadence_days: int = Field(description="the window the save cadence is measured over")
    projection_days: int
    tiers: list[TierUsageOut]
    storage_classes: list[ClassUsageOut]
    runs: list[RunUsageOut] = Field(description="the runs holding the most bytes, biggest first")
    runs_total: int = Field(description="how many runs hold a verified replica")
    totals: UsageTotalsOut

"""Runs: each run's checkpoints, newest complete step, and newest verified step per tier."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = [
    "RunOut",
    "RunPage",
    "RunTierOut",
]


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

"""Liveness and readiness (``/livez``, ``/healthz``, ``/readyz``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

__all__ = [
    "Health",
    "Ready",
]


class Health(BaseModel):
    """The process answers (``/livez``, ``/healthz``)."""

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

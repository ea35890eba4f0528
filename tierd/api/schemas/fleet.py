"""The fleet (``GET /v1/fleet``): every node, its heartbeat and jobs, and who leads the shared tiers."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

__all__ = [
    "FleetJobOut",
    "FleetNodeOut",
    "FleetOut",
    "FleetPartOut",
    "UnfinishedOut",
]


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
    advertise_url: str | None = Field(
        default=None, description="where its peers reach it (fleet.advertise_url)"
    )
    failure_domain: str | None = Field(default=None, description="what fails with it (fleet.failure_domain)")
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

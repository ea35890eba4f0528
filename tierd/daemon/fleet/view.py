"""What ``GET /v1/fleet`` shows: every node, who leads, what each is copying, what a silent one left.

Ages are on the database's clock. A node not heard from for longer than ``fleet.node_timeout``
is ``silent``, and its ``unfinished`` work is listed: the jobs still running under its lease
(they are taken over once the lease expires) and the copies it owes from its node-local tier
(nobody else holds those bytes).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from tierd.config import Config
from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Session
from tierd.daemon.catalog.fleet import NodeJob, NodePart, NodeRow
from tierd.daemon.catalog.jobs import owner_id
from tierd.daemon.catalog.models import JobState

__all__ = ["FleetView", "NodeView", "Unfinished", "fleet_view"]


@dataclass(frozen=True)
class Unfinished:
    """What a silent node left: its jobs, and parts of steps that only it holds.

    ``jobs``: running under its lease, or copies only it can make. ``parts``: its parts no
    shared tier has yet (only its node-local tier does).
    """

    jobs: list[NodeJob] = field(default_factory=list)
    parts: list[NodePart] = field(default_factory=list)


@dataclass(frozen=True)
class NodeView:
    """One node as the fleet sees it."""

    row: NodeRow
    leader: bool
    silent: bool
    copying: list[NodeJob]
    unfinished: Unfinished | None


@dataclass(frozen=True)
class FleetView:
    """Every node, and the shared tiers' lease."""

    nodes: list[NodeView]
    leader: str | None
    term: int
    lease_expires_at: datetime | None
    db_now: datetime
    node_timeout: float


def fleet_view(session: Session, config: Config, *, alone: bool) -> FleetView:
    """The fleet now. ``alone`` (SQLite): this daemon is the only node and always leads."""
    lease = fleet.lease_state(session, fleet.SHARED_TIERS_LEASE)
    rows = fleet.list_nodes(session)
    node_local = [t.name for t in config.tiers if not t.shared]
    by_node: dict[str, list[NodeJob]] = defaultdict(list)
    for job in fleet.unfinished_jobs(session, node_local):
        node = fleet.node_of(job.owner)
        if node is not None:
            by_node[node].append(job)
    shared = next((t.name for t in config.tiers if t.shared), None)
    parts: dict[str, list[NodePart]] = defaultdict(list)
    if node_local and shared is not None:
        for part in fleet.parts_not_shared(session, shared):
            parts[part.node].append(part)
    holder = lease.holder if lease.live else None
    if alone:
        holder = next((owner_id(r.name, r.pid) for r in rows if r.name == config.node), None)
    timeout = config.fleet.node_timeout
    nodes = []
    for row in rows:
        jobs = by_node.get(row.name, [])
        silent = row.age_seconds > timeout
        mine = owner_id(row.name, row.pid)
        nodes.append(
            NodeView(
                row=row,
                leader=holder == mine,
                silent=silent,
                copying=[j for j in jobs if j.state == JobState.RUNNING.value and j.owner == mine],
                unfinished=Unfinished(jobs=jobs, parts=parts.get(row.name, [])) if silent else None,
            )
        )
    leader = fleet.node_of(holder)
    return FleetView(
        nodes, leader, lease.term, lease.expires_at if not alone else None, lease.db_now, timeout
    )

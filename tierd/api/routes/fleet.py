"""The fleet: every daemon on this catalog, its heartbeat, who leads the shared tiers."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter

from tierd.api.deps import ContextDep, Reader, ReadSessionDep
from tierd.api.problems import ProblemRoute
from tierd.api.schemas.fleet import FleetJobOut, FleetNodeOut, FleetOut, FleetPartOut, UnfinishedOut
from tierd.daemon.fleet.view import NodeView, fleet_view

__all__ = ["router"]

router = APIRouter(prefix="/v1/fleet", tags=["fleet"], route_class=ProblemRoute)


@router.get("", operation_id="getFleet")
def fleet(ctx: ContextDep, session: ReadSessionDep, _caller: Reader) -> FleetOut:
    """Every node with its last heartbeat (and age, database clock), version, leadership and jobs.

    A node silent for longer than ``fleet.node_timeout`` says so, with what it left unfinished.
    """
    view = fleet_view(session, ctx.config, alone=ctx.db.is_sqlite)
    return FleetOut(
        nodes=[_node(n) for n in view.nodes],
        leader=view.leader,
        term=view.term,
        lease_expires_at=view.lease_expires_at,
        node_timeout_seconds=view.node_timeout,
        checked_at=view.db_now,
    )


def _node(node: NodeView) -> FleetNodeOut:
    row = node.row
    unfinished = None
    if node.unfinished is not None:
        left = node.unfinished
        unfinished = UnfinishedOut(
            jobs=[FleetJobOut(**asdict(j)) for j in left.jobs],
            parts=[FleetPartOut(**{k: v for k, v in asdict(p).items() if k != "node"}) for p in left.parts],
        )
    return FleetNodeOut(
        name=row.name,
        version=row.version,
        pid=row.pid,
        api=row.api,
        advertise_url=row.advertise_url,
        failure_domain=row.failure_domain,
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        heartbeat_age_seconds=round(row.age_seconds, 3),
        leader=node.leader,
        silent=node.silent,
        copying=[FleetJobOut(**asdict(j)) for j in node.copying],
        unfinished=unfinished,
    )

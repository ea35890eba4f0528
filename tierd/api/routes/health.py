"""Liveness and readiness, for supervisors and load balancers."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from tierd import __version__
from tierd.api.deps import ContextDep
from tierd.api.problems import ProblemRoute, problem, problem_responses
from tierd.api.schemas.health import Health, Ready
from tierd.daemon.aio import blocking
from tierd.daemon.context import Context
from tierd.errors import CatalogError

__all__ = ["router"]

router = APIRouter(tags=["health"], route_class=ProblemRoute)


@router.get("/healthz", operation_id="getHealth")
async def healthz() -> Health:
    """The process is alive and its event loop answers."""
    return Health(status="ok", version=__version__)


@router.get(
    "/readyz",
    operation_id="getReadiness",
    response_model=Ready,
    responses=problem_responses(503, description="not ready: each failing check is in checks"),
)
async def readyz(ctx: ContextDep) -> Ready | JSONResponse:
    """Ready when the catalog answers, the watcher runs and the daemon is not draining.

    Warnings: disk pressure, and a service whose catalog calls fail although the catalog
    answers a ping (a SQLite catalog on a full disk refuses writes).
    """
    failures: list[str] = []
    try:
        await blocking(ctx.db.ping)
    except CatalogError as exc:
        failures.append(f"catalog unreachable: {exc}")
    if not ctx.watcher_running:
        failures.append("watcher not running")
    if ctx.draining:
        failures.append("draining for shutdown")
    if failures:
        return problem(503, "; ".join(failures), title="Not ready", checks=failures)
    return Ready(status="ready", node=ctx.config.node, warnings=_warnings(ctx))


def _warnings(ctx: Context) -> list[str]:
    failing = [text for outage in ctx.outages.values() if (text := outage.describe()) is not None]
    if ctx.retention is None:
        return failing
    return failing + [f"tier {tier}: disk pressure: {why}" for tier, why in ctx.retention.blocked.items()]

"""Liveness and readiness, for supervisors and load balancers.

``/livez`` (and its older name ``/healthz``) asks only that the process and its event loop
answer: what a liveness probe or the image's ``HEALTHCHECK`` restarts on. ``/readyz`` also
checks the catalog, the watcher and the drain: what a readiness probe routes on. Neither
needs a token, and the liveness checks skip the API's admission queue (``api.admission``),
so a busy daemon is not restarted for being busy.
"""

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


@router.get("/livez", operation_id="getLiveness")
async def livez() -> Health:
    """The process is alive and its event loop answers; no catalog or tier check (see /readyz)."""
    return Health(status="ok", version=__version__)


@router.get("/healthz", operation_id="getHealth")
async def healthz() -> Health:
    """The process is alive and its event loop answers (as ``/livez``)."""
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

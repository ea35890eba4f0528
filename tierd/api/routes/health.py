"""Liveness and readiness, for supervisors and load balancers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from tierd import __version__
from tierd.api.deps import ContextDep
from tierd.api.problems import problem
from tierd.daemon.aio import blocking
from tierd.errors import CatalogError

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    """The process is alive and its event loop answers."""
    return {"status": "ok", "version": __version__}


@router.get("/readyz", response_model=None)
async def readyz(ctx: ContextDep) -> dict[str, Any] | JSONResponse:
    """Ready when the catalog answers, the watcher runs and the daemon is not draining."""
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
    return {"status": "ready", "node": ctx.config.node}

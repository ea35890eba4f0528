"""Prometheus exposition at ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tierd.api.deps import ContextDep
from tierd.api.problems import ProblemRoute
from tierd.daemon.aio import blocking

__all__ = ["router"]

router = APIRouter(tags=["metrics"], route_class=ProblemRoute)
_EXPOSITION: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "every metric, in Prometheus' text exposition format",
        "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
    }
}


@router.get("/metrics", operation_id="getMetrics", response_class=Response, responses=_EXPOSITION)
async def metrics(ctx: ContextDep) -> Response:
    """Every metric in Prometheus' text format (catalog gauges are read at scrape time)."""
    body = await blocking(generate_latest, ctx.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)

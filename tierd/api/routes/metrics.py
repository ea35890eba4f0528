"""Prometheus exposition at ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tierd.api.deps import ContextDep
from tierd.daemon.aio import blocking

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response)
async def metrics(ctx: ContextDep) -> Response:
    """Every metric in Prometheus' text format (catalog gauges are read at scrape time)."""
    body = await blocking(generate_latest, ctx.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)

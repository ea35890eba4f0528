"""The FastAPI application: thin routes over the services the daemon runs.

The routes are made with ``pydantic.v1`` hidden (``tierd.hidden``): FastAPI imports it as it
makes each route, only to refuse pydantic v1 models, which tierd has none of (~1.4 MB of
every daemon's resident memory). The OpenAPI schema is built on the first request for it.
"""

from __future__ import annotations

from fastapi import FastAPI

from tierd import __version__
from tierd.api.docs import install_docs
from tierd.api.gate import install_gate
from tierd.api.openapi import DESCRIPTION, TAGS
from tierd.api.problems import install_problem_handlers
from tierd.daemon.backends.budget import ByteBudget
from tierd.daemon.backends.peer import PeerStore
from tierd.daemon.context import Context
from tierd.hidden import hidden

#: What FastAPI imports only to tell pydantic v1 models apart.
PYDANTIC_V1 = "pydantic.v1"

with hidden(PYDANTIC_V1):
    from tierd.api.routes import (
        audit,
        checkpoints,
        fleet,
        health,
        jobs,
        metrics,
        peer,
        restores,
        retention,
        runs,
        tiers,
        usage,
        verify,
    )

__all__ = ["PYDANTIC_V1", "create_app"]


def create_app(ctx: Context, budget: ByteBudget | None = None) -> FastAPI:
    """Build the app over ``ctx``; OpenAPI is served at ``/v1/openapi.json``, Swagger UI at ``/v1/docs``.

    ``budget``: the daemon's buffer budget, which the peer tier's received files take their
    buffers from (None: a receiving budget of the peer store's own, ``RECEIVE_BUDGET``).
    """
    app = FastAPI(
        title="tierd",
        version=__version__,
        description=DESCRIPTION,
        openapi_tags=TAGS,
        openapi_url="/v1/openapi.json",
        docs_url=None,  # served by install_docs, with no CDN
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    app.state.ctx = ctx
    app.state.peer = None if ctx.config.peer is None else PeerStore(ctx.config.peer, budget=budget)
    install_problem_handlers(app)
    with hidden(PYDANTIC_V1):
        _include_routes(app)
    install_docs(app, app.title)
    install_gate(app, ctx.tokens, ctx.config.api.max_body_bytes)
    return app


def _include_routes(app: FastAPI) -> None:
    app.include_router(health.router)
    app.include_router(checkpoints.router)
    app.include_router(verify.router)
    app.include_router(runs.router)
    app.include_router(tiers.router)
    app.include_router(retention.router)
    app.include_router(audit.router)
    app.include_router(restores.router)
    app.include_router(jobs.router)
    app.include_router(fleet.router)
    app.include_router(usage.router)
    app.include_router(metrics.router)
    app.include_router(peer.router)

"""RFC 9457 problem details: every API error is ``application/problem+json``."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tierd.errors import CatalogError, Conflict, NotFound, ShuttingDown, TierdError
from tierd.logs import get_logger

__all__ = ["PROBLEM_JSON", "install_problem_handlers", "problem"]

PROBLEM_JSON = "application/problem+json"
log = get_logger(__name__)

_STATUS_FOR: list[tuple[type[TierdError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (ShuttingDown, 503),
    (CatalogError, 503),
]


def problem(status: int, detail: str, *, title: str | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response with ``status``, a title and a human-readable ``detail``."""
    body = {
        "type": "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    response = problem(exc.status_code, str(exc.detail))
    for key, value in (exc.headers or {}).items():
        response.headers[key] = value
    return response


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]} for err in exc.errors()]
    summary = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors)
    return problem(422, summary, title="Invalid request", errors=errors)


async def _tierd_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TierdError)
    status = next((code for cls, code in _STATUS_FOR if isinstance(exc, cls)), 500)
    if status >= 500:
        log.warning("api_error", path=request.url.path, error=str(exc))
    return problem(status, str(exc))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("api_unhandled", path=request.url.path)
    return problem(500, "internal error; see the daemon's log")


def install_problem_handlers(app: FastAPI) -> None:
    """Route every error the app can raise to a problem+json response."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(TierdError, _tierd_error)
    app.add_exception_handler(Exception, _unexpected)

"""RFC 9457 problem details: every API error is ``application/problem+json``, and documented.

Each error answer is documented where it arises, not route by route: a dependency that may
answer a problem is marked with ``answers`` (the role checks: 401 and 403; the catalog
sessions: 503), and ``ProblemRoute`` lists in a route's OpenAPI entry the problems of every
dependency it uses, plus 422 when the route takes any input. A route adds only what its own
body raises (``responses=problem_responses(NotFound)``).
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_flat_params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from tierd.api.openapi import describe
from tierd.api.schemas.common import Problem
from tierd.errors import (
    CatalogError,
    Conflict,
    NotFound,
    NotifyRejected,
    RestoreRefused,
    ShuttingDown,
    TierdError,
)
from tierd.logs import get_logger

__all__ = [
    "PROBLEM_JSON",
    "ProblemRoute",
    "answers",
    "install_problem_handlers",
    "problem",
    "problem_responses",
]

PROBLEM_JSON = "application/problem+json"
log = get_logger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
Responses = dict[int | str, dict[str, Any]]

_STATUS_FOR: list[tuple[type[TierdError], int]] = [
    (NotFound, 404),
    (Conflict, 409),
    (NotifyRejected, 422),
    (RestoreRefused, 422),
    (ShuttingDown, 503),
    (CatalogError, 503),
]
_ANSWERS_ATTR = "__tierd_problems__"
_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_MALFORMED = "a malformed request: each invalid input is in errors"
_UNREADABLE = "the body could not be read (not UTF-8 text)"
_TOO_LARGE = "the body is longer than api.max_body_bytes (refused before it is read)"


def status_for(error: type[TierdError]) -> int:
    """The HTTP status the API answers ``error`` with (500 for an error it does not expect)."""
    return next((code for cls, code in _STATUS_FOR if issubclass(error, cls)), 500)


def problem_responses(*answers: int | type[TierdError], description: str | None = None) -> Responses:
    """OpenAPI ``responses`` entries: each answer (a status or a tierd error) as a Problem.

    A status is described by ``description`` or its HTTP phrase, a tierd error by its
    docstring's first line.
    """
    out: Responses = {}
    for answer in answers:
        if isinstance(answer, int):
            status, text = answer, description or HTTPStatus(answer).phrase
        else:
            status, text = status_for(answer), (answer.__doc__ or answer.__name__).strip().splitlines()[0]
        entry: dict[str, Any] = {
            "description": text,
            "content": {PROBLEM_JSON: {"schema": _PROBLEM_REF}},
        }
        if status == 401:
            entry["headers"] = {"WWW-Authenticate": {"schema": {"type": "string", "const": "Bearer"}}}
        out.setdefault(status, entry)
    return out


def answers(responses: Responses) -> Callable[[F], F]:
    """Mark a dependency with the problems it may answer; every ``ProblemRoute`` using it lists them."""

    def mark(dependency: F) -> F:
        setattr(dependency, _ANSWERS_ATTR, responses)
        return dependency

    return mark


class ProblemRoute(APIRoute):
    """A route whose OpenAPI entry lists the problems its dependencies and its input may answer.

    And its role, summary and description (``openapi.describe``).
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        found = _dependency_answers(self.dependant)
        if get_flat_params(self.dependant) or self.body_field is not None:
            found.update(problem_responses(422, description=_MALFORMED))
        if self.body_field is not None:
            found.update(problem_responses(400, description=_UNREADABLE))
            found.update(problem_responses(413, description=_TOO_LARGE))
        merged = {**found, **self.responses}  # what the route says itself wins
        self.responses = dict(sorted(merged.items(), key=lambda item: str(item[0])))
        describe(self)


def _dependency_answers(dependant: Dependant) -> Responses:
    found: Responses = {}
    for sub in dependant.dependencies:
        found.update(getattr(sub.call, _ANSWERS_ATTR, {}))
        found.update(_dependency_answers(sub))
    return found


def install_problem_schema(app: FastAPI) -> None:
    """Put the ``Problem`` schema into the app's OpenAPI components (responses refer to it)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()  # cached by FastAPI in app.openapi_schema: completed once, here
        schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        document.setdefault("components", {}).setdefault("schemas", {})["Problem"] = schema
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def problem(status: int, detail: str, *, title: str | None = None, **extra: Any) -> JSONResponse:
    """A problem+json response with ``status``, a title and a human-readable ``detail``."""
    body = Problem(title=title or HTTPStatus(status).phrase, status=status, detail=detail, **extra)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, media_type=PROBLEM_JSON)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    response = problem(exc.status_code, str(exc.detail))
    for key, value in (exc.headers or {}).items():
        response.headers[key] = value
    return response


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": ".".join(str(p) for p in err["loc"]), "msg": str(err["msg"]).removeprefix("Value error, ")}
        for err in exc.errors()
    ]
    summary = "; ".join(f"{e['loc']}: {e['msg']}" for e in errors)
    return problem(422, summary, title="Invalid request", errors=errors)


async def _tierd_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TierdError)
    status = status_for(type(exc))
    if status >= 500:
        log.warning("api_error", path=request.url.path, error=str(exc))
    return problem(status, str(exc))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("api_unhandled", path=request.url.path)
    return problem(500, "internal error; see the daemon's log")


def install_problem_handlers(app: FastAPI) -> None:
    """Route every error the app can raise to a problem+json response, and document the Problem."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(TierdError, _tierd_error)
    app.add_exception_handler(Exception, _unexpected)
    install_problem_schema(app)

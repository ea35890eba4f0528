"""What the API refuses on a request's headers alone, before a byte of its body is read.

FastAPI reads and parses a JSON body before any dependency runs, the bearer-token check
included: a 98 MiB POST without a token took the daemon from 201 to 495 MiB before its 401.
``RequestGate`` is an ASGI middleware in front of the app:

- with tokens configured, a request to any path but the public ones (``PUBLIC_PATHS``: the
  health checks, ``/metrics``, the OpenAPI document) needs a known bearer token, else 401.
  The route's own dependency still checks the token's role (403);
- a body longer than ``api.max_body_bytes`` gets a 413: at once when its Content-Length says
  so, else (a chunked body) as soon as the bytes received pass the bound, reading no further.
  A peer's file (``PUT`` under ``STREAMED_PREFIX``) is bounded by ``MAX_FILE_BYTES`` instead:
  its route streams it to disk and checks its declared size against the room first.

Both answers close the connection, so what the client still sends is never read.
"""

from __future__ import annotations

from collections.abc import Collection

from fastapi import FastAPI
from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tierd.api.problems import problem
from tierd.keyring import Keyring
from tierd.limits import MAX_FILE_BYTES

__all__ = ["PUBLIC_PATHS", "STREAMED_PREFIX", "BodyTooLarge", "RequestGate", "install_gate"]

#: What anyone may ask without a token: a supervisor's health checks, Prometheus' scrape, and
#: the API's own description (the document, and Swagger UI's page and files). Every other path,
#: known or not, needs one (a test checks that these are exactly the routes without a role).
#: Fail-closed: a new public route must be added.
PUBLIC_PATHS = frozenset(
    {
        "/livez",
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/openapi.json",
        "/v1/docs",
        "/v1/docs/swagger-ui-bundle.js",
        "/v1/docs/swagger-ui.css",
        "/v1/docs/favicon-32x32.png",
    }
)

#: Bodies under this path are streamed to disk, never held: bounded by ``MAX_FILE_BYTES``.
STREAMED_PREFIX = "/v1/peer/"
_CLOSE = {"Connection": "close"}
_BEARER = {"WWW-Authenticate": "Bearer", **_CLOSE}


class BodyTooLarge(HTTPException):
    """A request body past ``api.max_body_bytes`` (413); the connection is closed after."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than api.max_body_bytes ({limit} bytes)", _CLOSE)


class RequestGate:
    """Refuses an unauthenticated request (401) or an oversized body (413) before reading it."""

    def __init__(
        self, app: ASGIApp, *, tokens: Keyring, max_body_bytes: int, public: Collection[str] = PUBLIC_PATHS
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.public = frozenset(public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a refusal from the headers, or pass the request on with its body counted."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            response = problem(refusal.status_code, str(refusal.detail))
            response.headers.update(refusal.headers or {})
            await response(scope, receive, send)
            return
        await self.app(scope, _Counted(receive, self._limit(scope)), send)

    def _limit(self, scope: Scope) -> int:
        """The most bytes this request's body may hold."""
        return MAX_FILE_BYTES if scope["path"].startswith(STREAMED_PREFIX) else self.max_body_bytes

    def _refusal(self, scope: Scope, headers: Headers) -> HTTPException | None:
        """Why the headers alone refuse the request, or None."""
        if self.tokens.enabled and scope["path"] not in self.public:
            scheme, credential = get_authorization_scheme_param(headers.get("authorization"))
            if scheme.lower() != "bearer" or not credential:
                return HTTPException(401, "a bearer token is required", _BEARER)
            if self.tokens.find(credential) is None:
                return HTTPException(401, "unknown bearer token", _BEARER)
        length, limit = headers.get("content-length", ""), self._limit(scope)
        if length.isdigit() and int(length) > limit:
            return BodyTooLarge(limit)
        return None


class _Counted:
    """``receive`` that raises BodyTooLarge once the body's bytes pass ``limit`` (and reads no more)."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self._limit = limit
        self._received = 0

    async def __call__(self) -> Message:
        if self._received > self._limit:
            raise BodyTooLarge(self._limit)
        message = await self._receive()
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._limit:
                raise BodyTooLarge(self._limit)
        return message


def install_gate(app: FastAPI, tokens: Keyring, max_body_bytes: int) -> None:
    """Put a ``RequestGate`` in front of ``app``."""
    app.add_middleware(RequestGate, tokens=tokens, max_body_bytes=max_body_bytes)

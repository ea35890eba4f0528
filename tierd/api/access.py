"""The HTTP access log: one structlog line per request, with ``api.access_log: true`` (off by default).

``AccessLog`` wraps the whole served app, admission and the gate included, so a request
answered before any route runs (a 401, 413 or 503) is logged too. Each request gives one
``http_request`` event at info level:

- ``method``, ``status`` (None when no answer began) and ``duration_seconds`` from arrival
  to the answer's last byte (with ``error``, the exception's type, when one ended it);
- ``path``: the route's template (``/v1/checkpoints/{checkpoint_id}``), never the path as
  sent, so a line names no checkpoint, run or file and a caller cannot fill the log with
  paths of its choosing; None when no route ran (no route matches, or the gate or admission
  answered first: the status says which);
- ``caller``: the name of the caller's bearer token, never the token; ``anonymous`` with
  authentication off, None when the request carries no known token.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tierd.keyring import Keyring
from tierd.logs import get_logger

__all__ = ["AccessLog"]

log = get_logger(__name__)


class AccessLog:
    """ASGI middleware writing one ``http_request`` line per HTTP request."""

    def __init__(self, app: ASGIApp, *, tokens: Keyring) -> None:
        """``tokens``: the API's keyring, to name each request's caller."""
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request; log it as its answer's last byte goes out, or when it ends without one."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        line = _Line(scope, self._caller(scope))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                line.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                line.write()  # before the client can have the answer: a test reads the line next
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except BaseException as exc:
            line.write(error=type(exc).__name__)
            raise
        line.write()

    def _caller(self, scope: Scope) -> str | None:
        """The caller's token name: ``anonymous`` with authentication off, None for no known token."""
        if not self.tokens.enabled:
            return "anonymous"
        scheme, credential = get_authorization_scheme_param(Headers(scope=scope).get("authorization"))
        if scheme.lower() != "bearer" or not credential:
            return None
        token = self.tokens.find(credential)
        return None if token is None else token.name


class _Line:
    """One request's log line, written once."""

    def __init__(self, scope: Scope, caller: str | None) -> None:
        self.scope = scope
        self.caller = caller
        self.started = time.monotonic()
        self.status: int | None = None
        self.written = False

    def write(self, **extra: Any) -> None:
        if self.written:
            return
        self.written = True
        route = self.scope.get("route")  # set by the router once a route matched
        path = getattr(route, "path", None)
        log.info(
            "http_request",
            method=self.scope["method"],
            path=path if isinstance(path, str) else None,
            status=self.status,
            duration_seconds=round(time.monotonic() - self.started, 6),
            caller=self.caller,
            **extra,
        )

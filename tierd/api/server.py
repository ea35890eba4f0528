"""The HTTP server as a daemon service: uvicorn, started programmatically on a socket we bind.

The app is served behind ``admission.Admission`` (a bound on requests in progress and
waiting, a deadline per request, abandoned requests dropped), and anyio's thread limiter,
which runs FastAPI's synchronous routes and dependencies, is cut from its 40 threads to
``aio.API_THREADS``: the API's work holds at most that many threads and catalog connections
however many clients call. With ``api.access_log`` in the app's context's config, the access
log (``access.AccessLog``) wraps it all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable, Iterator

import anyio.to_thread
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from tierd.api.access import AccessLog
from tierd.api.admission import Admission
from tierd.api.rawbody import TrackedProtocol
from tierd.daemon.aio import API_THREADS
from tierd.logs import get_logger

__all__ = ["ApiService"]

log = get_logger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the daemon owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiService:
    """Serves the API on ``host:port`` behind ``admission``, over ``tls`` when given (HTTPS).

    ``start`` returns once the socket listens.
    """

    name = "api"

    def __init__(
        self,
        app: FastAPI,
        host: str,
        port: int,
        *,
        admission: Callable[[ASGIApp], ASGIApp] = Admission,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.tls = tls
        self._admission = admission
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Bind, listen and serve; the bound port is in ``self.port`` afterwards."""
        sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        anyio.to_thread.current_default_thread_limiter().total_tokens = API_THREADS
        config = uvicorn.Config(
            self._served(),
            log_config=None,
            access_log=False,
            lifespan="off",
            http=TrackedProtocol,  # h11, its connections known to ``rawbody`` (the peer upload)
            timeout_graceful_shutdown=5,
            ssl_context_factory=None if self.tls is None else self._tls_context,
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="api:serve")
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the API server stopped during start-up")
            await asyncio.sleep(0.01)
        log.info("api_listening", host=self.host, port=self.port, tls=self.tls is not None)

    def _tls_context(self, config: uvicorn.Config, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        """The TLS context uvicorn asks for: the one built from ``api.tls`` at start."""
        assert self.tls is not None
        return self.tls

    def _served(self) -> ASGIApp:
        """The app behind admission, and behind the access log when its context's config asks for one."""
        served = self._admission(self.app)
        ctx = getattr(self.app.state, "ctx", None)
        if ctx is not None and ctx.config.api.access_log:
            served = AccessLog(served, tokens=ctx.tokens)
        return served

    async def stop(self, timeout: float) -> None:
        """Finish open requests (bounded) and close the socket."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._task, timeout=max(timeout, 1))
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named outright: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says so. Without it every answer after the first on a kept-alive connection
    # waited ~40 ms (headers and body are two writes: Nagle held the body for the client's
    # delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock

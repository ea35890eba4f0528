"""Whole small objects by HTTP/1.1 pipelining: a group's GETs written at once on one connection.

Downloading thousands of small objects is bound by the CPU each request costs, not by
bytes. Even on ``s3.fast.lean``'s path, each GET costs the event loop a send system call, a
wake-up of the store and aiohttp's handling of one answer. ``PipelinedGets`` signs a
group's GETs (``LeanRequests.prepare``) and writes them in one go on one keep-alive
connection. HTTP/1.1 returns the answers in request order, so they can be read in big
reads straight into the objects' views (``s3.fast.answers``). On loopback against rclone, 3,000
objects of 34 KiB on 16 lanes took 0.17 s of CPU and 0.34 s, against 0.68 s and 0.79 s
with one lean GET after another.

GETs are idempotent, so the requests a dropped connection left unanswered are sent again
on a new one (RFC 9112, 9.3.2), up to ``CONNECTIONS_PER_GROUP`` connections a group, and
only while each new connection answers something. An object comes back unfilled, for the
caller to read the lean or botocore way (which also reports its error), when its answer
is not plain (an error, another size, a body that cannot be framed) or no connection
answered it. A store whose first answer on a new connection says ``Connection: close``
is not pipelined to again; one that stops answering in the middle of a group (a proxy
that takes only the first request) is not for ``STALL_PAUSE``. The stall timeout is
short (``PIPELINE_STALL`` in ``s3.backend``): a healthy store answers a group within moments.
The caller checks every object's bytes against its recorded checksum, so even a store
that mixed up answers could not have a wrong copy accepted.

Connections are this module's own (with the TLS context of the client's aiohttp
connector): up to ``IDLE_LIMIT`` are kept open between groups. Time (the stall timeout and
the pause) is read from a ``Clock``: the event loop, or a test's.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from tierd.daemon.backends.s3.fast.answers import AnswerParser
from tierd.daemon.backends.s3.fast.lean import LeanRequests, Prepared
from tierd.logs import get_logger

__all__ = ["Clock", "PipelinedGets", "tls_context_of"]

log = get_logger(__name__)

IDLE_LIMIT = 16
CONNECTIONS_PER_GROUP = 3
#: A store that stops answering a pipelined group (as some proxies do after the first
#: request) is read one GET at a time for this long.
STALL_PAUSE = 600.0


class Timer(Protocol):
    """A scheduled call that can be called off."""

    def cancel(self) -> None:
        """Call it off."""


class Clock(Protocol):
    """Monotonic time and delayed calls, as ``asyncio.AbstractEventLoop`` has them."""

    def time(self) -> float:
        """Seconds, monotonic."""

    def call_later(self, delay: float, callback: Callable[[], object], /) -> Timer:
        """Call ``callback`` after ``delay`` seconds."""


class _Link(asyncio.BufferedProtocol):
    """One connection: the answers to the requests written last, read by an ``AnswerParser``."""

    def __init__(self, read_timeout: float, clock: Clock) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: AnswerParser | None = None
        self.lost = False  # closed, or received what nothing asked for
        self.stalled = False  # dropped because nothing came for ``read_timeout``
        self._read_timeout = read_timeout
        self._waiter: asyncio.Future[None] | None = None
        self._timer: Timer | None = None
        self._heard = 0.0  # when bytes last came
        self._loop = asyncio.get_running_loop()
        self._clock = clock
        self._idle = memoryview(bytearray(1))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.parser.buffer() if self.parser is not None else self._idle

    def buffer_updated(self, nbytes: int) -> None:
        parser = self.parser
        if parser is None:
            self._drop()  # unasked-for bytes: the connection cannot be trusted
            return
        parser.feed(nbytes)
        self._heard = self._clock.time()
        if parser.done:
            self._wake()

    def eof_received(self) -> bool:
        self._drop()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    async def exchange(self, requests: bytes, parser: AnswerParser) -> None:
        """Write ``requests`` and read their answers until ``parser`` is done or the link fails."""
        assert self.transport is not None
        if self.lost:
            return
        self.parser = parser
        self._waiter = self._loop.create_future()
        self._heard = self._clock.time()
        self._timer = self._clock.call_later(self._read_timeout, self._check)
        try:
            self.transport.write(requests)
            await self._waiter
        finally:
            self._stop_timer()
            self.parser = self._waiter = None
            if not parser.reusable:
                self._drop()

    def close(self) -> None:
        """Close the connection."""
        self._drop()

    def _check(self) -> None:
        """Drop the connection if nothing came for ``read_timeout``, else look again then."""
        quiet = self._clock.time() - self._heard
        if quiet >= self._read_timeout:
            self._timer = None
            self.stalled = True
            self._drop()
        else:
            self._timer = self._clock.call_later(self._read_timeout - quiet, self._check)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _drop(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class PipelinedGets:
    """Whole-object GETs of a client's buckets, pipelined a group at a time; ranged GETs one by one."""

    def __init__(
        self, lean: LeanRequests, *, connect_timeout: float, read_timeout: float, clock: Clock | None = None
    ) -> None:
        self._lean = lean
        self._given_clock = clock
        self._connect_timeout, self._read_timeout = connect_timeout, read_timeout
        self._idle: dict[str, list[_Link]] = {}
        self._refused: dict[str, float] = {}  # origin -> until when it is not pipelined to
        self._tls: ssl.SSLContext | None = None
        self._tls_known = False

    async def get(self, bucket: str, keys: Sequence[str], views: Sequence[memoryview]) -> list[bool]:
        """Read each object whole into its view, which is its size; whether each was read."""
        filled = [False] * len(keys)
        signed = await self._sign(bucket, keys, views) if len(keys) > 1 else None
        if signed is None:
            return filled
        origin, requests = signed
        pending = list(range(len(keys)))
        for _ in range(CONNECTIONS_PER_GROUP):
            link, reused = await self._link(origin)
            if link is None:
                break
            parser = AnswerParser([views[i] for i in pending])
            self._lean.sent("GetObject", len(pending))
            await link.exchange(b"".join(requests[i] for i in pending), parser)
            for index, done in zip(pending, parser.filled, strict=True):
                filled[index] = done
            if parser.reusable:
                self._keep(origin, link)
            if not reused and parser.closed and parser.answered == 1 < len(pending):
                self._refuse(origin, "the store closes the connection after each answer", math.inf)
            elif link.stalled:
                self._refuse(origin, "the store stopped answering a pipelined group", STALL_PAUSE)
            pending = pending[parser.answered :]
            if not pending or self._refusing(origin) or (parser.answered == 0 and not reused):
                break
        if pending:
            log.debug("pipelined_gets_unanswered", bucket=bucket, objects=len(pending))
        return filled

    async def get_range(self, bucket: str, key: str, etag: str | None, first: int, view: memoryview) -> bool:
        """One ranged GET of ``key`` from byte ``first`` straight into ``view``; whether it filled it.

        Pinned to ``etag`` (``If-Match``) when given. The answer's body goes from the socket
        into ``view`` (``recv_into``), not through aiohttp's pieces and a copy. False (for the
        caller to GET it the botocore way, which reports its error) when the route is unknown,
        no connection answers, or the answer is not the plain range asked for.
        """
        headers = [("Range", f"bytes={first}-{first + len(view) - 1}")]
        if etag:
            headers.append(("If-Match", etag))
        prepared = await self._lean.prepare(bucket, key, "GET", headers)
        if prepared is None or not view:
            return False
        for _ in range(2):  # an idle connection the store closed meanwhile answers nothing
            link, reused = await self._link(prepared.origin)
            if link is None:
                return False
            parser = AnswerParser([view], [first])
            self._lean.sent("GetObject")
            await link.exchange(_encode(prepared), parser)
            if parser.reusable:
                self._keep(prepared.origin, link)
            if parser.answered or not reused:
                return parser.filled[0]
        return False

    async def _sign(
        self, bucket: str, keys: Sequence[str], views: Sequence[memoryview]
    ) -> tuple[str, list[bytes]] | None:
        """The origin and each object's signed GET; None if the route is unknown or refused."""
        origin, requests = "", []
        for key, view in zip(keys, views, strict=True):
            whole = [("Range", f"bytes=0-{len(view) - 1}")]
            prepared = await self._lean.prepare(bucket, key, "GET", whole)
            if prepared is None or self._refusing(prepared.origin):
                return None
            origin = prepared.origin
            requests.append(_encode(prepared))
        return origin, requests

    async def _link(self, origin: str) -> tuple[_Link | None, bool]:
        """An idle connection to ``origin`` (True), else a new one (False); None if none opens."""
        idle = self._idle.get(origin, [])
        while idle:
            link = idle.pop()
            if not link.lost:
                return link, True
        return await self._connect(origin), False

    async def _connect(self, origin: str) -> _Link | None:
        parts = urlsplit(origin)
        tls = await self._tls_context() if parts.scheme == "https" else None
        if parts.scheme == "https" and tls is None:
            return None
        host, port = parts.hostname or "", parts.port or (443 if tls is not None else 80)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, link = await loop.create_connection(
                    lambda: _Link(self._read_timeout, self._clock()),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            log.debug("pipelined_connect_failed", origin=origin, error=repr(exc))
            return None
        return link

    async def _tls_context(self) -> ssl.SSLContext | None:
        """The client's TLS context, as its aiohttp connector has it; None if it cannot be copied."""
        if not self._tls_known:
            session = await self._lean.http_session._get_session(None)
            setting = tls_context_of(session.connector)
            if setting is True:
                self._tls = await asyncio.to_thread(ssl.create_default_context)
            elif setting is False:
                self._tls = unverified_context()
            else:
                self._tls = setting
            self._tls_known = True
        return self._tls

    def _refuse(self, origin: str, reason: str, seconds: float) -> None:
        log.info("pipelining_off", origin=origin, reason=reason, seconds=seconds)
        self._refused[origin] = self._clock().time() + seconds

    def _refusing(self, origin: str) -> bool:
        """Whether ``origin`` is not to be pipelined to now."""
        until = self._refused.get(origin)
        return until is not None and self._clock().time() < until

    def _clock(self) -> Clock:
        """The clock given, else the running loop's."""
        return self._given_clock if self._given_clock is not None else asyncio.get_running_loop()

    def _keep(self, origin: str, link: _Link) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) < IDLE_LIMIT:
            idle.append(link)
        else:
            link.close()

    def idle_connections(self) -> int:
        """How many connections are open and waiting for a group."""
        return sum(not link.lost for links in self._idle.values() for link in links)

    def close(self) -> None:
        """Close the idle connections."""
        for links in self._idle.values():
            for link in links:
                link.close()
        self._idle.clear()


def _encode(request: Prepared) -> bytes:
    lines = [f"GET {request.path} HTTP/1.1"]
    lines.extend(f"{name}: {value}" for name, value in request.headers)
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def tls_context_of(connector: Any) -> ssl.SSLContext | bool | None:
    """The TLS setting of an aiohttp connector: its context, True (default), False (unverified) or None."""
    value = getattr(connector, "_ssl", None)
    return value if isinstance(value, ssl.SSLContext | bool) else None  # None: a fingerprint, or unknown


def unverified_context() -> ssl.SSLContext:
    """A TLS context that checks neither certificate nor host name (``verify_tls: false``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context

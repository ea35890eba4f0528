"""Admission: a bound on the API's work, so clients that give up cannot stall it.

``ApiService`` wraps the app in ``Admission``: every HTTP request but ``/livez`` and ``/healthz`` passes
here first. At most ``ACTIVE`` requests are worked on at once (as many as the API has
threads, ``aio.API_THREADS``) and at most ``WAITING`` more wait for a turn, first come
first served (writes before reads: a job's notify is not held up by a dashboard's listing),
reads for at most ``QUEUE_SECONDS`` and writes for at most ``DEADLINE_SECONDS``; any
further one, and one whose wait ran out, is answered 503. A read (GET, HEAD) not answered
``DEADLINE_SECONDS`` after it arrived is answered 503 and its work cancelled. Every 503 from here is a
problem+json with ``Retry-After``. What a request runs off the event loop goes to the API's
own thread pool (``aio.api_lane``), never the data path's.

A request whose client went away (it timed out and closed the connection) is dropped: while
it waits it leaves the queue, and a read being worked on is cancelled. A write that has
begun runs to its end whatever happens (its client could not know how far it got); its
deadline bounds only its wait. Work cut short keeps its turn until it has stopped (a
catalog call already in a thread finishes first), so ``ACTIVE`` bounds the threads and
catalog connections in use, not only the answers.

Before this, fifty clients with a 1 s timeout left every request they gave up on queued
on anyio's 40 threads and still worked on: a second round of clients got no answer in 15 s,
then 503 ``QueuePool limit ... reached`` as the abandoned requests held the catalog's
connections, and the pipeline's commits waited behind them.
"""

from __future__ import annotations

from collections import deque

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tierd.api.problems import problem
from tierd.daemon.aio import API_THREADS, api_lane
from tierd.logs import get_logger

__all__ = ["ACTIVE", "DEADLINE_SECONDS", "QUEUE_SECONDS", "RETRY_AFTER_SECONDS", "WAITING", "Admission"]

log = get_logger(__name__)

#: Requests worked on at once.
ACTIVE = API_THREADS
#: Reads that may wait for a turn, and writes likewise.
WAITING = 32
#: The longest wait for a turn. A queue that does not drain faster than this is a backlog
#: no client waits out: answering 503 then beats letting an impatient client time out (a
#: request whose turn comes after its client left is work nobody reads).
QUEUE_SECONDS = 0.5
#: Seconds from a read's arrival to its answer, and the longest a write waits for its turn.
DEADLINE_SECONDS = 10.0
#: What a 503 from here asks the client to wait, in whole seconds.
RETRY_AFTER_SECONDS = 1
#: Paths that skip admission: the liveness checks answer from the event loop alone.
EXEMPT = frozenset({"/livez", "/healthz"})
#: Paths under this skip it too: a peer's file moves for as long as its bytes take, on the
#: event loop and the I/O pool (never the API's threads), bounded by the peer tier's own
#: ``concurrency`` (``tierd.api.routes.peer``).
EXEMPT_PREFIX = "/v1/peer/"
#: At most one ``api_busy`` log line (with the count of 503s since the last) this often.
LOG_EVERY_SECONDS = 10.0
#: Methods whose work may be cancelled: they change nothing.
READS = frozenset({"GET", "HEAD"})


class Admission:
    """ASGI middleware bounding the requests worked on, waiting, and how long each may take."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        active: int = ACTIVE,
        waiting: int = WAITING,
        queue_seconds: float = QUEUE_SECONDS,
        deadline: float = DEADLINE_SECONDS,
    ) -> None:
        self.app = app
        self.active, self.waiting = active, waiting
        self.queue_seconds, self.deadline = queue_seconds, deadline
        self._turns = _Turns(active)
        self._refused = 0
        self._logged_at = -LOG_EVERY_SECONDS

    @property
    def waiting_now(self) -> int:
        """Requests waiting for a turn right now."""
        return self._turns.waiting(read=True) + self._turns.waiting(read=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI call: admitted, queued, or answered 503 at once."""
        if scope["type"] != "http" or scope["path"] in EXEMPT or scope["path"].startswith(EXEMPT_PREFIX):
            await self.app(scope, receive, send)
            return
        read = scope["method"] in READS
        if not self._turns.free and self._turns.waiting(read=read) >= self.waiting:
            detail = f"the API is busy: {self.active} in progress, {self.waiting} waiting"
            await self._busy(scope, send, detail)
            return
        exchange = _Exchange(scope, receive, send)
        error: Exception | None = None
        with api_lane():
            async with anyio.create_task_group() as watch:
                watch.start_soon(exchange.pump)
                try:
                    await self._serve(exchange, read, anyio.current_time() + self.deadline)
                except Exception as exc:  # raised as itself, not in a group: the server logs it
                    error = exc
                finally:
                    watch.cancel_scope.cancel()
        if error is not None:
            raise error

    async def _serve(self, exchange: _Exchange, read: bool, due: float) -> None:
        if not await self._wait_for_turn(exchange, read, due):
            return
        try:
            if read:
                await self._run_read(exchange, due)
            else:
                await self.app(exchange.scope, exchange.receive, exchange.send)
        finally:
            self._turns.release()

    async def _wait_for_turn(self, exchange: _Exchange, read: bool, due: float) -> bool:
        """Take a turn; False (answered 503, or the client gone) when none came in time."""
        patience = min(self.queue_seconds, self.deadline) if read else self.deadline
        admitted = False
        with anyio.move_on_after(min(due - anyio.current_time(), patience)):
            async with anyio.create_task_group() as waiting:
                waiting.start_soon(_cancel_when_set, exchange.gone, waiting.cancel_scope)
                await self._turns.acquire(read=read)
                admitted = True
                waiting.cancel_scope.cancel()
        if not admitted and not exchange.gone.is_set():
            detail = f"no turn came within {patience:g} s: the API is busy"
            await self._busy(exchange.scope, exchange.take_over(), detail)
        return admitted

    async def _run_read(self, exchange: _Exchange, due: float) -> None:
        """Run the app; cancel it when its client leaves or its deadline passes unanswered."""
        done = anyio.Event()
        work = anyio.CancelScope()
        error: Exception | None = None

        async def run() -> None:
            nonlocal error
            with work:
                try:
                    await self.app(exchange.scope, exchange.receive, exchange.send)
                except Exception as exc:
                    error = exc
            done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.move_on_after(due - anyio.current_time()):
                async with anyio.create_task_group() as either:
                    either.start_soon(_cancel_when_set, done, either.cancel_scope)
                    either.start_soon(_cancel_when_set, exchange.gone, either.cancel_scope)
            if not done.is_set() and not exchange.started:  # once answering, the deadline is met
                work.cancel()
                if not exchange.gone.is_set():
                    detail = f"not answered within {self.deadline:g} s: the API is busy"
                    await self._busy(exchange.scope, exchange.take_over(), detail)
        if error is not None:
            raise error

    async def _busy(self, scope: Scope, send: Send, detail: str) -> None:
        """Answer 503 with ``Retry-After``; log how many were refused, at most every few seconds."""
        self._refused += 1
        now = anyio.current_time()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            log.warning(
                "api_busy", refused=self._refused, reason=detail, active=self.active, waiting=self.waiting
            )
            self._refused, self._logged_at = 0, now
        response = problem(503, detail, title="Busy")
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        await response(scope, _no_body, send)


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


class _Turns:
    """``active`` turns, handed to waiting writes first, then to waiting reads, each in arrival order."""

    def __init__(self, active: int) -> None:
        self.free = active
        self._queues: dict[bool, deque[anyio.Event]] = {False: deque(), True: deque()}  # by read

    def waiting(self, *, read: bool) -> int:
        """Reads (or writes) waiting for a turn."""
        return len(self._queues[read])

    async def acquire(self, *, read: bool) -> None:
        """Take a turn, waiting in line for one (cancellable: a turn handed over meanwhile is passed on)."""
        if self.free:
            self.free -= 1
            return
        granted = anyio.Event()
        self._queues[read].append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():
                self.release()
            else:
                self._queues[read].remove(granted)
            raise

    def release(self) -> None:
        """Give a turn back: to the first write waiting, else the first read, else to the free ones."""
        for queue in (self._queues[False], self._queues[True]):
            if queue:
                queue.popleft().set()
                return
        self.free += 1


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class _Exchange:
    """One request's channels as the admission sees them.

    ``pump`` is the only reader of the server's ``receive``. It reads the body only as the
    app asks for it (a request waiting for its turn holds no more of it than the server
    buffers); once the body is in, it waits for the client to leave and sets ``gone``. The
    app's ``send`` is dropped once the admission has answered for it.
    """

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self._receive, self._send = receive, send
        self._messages: deque[Message] = deque()
        self._arrived = anyio.Event()
        self._wanted = anyio.Event()
        self._body_read = not _has_body(scope)
        self.gone = anyio.Event()
        self.started = self.finished = self._refused = False

    async def pump(self) -> None:
        """Read the client's messages until it leaves (or the response is complete)."""
        while True:
            if not self._body_read:
                await self._wanted.wait()
                self._wanted = anyio.Event()
            message = await self._receive()
            self._messages.append(message)
            self._arrived.set()
            if message["type"] == "http.disconnect":
                if not self.finished:
                    self.gone.set()
                return
            if not message.get("more_body", False):
                self._body_read = True

    async def receive(self) -> Message:
        """The app's ``receive``: the next message the pump read (the last, a disconnect, stays)."""
        while not self._messages:
            self._wanted.set()
            await self._arrived.wait()
            self._arrived = anyio.Event()
        if self._messages[0]["type"] == "http.disconnect":
            return self._messages[0]
        return self._messages.popleft()

    async def send(self, message: Message) -> None:
        """The app's ``send``; nothing once the admission answered instead."""
        if self._refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.finished = True
        await self._send(message)

    def take_over(self) -> Send:
        """The server's ``send``, for the admission to answer in the app's place; the app's is cut."""
        self._refused = True
        return self._send

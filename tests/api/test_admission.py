"""Admission over real HTTP: turns, waits, deadlines, and clients that leave (issue 23, item 8).

A small app whose routes wait on events the test sets is served by ``ApiService`` behind an
``Admission`` with small limits; httpx is the client. Every assertion is on what was
answered and what ran, never on how long it took.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.types import ASGIApp

from tierd.api.admission import Admission
from tierd.api.problems import PROBLEM_JSON, install_problem_handlers
from tierd.api.server import ApiService
from tierd.daemon.aio import blocking

DEADLINE = 30.0


class Probe:
    """What the routes saw: who entered, who finished, who was cancelled."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.finished: list[str] = []
        self.cancelled: list[str] = []
        self.release = asyncio.Event()
        self.release_thread = threading.Event()


class Written(BaseModel):
    name: str


def _app(probe: Probe) -> FastAPI:
    app = FastAPI()
    install_problem_handlers(app)

    @app.get("/hold")
    async def hold(name: str) -> dict[str, str]:
        probe.entered.append(name)
        try:
            await probe.release.wait()
        except asyncio.CancelledError:
            probe.cancelled.append(name)
            raise
        probe.finished.append(name)
        return {"name": name}

    @app.get("/sync-hold")
    def sync_hold(name: str) -> dict[str, str]:
        probe.entered.append(name)
        probe.release_thread.wait(DEADLINE)
        probe.finished.append(name)
        return {"name": name}

    @app.post("/write")
    async def write(body: Written) -> dict[str, str]:
        probe.entered.append(body.name)
        await probe.release.wait()
        probe.finished.append(body.name)
        return {"name": body.name}

    @app.get("/quick")
    async def quick() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/healthz")
    @app.get("/livez")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/lane")
    async def lane() -> dict[str, str]:
        return {"thread": await blocking(lambda: threading.current_thread().name)}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    return app


@asynccontextmanager
async def served(probe: Probe, **limits: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Admission]]:
    """The probe's app behind an Admission with ``limits``, and a client for it."""
    made: list[Admission] = []

    def admit(app: ASGIApp) -> ASGIApp:
        made.append(Admission(app, **limits))
        return made[0]

    service = ApiService(_app(probe), "127.0.0.1", 0, admission=admit)
    await service.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.port}", timeout=DEADLINE) as http:
            yield http, made[0]
    finally:
        probe.release.set()
        probe.release_thread.set()
        await service.stop(5)


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` until it holds (or fail after a generous deadline)."""
    async with asyncio.timeout(DEADLINE):
        while not predicate():
            await asyncio.sleep(0.01)
    assert predicate(), what


def in_background(http: httpx.AsyncClient, method: str, path: str, **kw: Any) -> asyncio.Task[httpx.Response]:
    """A request on a connection of its own; cancelling the task closes it (the client leaves)."""

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(base_url=http.base_url, timeout=DEADLINE) as own:
            return await own.request(method, path, **kw)

    return asyncio.create_task(call())


async def left(task: Awaitable[object]) -> None:
    """Cancel a background request: its client closes the connection."""
    assert isinstance(task, asyncio.Task)
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task


def assert_busy(answer: httpx.Response, says: str) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == PROBLEM_JSON
    assert answer.headers["retry-after"] == "1"
    body = answer.json()
    assert body["status"] == 503
    assert says in body["detail"], body


async def test_requests_beyond_the_turns_and_the_queue_are_answered_503_at_once() -> None:
    probe = Probe()
    async with served(probe, active=1, waiting=1, queue_seconds=DEADLINE) as (http, admission):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        second = in_background(http, "GET", "/hold", params={"name": "second"})
        await until(lambda: admission.waiting_now == 1, "the second request to wait")
        assert_busy(
            await http.get("/hold", params={"name": "third"}), "the API is busy: 1 in progress, 1 waiting"
        )
        probe.release.set()
        assert (await first).json() == {"name": "first"}
        assert (await second).json() == {"name": "second"}
    assert probe.entered == ["first", "second"]


async def test_a_waiting_request_whose_client_left_is_never_worked_on() -> None:
    probe = Probe()
    async with served(probe, active=1, waiting=8, queue_seconds=DEADLINE) as (http, admission):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        gone = in_background(http, "GET", "/hold", params={"name": "gone"})
        await until(lambda: admission.waiting_now == 1, "the second request to wait")
        await left(gone)
        await until(lambda: admission.waiting_now == 0, "the abandoned request to leave the queue")
        third = in_background(http, "GET", "/hold", params={"name": "third"})
        await until(lambda: admission.waiting_now == 1, "the third request to wait")
        probe.release.set()
        assert (await first).status_code == 200
        assert (await third).status_code == 200
    assert probe.entered == ["first", "third"]


async def test_a_read_whose_client_left_is_cancelled_and_gives_its_turn_back() -> None:
    probe = Probe()
    async with served(probe, active=1, waiting=0) as (http, _):
        gone = in_background(http, "GET", "/hold", params={"name": "gone"})
        await until(lambda: probe.entered == ["gone"], "the request to be worked on")
        await left(gone)
        await until(lambda: probe.cancelled == ["gone"], "the abandoned read to be cancelled")
        assert (await http.get("/quick")).status_code == 200
    assert probe.finished == []


async def test_a_wait_longer_than_queue_seconds_is_answered_503() -> None:
    probe = Probe()
    async with served(probe, active=1, waiting=8, queue_seconds=0.1) as (http, _):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        assert_busy(await http.get("/quick"), "no turn came within 0.1 s")
        probe.release.set()
        assert (await first).status_code == 200


async def test_waiting_writes_get_their_turn_before_waiting_reads() -> None:
    probe = Probe()
    async with served(probe, active=1, waiting=8, queue_seconds=DEADLINE) as (http, admission):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        read = in_background(http, "GET", "/hold", params={"name": "read"})
        await until(lambda: admission.waiting_now == 1, "the read to wait")
        write = in_background(http, "POST", "/write", json={"name": "write"})
        await until(lambda: admission.waiting_now == 2, "the write to wait")
        probe.release.set()
        for task in (first, read, write):
            assert (await task).status_code == 200
    assert probe.entered == ["first", "write", "read"]


async def test_a_write_waits_for_its_turn_longer_than_a_read() -> None:
    """A job's notify is worth waiting for: it waits up to the deadline, a read only briefly."""
    probe = Probe()
    async with served(probe, active=1, waiting=8, queue_seconds=0.1) as (http, admission):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        write = in_background(http, "POST", "/write", json={"name": "write"})
        await until(lambda: admission.waiting_now == 1, "the write to wait")
        assert_busy(await http.get("/quick"), "no turn came within 0.1 s")
        assert admission.waiting_now == 1  # the write, which came first, still waits
        probe.release.set()
        assert (await first).status_code == 200
        assert (await write).json() == {"name": "write"}


async def test_a_read_past_its_deadline_is_answered_503_and_cancelled() -> None:
    probe = Probe()
    async with served(probe, active=1, deadline=0.2) as (http, _):
        assert_busy(await http.get("/hold", params={"name": "slow"}), "not answered within 0.2 s")
        await until(lambda: probe.cancelled == ["slow"], "the late read to be cancelled")


async def test_a_read_cut_in_a_thread_keeps_its_turn_until_the_thread_returns() -> None:
    """A catalog call in a thread cannot be interrupted: its turn (its thread, its catalog
    connection) stays taken until the call returns, so the bound holds for what really runs."""
    probe = Probe()
    async with served(probe, active=1, queue_seconds=0.1, deadline=0.2) as (http, _):
        assert_busy(await http.get("/sync-hold", params={"name": "stuck"}), "not answered within 0.2 s")
        assert_busy(await http.get("/quick"), "no turn came within 0.1 s")
        probe.release_thread.set()
        await until(lambda: probe.finished == ["stuck"], "the thread to return")
        for _ in range(100):  # the turn comes back once the cancelled request has unwound
            answer = await http.get("/quick")
            if answer.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert answer.status_code == 200, answer.text


async def test_a_write_whose_client_left_runs_to_its_end() -> None:
    probe = Probe()
    async with served(probe, active=1) as (http, _):
        write = in_background(http, "POST", "/write", json={"name": "kept"})
        await until(lambda: probe.entered == ["kept"], "the write to begin")
        await left(write)
        probe.release.set()
        await until(lambda: probe.finished == ["kept"], "the write to end")


async def test_a_write_that_waited_for_its_turn_gets_its_whole_body() -> None:
    probe = Probe()
    async with served(probe, active=1, waiting=8, queue_seconds=DEADLINE) as (http, admission):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        name = "x" * 100_000  # more than one read of the socket
        write = in_background(http, "POST", "/write", json={"name": name})
        await until(lambda: admission.waiting_now == 1, "the write to wait")
        probe.release.set()
        assert (await first).status_code == 200
        assert (await write).json() == {"name": name}


@pytest.mark.parametrize("path", ["/livez", "/healthz"])
async def test_liveness_is_answered_whatever_the_load(path: str) -> None:
    """A liveness probe is not failed (and the daemon restarted) for the API being busy."""
    probe = Probe()
    async with served(probe, active=1, waiting=0) as (http, _):
        first = in_background(http, "GET", "/hold", params={"name": "first"})
        await until(lambda: probe.entered == ["first"], "the first request to be worked on")
        assert (await http.get(path)).status_code == 200
        assert_busy(await http.get("/quick"), "the API is busy")
        probe.release.set()
        assert (await first).status_code == 200


async def test_a_request_blocks_on_the_api_pool_and_services_on_the_io_pool() -> None:
    probe = Probe()
    async with served(probe) as (http, _):
        answer = await http.get("/lane")
    assert answer.json()["thread"].startswith("tierd-api"), answer.json()
    assert (await blocking(lambda: threading.current_thread().name)).startswith("tierd-io")


async def test_an_error_in_a_route_is_a_500_problem_and_reaches_the_server_as_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    probe = Probe()
    async with served(probe) as (http, _):
        answer = await http.get("/boom")
    assert answer.status_code == 500
    assert answer.headers["content-type"] == PROBLEM_JSON
    logged = [r.exc_info[0] for r in caplog.records if r.name == "uvicorn.error" and r.exc_info]
    assert logged == [RuntimeError]  # not wrapped in an ExceptionGroup by the admission's task groups

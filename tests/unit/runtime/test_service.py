"""InFlight drains with a bound and reports what was finished and what was cut; PassLoop
runs passes (woken, at an interval, at once when asked, sooner while the catalog fails),
logs each failure, counts its passes, and stops with a bound."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from structlog.testing import capture_logs

from tierd.daemon.outage import CATALOG_RETRY, CatalogOutage
from tierd.daemon.service import InFlight, PassLoop
from tierd.errors import CatalogError, TierdError


async def test_drain_finishes_quick_work_and_cuts_the_rest() -> None:
    inflight = InFlight("test")
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    inflight.spawn(asyncio.sleep(0.01), "quick")
    inflight.spawn(slow(), "slow")
    finished, cut = await inflight.drain(0.2)
    assert (finished, cut) == (["quick"], ["slow"])
    assert cancelled.is_set()
    assert len(inflight) == 0


async def test_drain_with_nothing_in_flight() -> None:
    assert await InFlight("idle").drain(1) == ([], [])


def _loop(run_pass: Callable[[], Awaitable[bool | None]], interval: float = 3600, **kw: Any) -> PassLoop:
    return PassLoop("test", run_pass, interval, **kw)


async def test_a_pass_then_a_wait_until_woken_then_none_after_stop() -> None:
    async def count() -> None:
        return None

    loop = _loop(count)
    loop.start("test:loop")
    assert await asyncio.wait_for(loop.pass_done(after=0), 5) == 1
    loop.wake()
    assert await asyncio.wait_for(loop.pass_done(after=1), 5) == 2
    assert not await loop.stop(5)
    assert loop.passes == 2
    assert await loop.pass_done(after=1) == 2  # at once: two have ended


async def test_a_pass_asking_for_more_is_followed_at_once() -> None:
    more = [True, True, False]

    async def work() -> bool:
        return more.pop(0)

    loop = _loop(work)
    loop.start("test:loop")
    assert await asyncio.wait_for(loop.pass_done(after=2), 5) == 3  # no wake, an hour's interval
    assert await loop.stop(5) is False


async def test_each_failure_is_logged_and_the_next_pass_comes() -> None:
    failures: list[Exception] = [TierdError("no room"), ValueError("bug"), CatalogError("refused")]
    outage = CatalogOutage("test")

    async def fail() -> None:
        if failures:
            raise failures.pop(0)

    loop = _loop(fail, outage=outage)
    with capture_logs() as logs:
        loop.start("test:loop")
        for n in range(4):
            assert await asyncio.wait_for(loop.pass_done(after=n), 5) == n + 1
            loop.wake()
        await loop.stop(5)
    events = [(e["event"], e["log_level"]) for e in logs]
    assert events == [
        ("test_pass_failed", "warning"),
        ("test_pass_crashed", "error"),
        ("catalog_unavailable", "error"),
        ("catalog_available", "info"),
    ]
    assert logs[1]["exc_info"] is True
    assert not outage.down


async def test_while_the_catalog_fails_the_wait_is_the_outages_delay() -> None:
    failures = [CatalogError("refused")] * 2
    idle: list[int] = []

    async def fail() -> None:
        if failures:
            raise failures.pop(0)

    outage = CatalogOutage("test", retry=dataclasses.replace(CATALOG_RETRY, base=0.001, cap=0.001))
    loop = _loop(fail, outage=outage, sooner_while_down=True)
    loop.on_idle = lambda: idle.append(loop.passes)
    loop.start("test:loop")
    assert await asyncio.wait_for(loop.pass_done(after=2), 5) == 3  # no wake, an hour's interval
    await loop.stop(5)
    assert idle == [1, 2]  # each wait ran out unwoken
    assert not outage.down


async def test_wait_first_begins_with_a_wait() -> None:
    seen: list[str] = []

    async def work() -> None:
        seen.append("pass")

    loop = _loop(work, interval=0.001, wait_first=True, on_idle=lambda: seen.append("idle"))
    loop.start("test:loop")
    await asyncio.wait_for(loop.pass_done(after=0), 5)
    await loop.stop(5)
    assert seen[:2] == ["idle", "pass"]


async def test_stop_cuts_a_pass_that_outlasts_the_bound() -> None:
    began, cancelled = asyncio.Event(), asyncio.Event()

    async def hang() -> None:
        began.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    loop = _loop(hang)
    loop.start("test:loop")
    await asyncio.wait_for(began.wait(), 5)
    assert await loop.stop(0)
    assert cancelled.is_set()
    assert loop.passes == 0

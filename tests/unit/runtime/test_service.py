"""InFlight drains with a bound and reports what was finished and what was cut."""

from __future__ import annotations

import asyncio

from tierd.daemon.service import InFlight


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

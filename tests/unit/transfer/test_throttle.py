"""Bandwidth accounting and priority pools, on a fake clock (no timing thresholds)."""

from __future__ import annotations

import asyncio

import pytest

from tierd.daemon.transfer.throttle import PriorityPool, TokenBucket, retuned

MiB = 1024 * 1024


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_bucket_long_run_rate_is_the_cap() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4 * MiB, burst=256 * 1024, clock=clock, sleep=clock.sleep)
    for _ in range(64):
        await bucket.take(1 * MiB)
    # Each chunk waits for the previous ones' debt: the 64th goes once 63 MiB, less the
    # free burst, have been paid for at 4 MiB/s.
    assert clock.now == pytest.approx((63 * MiB - 256 * 1024) / (4 * MiB))
    assert bucket.tokens == pytest.approx(-1 * MiB)


async def test_bucket_idle_time_refills_only_up_to_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1 * MiB, burst=512 * 1024, clock=clock, sleep=clock.sleep)
    clock.now += 3600  # an hour idle must not allow an hour's worth of bytes at once
    await bucket.take(2 * MiB)
    assert bucket.tokens == pytest.approx(-1.5 * MiB)
    await bucket.take(1)
    assert clock.now == pytest.approx(3600 + 1.5)


async def test_bucket_serves_the_newest_first_and_forgets_the_cancelled() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1 * MiB, burst=0.0, clock=clock, sleep=clock.sleep)
    await bucket.take(4 * MiB)  # in debt for 4 s
    served: list[str] = []

    async def reader(name: str, priority: int) -> None:
        await bucket.take(1 * MiB, priority)
        served.append(name)

    old = asyncio.create_task(reader("old", 1))
    cut = asyncio.create_task(reader("cut", 5))
    new = asyncio.create_task(reader("new", 9))
    await asyncio.sleep(0)
    cut.cancel()  # an older transfer cancelled at shutdown while waiting
    await asyncio.gather(old, new, cut, return_exceptions=True)
    assert served == ["new", "old"]
    # the cancelled reader's megabyte was never charged: 4 s of debt, then 1 s for "new"
    assert clock.now == pytest.approx(5.0)
    assert bucket.tokens == pytest.approx(-1 * MiB)


def test_bucket_refuses_a_zero_rate() -> None:
    with pytest.raises(ValueError, match="positive"):
        TokenBucket(0)


async def test_pool_serves_the_highest_priority_first() -> None:
    pool = PriorityPool(1)
    order: list[str] = []
    await pool.acquire(1, priority=0)

    async def want(name: str, priority: int) -> None:
        async with pool.hold(1, priority):
            order.append(name)

    tasks = [asyncio.create_task(want(n, p)) for n, p in [("old", 1), ("newest", 3), ("mid", 2), ("old2", 1)]]
    await asyncio.sleep(0)
    pool.release(1)
    await asyncio.gather(*tasks)
    assert order == ["newest", "mid", "old", "old2"]
    assert pool.free == 1


async def test_pool_clamps_big_requests_and_keeps_strict_order() -> None:
    pool = PriorityPool(10)
    assert pool.clamp(50) == 10
    first = await pool.acquire(6)
    big = asyncio.create_task(pool.acquire(50))  # needs all 10: waits for the 6
    await asyncio.sleep(0)
    small = asyncio.create_task(pool.acquire(2))  # would fit, but must not overtake
    await asyncio.sleep(0)
    assert not big.done()
    assert not small.done()
    pool.release(first)
    assert await big == 10
    pool.release(10)
    assert await small == 2
    pool.release(2)
    assert pool.free == 10


async def test_pool_cancelled_waiter_gives_way_and_leaks_nothing() -> None:
    pool = PriorityPool(2)
    held = await pool.acquire(2)
    blocked = asyncio.create_task(pool.acquire(2, priority=9))
    await asyncio.sleep(0)
    later = asyncio.create_task(pool.acquire(1))
    await asyncio.sleep(0)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
    pool.release(held)
    assert await later == 1
    pool.release(1)
    assert pool.free == 2


async def test_a_new_rate_applies_to_the_debt_already_run_up() -> None:
    """A reload's ``bandwidth_limit``: the time so far counts at the old rate, the rest at the new."""
    clock = FakeClock()
    bucket = TokenBucket(1 * MiB, burst=0, clock=clock, sleep=clock.sleep)
    await bucket.take(4 * MiB)  # 4 MiB of debt at 1 MiB/s
    clock.now = 1.0  # 1 MiB repaid
    bucket.set_rate(3 * MiB, burst=0)
    await bucket.take(1)
    assert clock.now == pytest.approx(2.0)  # the other 3 MiB at 3 MiB/s
    with pytest.raises(ValueError, match="positive"):
        bucket.set_rate(0)
    assert bucket.rate == 3 * MiB


def test_a_reload_keeps_re_rates_makes_or_drops_the_bucket() -> None:
    """``retuned``: one bucket per tier across reloads, so the transfers paying it see the new rate."""
    assert retuned(None, None) is None
    made = retuned(None, 2 * MiB)
    assert made is not None
    assert made.rate == 2 * MiB
    assert retuned(made, 2 * MiB) is made
    assert retuned(made, 5 * MiB) is made
    assert made.rate == 5 * MiB
    assert retuned(made, None) is None
    assert retuned(made, 0) is None

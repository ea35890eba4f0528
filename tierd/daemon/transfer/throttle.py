"""Limits on transfers: a bandwidth cap per tier and a pool of file slots per tier.

Both serve the highest priority first, so the newest checkpoint's files get the slots
and the bandwidth before older ones. (The memory budget for transfer buffers is the
backends' ``ByteBudget``, shared by every tier.)
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["PriorityPool", "TokenBucket", "retuned"]


@dataclass(order=True)
class _Waiter:
    key: tuple[int, int]
    amount: int = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


class TokenBucket:
    """A bytes-per-second cap shared by every transfer into one tier, newest checkpoint first.

    A caller pays for bytes it has read before passing them on: it waits until the debt
    of earlier grants is repaid (the balance is back to zero), then takes its bytes,
    which may drive the balance negative again. So the long-run rate never exceeds
    ``rate``; waiting callers are served highest priority first; and a caller cancelled
    while waiting leaves no debt behind for the others.
    """

    def __init__(
        self,
        rate: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        #: Bytes per second, and the bytes that may pass at once after an idle period.
        self.rate, self.burst = _rate_and_burst(rate, burst)
        self._clock = clock
        self._sleep = sleep
        self.tokens = self.burst
        self._stamp = clock()
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._pump: asyncio.Task[None] | None = None

    def set_rate(self, rate: float, *, burst: float | None = None) -> None:
        """Cap at ``rate`` bytes per second from now on (a reload's ``bandwidth_limit``).

        Debt already run up is repaid at the new rate (a waiter asleep on the old one wakes when
        it planned to, then goes on at the new). Raises ValueError unless ``rate`` > 0.
        """
        new = _rate_and_burst(rate, burst)
        self._refill()  # the time so far counts at the old rate
        self.rate, self.burst = new
        self.tokens = min(self.tokens, self.burst)

    def _refill(self) -> float:
        now = self._clock()
        self.tokens = min(self.burst, self.tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        return self.tokens

    async def take(self, nbytes: int, priority: int = 0) -> None:
        """Wait until earlier debt is repaid (higher priorities first), then charge ``nbytes``."""
        if not self._waiters and self._refill() >= 0:
            self.tokens -= nbytes
            return
        waiter = _Waiter((-priority, next(self._seq)), nbytes, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiters, waiter)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._serve(), name="pipeline:bandwidth")
        await waiter.future

    async def _serve(self) -> None:
        """Grant waiters in priority order as the debt is repaid; ends when none are left."""
        while True:
            while self._waiters and self._waiters[0].future.done():
                heapq.heappop(self._waiters)  # cancelled while waiting: owes nothing
            if not self._waiters:
                return
            if self._refill() >= 0:
                waiter = heapq.heappop(self._waiters)
                self.tokens -= waiter.amount
                waiter.future.set_result(None)
                continue
            await self._sleep(-self.tokens / self.rate)


def retuned(bucket: TokenBucket | None, limit: float | None) -> TokenBucket | None:
    """The bucket for a tier's ``bandwidth_limit`` ``limit`` after a reload.

    ``bucket`` itself, re-rated where the limit changed (the transfers paying it take the new
    rate at once); a new one where there was none; None where the limit is gone.
    """
    if not limit:
        return None
    if bucket is None:
        return TokenBucket(float(limit))
    if bucket.rate != float(limit):
        bucket.set_rate(float(limit))
    return bucket


def _rate_and_burst(rate: float, burst: float | None) -> tuple[float, float]:
    """``rate``, and ``burst`` or a tenth of a second's worth of it; ValueError unless rate > 0."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    return float(rate), float(burst) if burst is not None else float(rate) / 10


class PriorityPool:
    """``capacity`` units handed out to the highest priority waiter first (FIFO within a priority).

    A request larger than the whole pool is clamped to it, so one huge transfer still
    runs, alone.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.free = capacity
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()

    def clamp(self, amount: int) -> int:
        """The units a request for ``amount`` actually takes."""
        return max(1, min(amount, self.capacity))

    async def acquire(self, amount: int = 1, priority: int = 0) -> int:
        """Wait for ``amount`` units (clamped); returns the units taken, to pass to release()."""
        amount = self.clamp(amount)
        if not self._waiters and self.free >= amount:
            self.free -= amount
            return amount
        waiter = _Waiter((-priority, next(self._seq)), amount, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiters, waiter)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(amount)  # granted just as we were cancelled: give it back
            else:
                self._wake()  # our place at the head may have been blocking smaller requests
            raise
        return amount

    def release(self, amount: int) -> None:
        """Return ``amount`` units and hand them to the waiters they now satisfy."""
        self.free += amount
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            head = self._waiters[0]
            if head.future.done():  # cancelled while waiting
                heapq.heappop(self._waiters)
                continue
            if head.amount > self.free:
                return  # strict order: a big request at the head is not starved by small ones
            heapq.heappop(self._waiters)
            self.free -= head.amount
            head.future.set_result(None)

    @asynccontextmanager
    async def hold(self, amount: int = 1, priority: int = 0) -> AsyncIterator[int]:
        """``async with pool.hold(n, priority) as taken:`` acquire, then release on exit."""
        taken = await self.acquire(amount, priority)
        try:
            yield taken
        finally:
            self.release(taken)

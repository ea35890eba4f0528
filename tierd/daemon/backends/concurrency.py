"""Bounded parallelism for transfers, and blocking calls that must not be cut short.

``for_each`` runs parts or ranges a few at a time; ``uninterrupted`` lets a thread's
``pwrite`` finish before a cancellation is raised; ``blocking_on`` hands a buffer to the
I/O pool without the executor keeping it alive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Concatenate, ParamSpec, TypeVar

from tierd.daemon.aio import blocking

__all__ = ["blocking_on", "for_each", "uninterrupted"]

T = TypeVar("T")
P = ParamSpec("P")


async def for_each(items: Iterable[T], fn: Callable[[T], Awaitable[None]], concurrency: int) -> None:
    """Run ``fn`` over ``items`` with at most ``concurrency`` at once.

    The first failure cancels the rest and is raised as itself (no ExceptionGroup).
    """
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:
            await fn(item)

    tasks = [asyncio.create_task(worker()) for _ in range(max(1, concurrency))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task in done and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def uninterrupted(aw: Awaitable[T], *, undo: Callable[[T], Awaitable[None]] | None = None) -> T:
    """Await ``aw``; if cancelled meanwhile, let it finish first, then re-raise.

    A thread doing ``pwrite`` on a file descriptor cannot be stopped; returning early
    would let the caller close the descriptor while the thread still writes to it (and
    a reused descriptor number could point at another file). ``undo(result)`` cleans up
    after work that finished for a caller that was cancelled meanwhile.
    """
    task = asyncio.ensure_future(aw)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if undo is not None and not task.cancelled() and task.exception() is None:
            await asyncio.shield(undo(task.result()))
        raise


async def blocking_on(
    view: memoryview, fn: Callable[Concatenate[memoryview, P], T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """``fn(view, *args, **kwargs)`` on the I/O pool, the thread letting go of ``view`` on return.

    An executor keeps a finished call's arguments until its thread gets round to dropping
    them, by which time the loop may have released the buffer's budget and allocated the
    next buffer: two buffers alive for one charge (four POSIX copies under a 32 MiB budget
    held 40 to 48 MiB of chunks). Handed over in a list the call empties, a buffer lives
    no longer than its charge.
    """
    return await blocking(_take, [view], fn, *args, **kwargs)


def _take(
    handoff: list[memoryview],
    fn: Callable[Concatenate[memoryview, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    return fn(handoff.pop(), *args, **kwargs)

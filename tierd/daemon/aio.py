"""The one place blocking work (file system, hashing, catalog) leaves the event loop.

Two bounded thread pools. The daemon's services (copies, restores, scrubs, detection) use
the I/O pool, ``MAX_THREADS`` threads. Whatever runs while an API request is served
(``api_lane``: ``tierd.api.admission`` enters it for every request) uses the API's own
pool, ``API_THREADS`` threads: a notify that hashes a thousand files, or fifty clients
listing checkpoints, queue there and never before a copy's reads, writes and commits. The
API's synchronous routes run on anyio's worker threads, whose limiter the API server sets to
the same ``API_THREADS`` (``tierd.api.server``). The catalog's connection pool has a
connection for every thread of both (``catalog.db``), so no catalog call waits for one.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

__all__ = ["API_THREADS", "MAX_THREADS", "api_lane", "blocking", "shutdown_executor"]

P = ParamSpec("P")
T = TypeVar("T")

MAX_THREADS = 32
#: Threads the API's work may use at once. Its calls are short catalog reads and writes
#: that hold the GIL most of the time: on a 2-core machine more threads add no answers per
#: second, only contention with the data path's threads for the GIL.
API_THREADS = 2

_executors: dict[str, ThreadPoolExecutor] = {}
_SIZES = {"io": MAX_THREADS, "api": API_THREADS}
_lane: contextvars.ContextVar[str] = contextvars.ContextVar("tierd_aio_lane", default="io")


def _get_executor(lane: str) -> ThreadPoolExecutor:
    executor = _executors.get(lane)
    if executor is None:
        executor = ThreadPoolExecutor(max_workers=_SIZES[lane], thread_name_prefix=f"tierd-{lane}")
        _executors[lane] = executor
    return executor


@contextmanager
def api_lane() -> Iterator[None]:
    """Within this block (and the tasks and threads it starts), ``blocking`` uses the API's pool."""
    token = _lane.set("api")
    try:
        yield
    finally:
        _lane.reset(token)


async def blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` on the bounded thread pool of this lane and await its result."""
    loop = asyncio.get_running_loop()
    executor = _get_executor(_lane.get())
    return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))


def shutdown_executor() -> None:
    """Stop both thread pools (at daemon exit); queued work is cancelled."""
    for executor in _executors.values():
        executor.shutdown(wait=False, cancel_futures=True)
    _executors.clear()

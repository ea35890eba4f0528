"""The one place blocking work (file system, hashing, catalog) leaves the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["blocking", "shutdown_executor"]

P = ParamSpec("P")
T = TypeVar("T")

_executor: ThreadPoolExecutor | None = None
MAX_THREADS = 32


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="tierd-io")
    return _executor


async def blocking(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` on the bounded I/O thread pool and await its result."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_get_executor(), functools.partial(fn, *args, **kwargs))


def shutdown_executor() -> None:
    """Stop the I/O thread pool (at daemon exit); queued work is cancelled."""
    global _executor
    if _executor is not None:
        _executor.shutdown(wait=False, cancel_futures=True)
        _executor = None

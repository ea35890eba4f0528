"""The service lifecycle every long-lived part of the daemon follows (after arq's worker)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from tierd.logs import get_logger

__all__ = ["InFlight", "Service"]

log = get_logger(__name__)


class Service(Protocol):
    """A part of the daemon with a start and a bounded stop."""

    name: str

    async def start(self) -> None:
        """Begin work; return once the service is up."""

    async def stop(self, timeout: float) -> None:
        """Take no new work, let in-flight work finish for up to ``timeout`` seconds, cancel the rest."""


class InFlight:
    """Tracks a service's in-flight tasks so stop() can drain them with a bound."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._tasks: dict[asyncio.Task[Any], str] = {}

    def spawn(self, coro: Coroutine[Any, Any, Any], description: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a tracked task described (in logs) by ``description``."""
        task = asyncio.create_task(coro, name=f"{self.service}:{description}")
        self._tasks[task] = description
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("task_failed", service=self.service, task=task.get_name(), error=repr(exc))

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float) -> tuple[list[str], list[str]]:
        """Wait up to ``timeout`` for every task, then cancel what is left.

        Returns (finished, cut): descriptions of the tasks that ended and of those cancelled.
        """
        pending = dict(self._tasks)
        if not pending:
            return [], []
        done, still = await asyncio.wait(pending, timeout=max(timeout, 0))
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=5)
        finished = [pending[t] for t in done]
        cut = [pending[t] for t in still]
        log.info("drained", service=self.service, finished=finished, cut=cut)
        return finished, cut

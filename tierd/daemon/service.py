"""The service lifecycle every long-lived part of the daemon follows (after arq's worker).

- ``Service``  the start and bounded stop the runtime calls
- ``Reconfigurable`` a service that takes a reload's config (retention, bandwidth limits)
- ``InFlight`` a service's tasks, drained with a bound at stop
- ``PassLoop`` the loop of passes the restore, retention, pipeline, scrub and fleet services
  and the waiting sweep run: a pass, then a wait for the interval or a wake-up, each pass's
  failure logged (a catalog outage once, through ``CatalogOutage``), until stopped; it
  counts the passes
- ``Tally``    a count a coroutine can wait on (``PassLoop.passes``; tests wait on them)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tierd.errors import CatalogError, TierdError
from tierd.logs import get_logger

if TYPE_CHECKING:
    from tierd.config import Config
    from tierd.daemon.outage import CatalogOutage

__all__ = ["InFlight", "PassLoop", "Reconfigurable", "Service", "Tally"]

log = get_logger(__name__)


class Service(Protocol):
    """A part of the daemon with a start and a bounded stop."""

    name: str

    async def start(self) -> None:
        """Begin work; return once the service is up."""

    async def stop(self, timeout: float) -> None:
        """Take no new work, let in-flight work finish for up to ``timeout`` seconds, cancel the rest."""


@runtime_checkable
class Reconfigurable(Protocol):
    """A service that keeps parts of the config and takes a reload's new values of them."""

    def reconfigure(self, config: Config) -> None:
        """Run on ``config`` from now on.

        It differs from the last one only in reloadable keys (``tierd.config.changes``).
        """


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


class Tally:
    """A count that only grows, which a coroutine can wait on."""

    def __init__(self) -> None:
        self.count = 0
        self._grew = asyncio.Event()

    def add(self) -> None:
        """Count one more; wakes every waiter."""
        self.count += 1
        grew, self._grew = self._grew, asyncio.Event()
        grew.set()

    async def past(self, n: int) -> int:
        """Return the count once it exceeds ``n`` (at once if it does)."""
        while self.count <= n:
            await self._grew.wait()
        return self.count


class PassLoop:
    """Runs a service's passes until stopped (see the module docstring).

    After each pass it waits ``interval`` seconds (a callable: asked after each pass) or until
    ``wake`` (``on_idle`` runs when the interval ran out unwoken); a pass that returns True
    asked for the next one at once.
    A failed pass is logged as ``<service>_<what>_failed`` (a TierdError: a warning) or
    ``_crashed`` (anything else: with its traceback), and the next comes after the wait as
    usual. With ``outage``, a CatalogError is told to it instead (one error line per outage)
    and each pass that works to it too; with ``sooner_while_down`` as well, the wait while
    the catalog fails is the outage's growing delay when that is shorter than ``interval``.
    """

    def __init__(
        self,
        service: str,
        run_pass: Callable[[], Awaitable[bool | None]],
        interval: float | Callable[[], float],
        *,
        what: str = "pass",
        wakeup: asyncio.Event | None = None,
        outage: CatalogOutage | None = None,
        sooner_while_down: bool = False,
        on_idle: Callable[[], None] | None = None,
        wait_first: bool = False,
        log_fields: dict[str, str] | None = None,
    ) -> None:
        """``wait_first``: the first pass comes after one wait (the service ran one at start)."""
        self.service, self.what = service, what
        self.run_pass = run_pass
        self.interval = interval
        self.wakeup = wakeup if wakeup is not None else asyncio.Event()
        self.outage = outage
        self.sooner_while_down = sooner_while_down
        self.on_idle = on_idle
        self.wait_first = wait_first
        self.log_fields = log_fields or {}
        #: Set by ``halt``: no pass begins after it.
        self.stopping = False
        self.tally = Tally()
        self._task: asyncio.Task[None] | None = None

    @property
    def passes(self) -> int:
        """Passes ended so far, failed ones included."""
        return self.tally.count

    async def pass_done(self, after: int) -> int:
        """Return once more than ``after`` passes have ended; the number ended."""
        return await self.tally.past(after)

    def wake(self) -> None:
        """Begin the next pass now (after the one under way, if any)."""
        self.wakeup.set()

    def start(self, name: str) -> None:
        """Run the loop as a task of its own named ``name`` (``stop`` ends it)."""
        self._task = asyncio.create_task(self.run(), name=name)

    def halt(self) -> None:
        """Begin no pass after the one under way, and end the wait between passes."""
        self.stopping = True
        self.wakeup.set()

    async def stop(self, timeout: float) -> bool:
        """``halt``, let the pass under way end for up to ``timeout``, then cancel it; True when cut."""
        self.halt()
        task = self._task
        if task is None:
            return False
        _, late = await asyncio.wait([task], timeout=max(timeout, 0))
        if late:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return bool(late)

    async def run(self) -> None:
        """The loop itself (``start`` runs it; a caller may run it in a task of its own)."""
        if self.wait_first:
            await self._wait()
        while not self.stopping:
            self.wakeup.clear()
            again = await self._one()
            self.tally.add()
            if not again:
                await self._wait()

    async def _one(self) -> bool:
        """One pass, its failure logged; whether the next should begin at once."""
        try:
            again = await self.run_pass()
        except TierdError as exc:
            if isinstance(exc, CatalogError) and self.outage is not None:
                self.outage.failed(exc, self.what)  # one log line per outage, not one per pass
            else:
                log.warning(f"{self.service}_{self.what}_failed", error=str(exc), **self.log_fields)
            return False
        except Exception:
            log.exception(f"{self.service}_{self.what}_crashed", **self.log_fields)
            return False
        if self.outage is not None:
            self.outage.succeeded()
        return bool(again)

    async def _wait(self) -> None:
        wait = self.interval() if callable(self.interval) else self.interval
        if self.sooner_while_down and self.outage is not None and self.outage.down:
            wait = min(wait, self.outage.delay())
        try:
            await asyncio.wait_for(self.wakeup.wait(), wait)
        except TimeoutError:
            if self.on_idle is not None and not self.stopping:
                self.on_idle()

"""Wake-ups from the other daemons of a fleet: PostgreSQL ``LISTEN`` on the jobs channel.

A daemon whose scheduler pass queued copy jobs sends ``NOTIFY`` (``dialect.notify_jobs``)
at commit; every daemon listening claims at once instead of at its next poll, so the parts
of a step, queued by whichever node completed it, start on their own nodes in
milliseconds. One connection per daemon, outside the catalog's pool
(``dialect.listen_for_jobs``). When it breaks (PostgreSQL restarted, the network cut), the
listener reconnects with backoff and asks for a full pass: jobs queued meanwhile are found
by it. SQLite serves one daemon: nobody to hear.

The same connection hears the steps channel for the detect service (``on_steps``): another
daemon made a waiting step (its first part recorded, or a notify's), so this node's waiting
sweep may owe it a part and looks now rather than at its idle poll, then polls while it owes
one (a reconnection wakes it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable

from tierd.daemon.catalog.dialect import jobs_conninfo, listen_for_jobs
from tierd.daemon.service import Tally
from tierd.daemon.transfer.retry import Backoff
from tierd.errors import CatalogError
from tierd.logs import get_logger

__all__ = ["JobListener"]

log = get_logger(__name__)

#: Between reconnection attempts: 0.5 s doubling to 30 s.
RECONNECT = Backoff(base=0.5, cap=30.0)


class JobListener:
    """Calls ``on_jobs`` at each notification ``node`` may act on; ``on_reconnect`` after a loss.

    A notification naming other nodes only (their parts' jobs) is ignored: this daemon could
    not claim them. With ``on_steps``: called at each steps notification another node sent,
    and after a loss.
    """

    def __init__(
        self,
        url: str,
        node: str,
        on_jobs: Callable[[], None],
        on_reconnect: Callable[[], None],
        on_steps: Callable[[], None] | None = None,
    ) -> None:
        self.conninfo = jobs_conninfo(url)
        self.node = node
        self.on_jobs, self.on_reconnect, self.on_steps = on_jobs, on_reconnect, on_steps
        self.listening = asyncio.Event()
        #: Notifications read, acted on or not (in the order the catalog sent them).
        self.heard = Tally()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Connect and listen in the background."""
        self._task = asyncio.create_task(self._run(), name="pipeline:listen")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self._listen(reconnected=failures > 0)
            except CatalogError as exc:
                self.listening.clear()
                if failures == 0:
                    log.warning("jobs_listener_lost", error=str(exc).strip())
                await asyncio.sleep(RECONNECT.delay(failures))  # jittered: a fleet reconnects spread out
                failures += 1
            else:
                failures = 0

    async def _listen(self, *, reconnected: bool) -> None:
        on_steps = None if self.on_steps is None else self._heard_steps
        listening = functools.partial(self._listening, reconnected)
        await listen_for_jobs(self.conninfo, listening, self._heard, on_steps)

    def _listening(self, reconnected: bool) -> None:
        self.listening.set()
        if reconnected:
            log.info("jobs_listener_reconnected")
            self.on_reconnect()
            if self.on_steps is not None:
                self.on_steps()

    def _heard(self, nodes: frozenset[str] | None) -> None:
        if nodes is None or self.node in nodes:
            self.on_jobs()
        self.heard.add()

    def _heard_steps(self, nodes: frozenset[str] | None) -> None:
        if self.on_steps is not None and nodes != frozenset((self.node,)):  # not its own
            self.on_steps()
        self.heard.add()

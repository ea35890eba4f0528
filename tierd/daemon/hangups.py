"""SIGHUP for the daemon's whole life: kept while it starts, a reload while it runs, ignored after.

``tierd run`` installs the handler first thing, before the seconds of imports and start-up: a
SIGHUP then (``kill -HUP`` from a log rotation, a reload sent too early) must not end the
process, which systemd would count as a clean exit and ``Restart=on-failure`` not restart.
One that comes before the daemon is ready is kept and delivered once it is. While the daemon
stops, and until the process is gone, SIGHUP is ignored (``SIG_IGN``, which the interpreter's
own exit leaves in place).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

__all__ = ["HangUps"]


class HangUps:
    """The process's SIGHUP handler (installed by the constructor, in the main thread)."""

    def __init__(self) -> None:
        self._pending = False
        self._deliver: Callable[[], object] | None = None
        signal.signal(signal.SIGHUP, self._caught)

    def _caught(self, signum: int, frame: object) -> None:
        if self._deliver is None:
            self._pending = True
        else:
            self._deliver()

    def deliver_to(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` for each SIGHUP from now on, and now for one that came before.

        It runs in the main thread between two bytecodes: it should only schedule the work
        (``loop.call_soon_threadsafe``).
        """
        self._deliver = callback
        if self._pending:
            self._pending = False
            callback()

    def ignore(self) -> None:
        """Ignore SIGHUP from now on (the daemon stops)."""
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self._deliver, self._pending = None, False

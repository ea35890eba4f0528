"""Noticing that the catalog went away and came back, and saying so once each way.

A PostgreSQL restart, a network partition or a full disk under a SQLite catalog makes every
catalog call fail with ``CatalogError`` for a while. A service that loops over the catalog
keeps one ``CatalogOutage``: the first failure logs one error line naming what failed, later
ones log at debug level (no log line, let alone a traceback, per event or per poll), and
the first success logs how long the catalog was away. ``delay`` spaces out the tries in
between (0.5 s doubling up to ``RETRY_CAP_SECONDS``).
"""

from __future__ import annotations

import time

from tierd.daemon.transfer.retry import Backoff
from tierd.errors import CatalogError
from tierd.logs import get_logger

__all__ = ["CATALOG_RETRY", "CatalogOutage"]

log = get_logger(__name__)

#: Between tries while the catalog fails: a ping costs nothing, so the cap is short and a
#: service notices the catalog's return within a few seconds.
CATALOG_RETRY = Backoff(base=0.5, cap=5.0)


class CatalogOutage:
    """One service's view of the catalog: answering, or failing since when (see the module)."""

    def __init__(self, service: str, retry: Backoff = CATALOG_RETRY) -> None:
        self.service = service
        self.retry = retry
        self.since: float | None = None  # time.monotonic() of the first failure
        self.failures = 0
        self.error: str | None = None  # the last failure's message, while down

    @property
    def down(self) -> bool:
        """Whether the last catalog call of this service failed."""
        return self.since is not None

    def failed(self, exc: CatalogError, action: str) -> None:
        """Record a failed catalog call; the first of an outage logs an error."""
        self.failures += 1
        self.error = str(exc)
        if self.since is None:
            self.since = time.monotonic()
            log.error("catalog_unavailable", service=self.service, action=action, error=str(exc))
        else:
            log.debug(
                "catalog_still_unavailable", service=self.service, action=action, failures=self.failures
            )

    def succeeded(self) -> bool:
        """Record a call that worked; True (with one info line) when it ends an outage."""
        if self.since is None:
            return False
        down = time.monotonic() - self.since
        log.info("catalog_available", service=self.service, seconds=round(down, 1), failures=self.failures)
        self.since = None
        self.failures = 0
        self.error = None
        return True

    def describe(self) -> str | None:
        """``<service>: catalog failing for N s: <error>`` while down (a ``/readyz`` warning), else None."""
        if self.since is None:
            return None
        return f"{self.service}: catalog failing for {time.monotonic() - self.since:.0f} s: {self.error}"

    def delay(self) -> float:
        """Seconds to wait before the next try (grows with the failures of this outage)."""
        return self.retry.ceiling(max(self.failures - 1, 0))

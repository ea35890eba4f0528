"""The shared tiers' leader: one lease in the catalog, fenced on this node by a monotonic deadline.

The lease lives on the database's clock (``catalog.fleet.claim_lease``): it expires ``lease``
seconds after its holder last renewed it, and only then may another daemon take it. This
daemon counts itself the leader only until a local monotonic deadline, ``fraction`` of the
lease after it *began* its last successful renewal: that moment precedes the database's
``now()`` of the renewal, so the local deadline always falls before the lease's expiry. A
daemon paused (SIGSTOP) or cut off from the database therefore stops acting before anyone
else may start, whatever the two clocks say; the wall clock is never read. A failed renewal
stands down at once.

Why a lease row and not a session-level advisory lock: a process stopped with SIGSTOP keeps
its TCP connection, so its advisory lock would stay held for as long as it is stopped and
nobody could take over; a lease on the database's clock expires whatever its holder does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Database
from tierd.errors import CatalogError

__all__ = ["Change", "Elector"]

#: Of the lease, how long a renewal lets this daemon act (the rest is a margin for pauses in
#: the renewal itself, and for the two clocks' rates).
LOCAL_FRACTION = 2 / 3


@dataclass(frozen=True)
class Change:
    """A change of standing: became the leader (``elected``) or stopped being it, in ``term``, and why."""

    elected: bool
    term: int
    holder: str | None
    reason: str


class Elector:
    """Takes and renews the shared tiers' lease for ``owner`` (``node:pid``): a ``context.Leadership``."""

    def __init__(
        self,
        db: Database,
        owner: str,
        lease_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        lease_name: str = fleet.SHARED_TIERS_LEASE,
    ) -> None:
        self.db = db
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.lease_name = lease_name
        self._clock = clock
        self._deadline = -math.inf
        self._term: int | None = None
        self._last_term: int | None = None

    def leads(self) -> bool:
        """True until the local deadline of the last renewal (the fence every shared-tier act checks)."""
        return self._term is not None and self._clock() < self._deadline

    @property
    def term(self) -> int | None:
        """The term this daemon holds the lease in (None when it does not)."""
        return self._term

    def elect(self) -> Change | None:
        """Take or renew the lease (blocking); the change of standing, if any.

        A catalog failure stands down at once (the change says so) and is not raised.
        """
        started = self._clock()
        try:
            with self.db.session() as session:
                state = fleet.claim_lease(session, self.lease_name, self.owner, self.lease_seconds)
        except CatalogError as exc:
            return self._lose(state_holder=None, reason=f"the catalog failed: {exc}")
        if state.holder == self.owner and state.live:
            self._deadline = started + self.lease_seconds * LOCAL_FRACTION
            if self._term != state.term:
                kept = state.term == self._last_term  # nobody took it while this daemon stood down
                self._term = self._last_term = state.term
                reason = (
                    "renewed its own lease after standing down"
                    if kept
                    else "took the lease (free or expired)"
                )
                return Change(True, state.term, self.owner, reason)
            return None
        return self._lose(state.holder, f"the lease is held by {state.holder} (term {state.term})")

    def release(self) -> Change | None:
        """Stop leading now and give the lease up in the catalog (an orderly stop; blocking).

        Raises CatalogError when the catalog fails (the lease then expires on its own).
        """
        change = self._lose(None, "stopping")
        with self.db.session() as session:
            fleet.release_lease(session, self.lease_name, self.owner)
        return change

    def _lose(self, state_holder: str | None, reason: str) -> Change | None:
        self._deadline = -math.inf
        if self._term is None:
            return None
        term, self._term = self._term, None
        return Change(False, term, state_holder, reason)

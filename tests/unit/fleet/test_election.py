"""The shared tiers' leader on a real PostgreSQL: several electors in one process, injected clocks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from tests.fixtures.postgres import PostgresServer
from tests.integration.daemon_helpers import wait_for
from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.models import utcnow
from tierd.daemon.fleet.election import LOCAL_FRACTION, Elector
from tierd.errors import CatalogError

LEASE = 30.0  # long enough that nothing expires unless a test wants it to
SHORT = 0.6  # for the tests that wait for a lease to expire on the database's clock


class FakeClock:
    """A monotonic clock that moves only when told (``offset`` fakes a node's clock far off)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.now = 1000.0 + offset

    def __call__(self) -> float:
        return self.now


def electors(db: Database, n: int, lease: float = LEASE) -> list[Elector]:
    return [Elector(db, f"node{i}:{100 + i}", lease, clock=FakeClock()) for i in range(n)]


def holder(db: Database) -> fleet.LeaseState:
    with db.read_session() as s:
        return fleet.lease_state(s, fleet.SHARED_TIERS_LEASE)


def test_exactly_one_of_several_electors_leads_and_renewing_keeps_its_term(pg_db: Database) -> None:
    group = electors(pg_db, 3)
    changes = [e.elect() for e in group]
    assert [e.leads() for e in group] == [True, False, False]
    assert changes[0] is not None
    assert changes[0].elected
    assert changes[0].term == 1
    assert changes[1:] == [None, None]  # never led: nothing changed for them
    for _ in range(3):
        assert [e.elect() for e in group] == [None, None, None]
    assert [e.leads() for e in group] == [True, False, False]
    assert holder(pg_db).holder == "node0:100"
    assert holder(pg_db).term == 1


def test_the_fence_falls_before_the_lease_expires_without_asking_the_database(pg_db: Database) -> None:
    (leader,) = electors(pg_db, 1)
    clock = leader._clock
    assert isinstance(clock, FakeClock)
    leader.elect()
    state = holder(pg_db)
    assert state.expires_at is not None
    # The lease runs LEASE seconds on the database's clock; this daemon stops acting earlier.
    assert timedelta(0) < state.expires_at - state.db_now <= timedelta(seconds=LEASE)
    clock.now += LEASE * LOCAL_FRACTION - 0.001
    assert leader.leads()
    clock.now += 0.002  # e.g. the process was stopped (SIGSTOP) for that long: no query needed
    assert not leader.leads()
    # Resumed while nobody took the lease: renewing gives the same term back, and a new fence.
    assert leader.elect() is None
    assert leader.leads()
    assert leader.term == 1


def test_a_dead_leader_is_replaced_once_its_lease_expires_on_the_database_clock(pg_db: Database) -> None:
    first, second = electors(pg_db, 2, lease=SHORT)
    first.elect()
    assert second.elect() is None
    assert not second.leads()
    # ``first`` dies: it renews no more. ``second`` leads once the lease has expired.
    change = wait_for(lambda: second.elect(), 10, "the second elector to take the expired lease")
    assert change.elected
    assert change.term == 2
    assert second.leads()
    # ``first`` comes back (its own fence had fallen long before): it learns it lost.
    assert isinstance(first._clock, FakeClock)
    first._clock.now += SHORT
    lost = first.elect()
    assert lost is not None
    assert not lost.elected
    assert lost.term == 1
    assert lost.holder == "node1:101"
    assert not first.leads()
    assert second.leads()


def test_a_released_lease_is_taken_at_once_by_the_next_elector(pg_db: Database) -> None:
    first, second = electors(pg_db, 2)
    first.elect()
    change = first.release()
    assert change is not None
    assert not change.elected
    assert not first.leads()
    taken = second.elect()
    assert taken is not None
    assert taken.elected
    assert taken.term == 2


def test_a_holder_stopped_inside_its_renewal_neither_blocks_nor_keeps_the_lease(pg_db: Database) -> None:
    """A leader paused between its UPDATE and COMMIT holds the row's lock: the server cuts it off."""
    first, second = electors(pg_db, 2, lease=SHORT)
    first.elect()
    with Session(pg_db.engine) as paused:
        fleet.claim_lease(paused, fleet.SHARED_TIERS_LEASE, "node0:100", SHORT)  # no commit: "stopped"
        # The other elector waits a quarter of the lease at most for the row, then gives up.
        assert second.elect() is None
        assert not second.leads()
        change = wait_for(lambda: second.elect(), 10, "the lease to pass to the second elector")
        assert change.elected
        assert change.term == 2
        with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
            paused.commit()  # the server ended the paused transaction; its renewal never happened
    assert holder(pg_db).holder == "node1:101"


def test_a_leader_cut_off_from_the_catalog_stands_down_at_once_and_leads_again_after(
    pg_db: Database, postgres_server: PostgresServer
) -> None:
    (leader,) = electors(pg_db, 1)
    leader.elect()
    admin = Database(postgres_server.url("postgres"))
    try:
        allow_connections(admin, pg_db, allow=False)
        change = leader.elect()
        assert change is not None
        assert not change.elected
        assert "catalog failed" in change.reason
        assert not leader.leads()
        allow_connections(admin, pg_db, allow=True)
        again = wait_for(lambda: leader.elect(), 10, "the leader to lead again after reconnecting")
        assert again.elected
        assert leader.leads()
    finally:
        allow_connections(admin, pg_db, allow=True)
        admin.dispose()


def allow_connections(admin: Database, db: Database, *, allow: bool) -> None:
    """Let clients connect to ``db``'s database, or refuse them and end those connected."""
    name = db.engine.url.database
    with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allow).lower()}'))
        if not allow:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name}
            )


def test_skewed_node_clocks_change_nothing(pg_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Leases run on the database's clock: a node's wall clock an hour off, or its monotonic
    clock far off, neither takes a live lease nor shortens its own."""
    ahead = [
        Elector(pg_db, f"skewed{i}:1", LEASE, clock=FakeClock(offset=o)) for i, o in enumerate((-3600, 3600))
    ]
    real = utcnow
    monkeypatch.setattr("tierd.daemon.catalog.models.utcnow", lambda: real() + timedelta(hours=1))
    assert [e.elect() is not None for e in ahead] == [True, False]
    for _ in range(3):
        assert [e.elect() for e in ahead] == [None, None]
        assert [e.leads() for e in ahead] == [True, False]
    state = holder(pg_db)
    assert state.expires_at is not None
    assert state.holder == "skewed0:1"
    assert state.term == 1
    assert timedelta(0) < state.expires_at - state.db_now <= timedelta(seconds=LEASE)


def test_a_failed_release_raises_a_catalog_error_and_still_stands_down(
    pg_db: Database, postgres_server: PostgresServer
) -> None:
    (leader,) = electors(pg_db, 1)
    leader.elect()
    admin = Database(postgres_server.url("postgres"))
    try:
        allow_connections(admin, pg_db, allow=False)
        with pytest.raises(CatalogError):
            leader.release()
        assert not leader.leads()
    finally:
        allow_connections(admin, pg_db, allow=True)
        admin.dispose()

"""The fleet's rows in the catalog (``catalog.fleet``), on SQLite and PostgreSQL."""

from __future__ import annotations

from tierd.daemon.catalog import fleet
from tierd.daemon.catalog.db import Database


def test_registering_a_node_again_overwrites_its_row(db: Database) -> None:
    with db.session() as s:
        fleet.register_node(s, "node-a", version="1.0", pid=11, api="127.0.0.1:8470")
    with db.read_session() as s:
        (first,) = fleet.list_nodes(s)
    with db.session() as s:  # the node restarted: a new pid, a new address, a new version
        fleet.register_node(s, "node-a", version="1.1", pid=22, api="127.0.0.1:8471")
    with db.read_session() as s:
        (again,) = fleet.list_nodes(s)
    assert (again.pid, again.api, again.version) == (22, "127.0.0.1:8471", "1.1")
    assert again.started_at >= first.started_at
    assert again.heartbeat_at >= first.heartbeat_at
    with db.session() as s:
        assert fleet.heartbeat(s, "node-a", 22, "127.0.0.1:8471")
        assert not fleet.heartbeat(s, "node-a", 11, "127.0.0.1:8470")  # the dead process's pid


def test_registering_one_node_leaves_the_others_alone(db: Database) -> None:
    with db.session() as s:
        fleet.register_node(s, "node-a", version="1.0", pid=11, api="127.0.0.1:8470")
        fleet.register_node(s, "node-b", version="1.0", pid=12, api="127.0.0.1:8471")
    with db.session() as s:
        fleet.register_node(s, "node-a", version="1.0", pid=21, api="127.0.0.1:8470")
    with db.read_session() as s:
        assert [(n.name, n.pid) for n in fleet.list_nodes(s)] == [("node-a", 21), ("node-b", 12)]


def test_a_node_row_carries_where_peers_reach_it_and_its_failure_domain(db: Database) -> None:
    with db.session() as s:
        fleet.register_node(
            s,
            "node-a",
            version="1.0",
            pid=11,
            api="127.0.0.2:8470",
            advertise_url="http://127.0.0.2:8470",
            failure_domain="rack1",
        )
        fleet.register_node(s, "node-b", version="1.0", pid=12, api="127.0.0.3:8470")
    with db.read_session() as s:
        a, b = fleet.list_nodes(s)
    assert (a.advertise_url, a.failure_domain) == ("http://127.0.0.2:8470", "rack1")
    assert (b.advertise_url, b.failure_domain) == (None, None)

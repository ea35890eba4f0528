"""The audit log (``catalog.audit``), on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.unit.catalog.helpers import add_checkpoint
from tierd.daemon.catalog.audit import append_event, list_events
from tierd.daemon.catalog.db import Database


def test_events_are_appended_and_listed_oldest_first(db: Database) -> None:
    a, b = add_checkpoint(db, 1), add_checkpoint(db, 2)
    with db.session() as s:
        append_event(s, actor="api:ops", action="pin", checkpoint_id=a, reason="golden", detail={"k": 1})
        append_event(s, actor="pipeline", action="replica_verified", checkpoint_id=b, reason="", detail={})
        append_event(
            s, actor="pipeline", action="replica_failed", checkpoint_id=a, reason="503", detail={}, tier="s3"
        )
    with db.read_session() as s:
        every = list_events(s)
        mine = list_events(s, checkpoint_id=a)
    assert [e.action for e in every] == ["pin", "replica_verified", "replica_failed"]
    assert [(e.actor, e.action, e.tier, e.reason) for e in mine] == [
        ("api:ops", "pin", None, "golden"),
        ("pipeline", "replica_failed", "s3", "503"),
    ]
    assert mine[0].detail == {"k": 1}
    assert mine[0].at.tzinfo is not None

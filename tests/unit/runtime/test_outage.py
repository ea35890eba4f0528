"""A catalog outage as services see it: one line when it goes, one when it is back, and the
words the driver used (not the SQL) in between."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from structlog.testing import capture_logs

from tierd.daemon.catalog.db import Database
from tierd.daemon.outage import CATALOG_RETRY, CatalogOutage
from tierd.errors import CatalogError


def test_one_error_line_per_outage_and_one_line_when_it_ends() -> None:
    outage = CatalogOutage("detect")
    with capture_logs() as logs:
        assert not outage.succeeded()  # nothing to report while it answers
        for _ in range(5):
            outage.failed(CatalogError("catalog error: OperationalError: refused"), "record")
        assert outage.down
        assert outage.delay() == CATALOG_RETRY.ceiling(4)
        assert outage.describe() == "detect: catalog failing for 0 s: " + str(logs[0]["error"])
        assert outage.succeeded()
        assert not outage.down
        assert outage.describe() is None
    levels = [(e["log_level"], e["event"]) for e in logs]
    assert levels == [("error", "catalog_unavailable")] + [("debug", "catalog_still_unavailable")] * 4 + [
        ("info", "catalog_available")
    ]
    assert logs[0]["error"] == "catalog error: OperationalError: refused"
    assert logs[-1]["failures"] == 5


def test_delays_grow_from_half_a_second_to_the_cap() -> None:
    outage = CatalogOutage("pipeline")
    delays = []
    for _ in range(6):
        outage.failed(CatalogError("x"), "pass")
        delays.append(outage.delay())
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_catalog_errors_carry_the_drivers_words_not_the_sql(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        with pytest.raises(CatalogError) as caught, db.session() as session:
            session.execute(text("INSERT INTO no_such_table (x) VALUES (:v)"), {"v": "secret" * 100})
    finally:
        db.dispose()
    assert str(caught.value) == "catalog error: OperationalError: no such table: no_such_table"

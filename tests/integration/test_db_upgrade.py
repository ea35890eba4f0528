"""``tierd db upgrade`` run by many nodes at once on one fresh PostgreSQL catalog.

A fleet's first start runs it on every node at once (a unit's ``ExecStartPre`` and an image's
command both run it on each start). Before the upgrade serialised itself, six at once left five
failed with ``DuplicateTable alembic_version``: each saw an empty catalog and began to create it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import posix_config_dict
from tests.fixtures.daemon import start_cli
from tests.fixtures.postgres import PostgresServer
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import check_schema

#: The nodes starting together.
NODES = 8


def test_upgrades_started_together_all_succeed(postgres_server: PostgresServer, tmp_path: Path) -> None:
    """More than 5 s on a loaded 2-core machine: eight processes each read the config and load
    Alembic's scripts at once (about 0.5 s of CPU each); the migrations themselves run one at a
    time, the first in about 0.5 s and each later one finding the schema at head."""
    url = postgres_server.new_database()
    config = tmp_path / "tierd.yaml"
    config.write_text(yaml.safe_dump(posix_config_dict(tmp_path, catalog={"url": url})))
    argv = ["db", "upgrade", "--config", str(config)]
    runs = [start_cli(argv, tmp_path / f"upgrade-{node}.log") for node in range(NODES)]
    results = [run.wait(timeout=120) for run in runs]
    failed = [f"exit {code}: {out[-1500:]}" for code, out in results if code != 0]
    assert not failed, f"{len(failed)} of {NODES} failed:\n" + "\n".join(failed)
    assert all("catalog at revision" in out for _, out in results)
    database = Database(url)
    try:
        check_schema(database)  # at this build's head
    finally:
        database.dispose()

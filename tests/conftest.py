"""Shared fixtures: catalogs on SQLite and PostgreSQL, configs, and the real servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade

if TYPE_CHECKING:
    from tests.fixtures.postgres import PostgresServer

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.s3servers", "tests.fixtures.fleet"]


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL to an empty catalog database, on SQLite and on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A migrated catalog (both backends)."""
    database = Database(db_url)
    upgrade(database)
    yield database
    database.dispose()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite catalog, for tests that need only one backend."""
    database = Database(f"sqlite:///{tmp_path / 'catalog.db'}")
    upgrade(database)
    yield database
    database.dispose()


def posix_config_dict(root: Path, **overrides: Any) -> dict[str, Any]:
    """A config with four POSIX tiers under ``root`` and one watched run ``demo``."""
    data: dict[str, Any] = {
        "catalog": {"url": f"sqlite:///{root / 'catalog.db'}"},
        "api": {"listen": "127.0.0.1:0"},
        "drain_timeout_seconds": 5,
        "watch": [{"path": str(root / "nvme" / "demo"), "run": "demo", "format": "auto"}],
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": str(root / "nvme")},
            {"name": "pfs", "kind": "posix", "path": str(root / "pfs")},
            {"name": "object", "kind": "posix", "path": str(root / "object")},
            {"name": "replica", "kind": "posix", "path": str(root / "replica")},
        ],
    }
    data.update(overrides)
    return data


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    """Build a validated Config over tmp_path, with keyword overrides of top-level keys."""

    def make(**overrides: Any) -> Config:
        return Config(**posix_config_dict(tmp_path, **overrides))

    return make

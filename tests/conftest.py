"""Shared fixtures: catalogs on SQLite and PostgreSQL, configs, and the real servers."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.migrate import upgrade

if TYPE_CHECKING:
    from tests.fixtures.postgres import PostgresServer

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.s3servers",
    "tests.fixtures.gcsemulator",
    "tests.fixtures.azurite",
    "tests.fixtures.fleet",
    "tests.fixtures.docker",
    "tests.fixtures.loadgroup",
    "tests.fixtures.bigdiff",
    "tests.fixtures.order",
    "tests.fixtures.parts_fleet",
]


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL to an empty catalog database, on SQLite and on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite catalog migrated once for the session; ``db`` and ``sqlite_db`` copy it."""
    path = tmp_path_factory.mktemp("catalog-template") / "catalog.db"
    database = Database(f"sqlite:///{path}")
    upgrade(database)
    database.dispose()  # its last connection closed: the WAL is folded into the file
    return path


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server: PostgresServer) -> str:
    """A PostgreSQL database migrated once for the session; ``db`` creates copies of it."""
    name = f"template_{uuid.uuid4().hex[:12]}"
    database = Database(postgres_server.create(name))
    upgrade(database)
    database.dispose()  # a template must have no open connection
    return name


def _sqlite_copy(template: Path, tmp_path: Path) -> Database:
    path = tmp_path / "catalog.db"
    shutil.copyfile(template, path)
    return Database(f"sqlite:///{path}")


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated catalog (both backends): a copy of one migrated once per session."""
    if request.param == "sqlite":
        database = _sqlite_copy(request.getfixturevalue("migrated_sqlite"), tmp_path)
    else:
        database = _postgres_copy(request)
    yield database
    database.dispose()


@pytest.fixture
def pg_db(request: pytest.FixtureRequest) -> Iterator[Database]:
    """A migrated PostgreSQL catalog, for tests of what only PostgreSQL does (locks, NOTIFY)."""
    database = _postgres_copy(request)
    yield database
    database.dispose()


def _postgres_copy(request: pytest.FixtureRequest) -> Database:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    template: str = request.getfixturevalue("migrated_postgres")
    return Database(server.create(f"t_{uuid.uuid4().hex[:12]}", template=template))


@pytest.fixture
def sqlite_db(migrated_sqlite: Path, tmp_path: Path) -> Iterator[Database]:
    """A migrated SQLite catalog, for tests that need only one backend."""
    database = _sqlite_copy(migrated_sqlite, tmp_path)
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

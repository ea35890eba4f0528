"""Schema migrations (Alembic), run by ``tierd db upgrade`` and checked by ``tierd run``.

On PostgreSQL an upgrade holds a transaction-level advisory lock (``MIGRATION_LOCK_KEY``) from
before Alembic reads the schema's version to its commit, so any number of nodes may run
``tierd db upgrade`` at once: one migrates, the others wait and then find the schema at head.
Without it, eight started together on a fresh catalog left five failed (each saw no
``alembic_version`` and created it). Alembic's DDL is transactional on PostgreSQL: a node
that dies mid-upgrade leaves nothing half-made, and its lock goes with its connection.

Checking needs no Alembic: the revisions are read from the migration scripts' own
``revision`` and ``down_revision`` lines (parsed, not imported) and the catalog's from its
``alembic_version`` table. Alembic and Mako are imported to migrate only: in a running daemon
they held 8 MB of resident memory for one check at start.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.exc import SQLAlchemyError

from tierd.daemon.catalog.db import Database
from tierd.errors import CatalogError, SchemaError

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

__all__ = [
    "MIGRATION_LOCK_KEY",
    "alembic_config",
    "check_schema",
    "current_revision",
    "head_revision",
    "revisions",
    "upgrade",
]

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
#: The advisory lock an upgrade holds on PostgreSQL ("tierdm"; the scheduler's is "tierd1").
MIGRATION_LOCK_KEY = 0x7469_6572_646D


def alembic_config(db: Database) -> AlembicConfig:
    """An Alembic config for ``db`` using the migrations shipped inside the package."""
    from alembic.config import Config as AlembicConfig  # to migrate only (see the module docstring)

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", db.url.replace("%", "%%"))
    return cfg


@functools.cache
def revisions() -> dict[str, str | None]:
    """Every revision this build ships: ``{revision: down_revision}``, from the scripts' text."""
    found: dict[str, str | None] = {}
    for script in sorted((MIGRATIONS_DIR / "versions").glob("[0-9]*.py")):
        values: dict[str, str | None] = {}
        for node in ast.parse(script.read_text()).body:
            if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Constant):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    value = node.value.value
                    if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                        values[target.id] = value if isinstance(value, str) else None
        found[str(values["revision"])] = values.get("down_revision")
    return found


def head_revision(db: Database) -> str:
    """The newest revision this build knows: the one no other revision follows."""
    known = revisions()
    (head,) = set(known) - set(known.values())
    return head


def current_revision(db: Database) -> str | None:
    """The revision the catalog is at, or None when it was never migrated."""
    try:
        with db.engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return None
            rows = [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]
    except SQLAlchemyError as exc:
        raise CatalogError(f"cannot read the catalog schema version: {exc}") from exc
    if len(rows) > 1:
        raise CatalogError(f"the catalog has several schema versions at once: {sorted(rows)}")
    return rows[0] if rows else None


def upgrade(db: Database, revision: str = "head") -> None:
    """Migrate the catalog to ``revision`` (default: the newest); one node at a time on PostgreSQL.

    Raises CatalogError when the database fails.
    """
    from alembic import command  # to migrate only (see the module docstring)

    cfg = alembic_config(db)
    try:
        with db.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise CatalogError(f"migration failed: {exc}") from exc


def check_schema(db: Database) -> None:
    """Raise SchemaError unless the catalog is at exactly this build's head revision."""
    current = current_revision(db)
    head = head_revision(db)
    if current == head:
        return
    known = set(revisions())
    if current is None:
        raise SchemaError(f"the catalog at {_safe(db.url)} is not initialised: run `tierd db upgrade`")
    if current not in known:
        raise SchemaError(f"the catalog schema ({current}) is newer than this tierd ({head}): upgrade tierd")
    raise SchemaError(f"the catalog schema is at {current}, this tierd needs {head}: run `tierd db upgrade`")


def _safe(url: str) -> str:
    """``url`` without its password."""
    head, sep, tail = url.rpartition("@")
    if not sep:
        return url
    scheme, _, creds = head.partition("://")
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{tail}"

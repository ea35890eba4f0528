"""Every query lives in the catalog: no module of tierd outside it imports a database library.

Services, routes and schemas call the catalog's named functions (``tierd.daemon.catalog``);
only the catalog and the migrations speak SQLAlchemy or a database driver. The session type
a caller holds comes from ``tierd.daemon.catalog.db``. A route fetches what a view needs,
then the schema only converts it: serializing sends no SQL.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

import tierd
from tests.unit.catalog.helpers import add_checkpoint
from tierd.api.schemas.checkpoints import CheckpointOut
from tierd.daemon.catalog.checkpoints import load_checkpoint
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.parts import Expectation, missing_while_waiting, set_expectation

#: The libraries that build or send SQL.
DATABASE_LIBRARIES = frozenset({"sqlalchemy", "psycopg", "psycopg2", "sqlite3", "alembic"})
PACKAGE = Path(tierd.__file__).parent
#: Where they may be imported, relative to the package.
ALLOWED = (PACKAGE / "daemon" / "catalog", PACKAGE / "migrations")


def database_imports(source: str) -> list[tuple[int, str]]:
    """Each import of a database library in ``source``: its line and the module named."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in DATABASE_LIBRARIES]
    return found


def test_the_check_sees_every_spelling_of_an_import() -> None:
    source = (
        "import sqlalchemy\nfrom sqlalchemy.orm import Session\nimport psycopg.sql as q\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sqlalchemy import select\n"
        "def f():\n    import sqlite3\nfrom . import sqlalchemy_like\nimport sqlalchemyx\n"
    )
    assert [name for _, name in database_imports(source)] == [
        "sqlalchemy",
        "sqlalchemy.orm",
        "psycopg.sql",
        "sqlalchemy",
        "sqlite3",
    ]


def test_only_the_catalog_and_the_migrations_import_a_database_library() -> None:
    leaks = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(path.is_relative_to(allowed) for allowed in ALLOWED)
        for line, name in database_imports(path.read_text(encoding="utf-8"))
    ]
    assert not leaks, "imports outside the catalog (call a named catalog function):\n" + "\n".join(leaks)


def test_showing_a_waiting_checkpoint_sends_no_sql(sqlite_db: Database) -> None:
    checkpoint_id = add_checkpoint(sqlite_db, 7, state="waiting")  # holds demo/step7/a
    with sqlite_db.session() as session:
        row = load_checkpoint(session, checkpoint_id)
        set_expectation(row, Expectation(files=("a", "b"), source="notify"))
    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(args[2])

    with sqlite_db.read_session() as session:
        row = load_checkpoint(session, checkpoint_id)
        missing = missing_while_waiting(session, row)
        event.listen(Engine, "before_cursor_execute", record)
        try:
            shown = CheckpointOut.of(row, missing).model_dump(mode="json")
        finally:
            event.remove(Engine, "before_cursor_execute", record)
    assert sent == [], "the schema queried while serializing"
    assert (shown["state"], shown["missing"]["files"]) == ("waiting", ["b"])

"""Alembic environment: runs migrations on the engine tierd hands it (or the URL in alembic.ini)."""

from __future__ import annotations

from typing import Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import create_engine

from tierd.daemon.catalog.models import Base, UTCDateTime

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    """Migrate over the connection passed in ``config.attributes`` or a new engine."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as conn:
        _run(conn)
        conn.commit()


def _render_item(type_: str, obj: object, autogen_context: AutogenContext) -> str | Literal[False]:
    """Render tierd's UTCDateTime as the plain column type it stores."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,  # SQLite can only ALTER through table copies
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("tierd migrations run online only: use `tierd db upgrade`")
run_migrations_online()

"""checkpoints: a partial index on the waiting ones

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 10:00:00.000000

Every daemon looks for waiting steps every two seconds; with a catalog of many thousand
checkpoints, of which a handful wait, that was a scan of the whole table each time.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WAITING = sa.text("state = 'waiting'")


def upgrade() -> None:
    op.create_index(
        "ix_checkpoints_waiting", "checkpoints", ["id"], postgresql_where=WAITING, sqlite_where=WAITING
    )


def downgrade() -> None:
    op.drop_index("ix_checkpoints_waiting", table_name="checkpoints")

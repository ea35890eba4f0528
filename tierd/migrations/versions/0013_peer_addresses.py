"""nodes: where peers reach each node, and what fails with it

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 14:00:00.000000

``nodes.advertise_url`` and ``nodes.failure_domain`` (``fleet.advertise_url``,
``fleet.failure_domain``) are NULL for the rows already there: a node fills its own at its
next start, and until then no peer sends it a copy.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("advertise_url", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("failure_domain", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("failure_domain")
        batch_op.drop_column("advertise_url")

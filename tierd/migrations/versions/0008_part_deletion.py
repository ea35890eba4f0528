"""parts: when each node last re-checked its part on a node-local tier

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 17:30:00.000000

``part_replicas.checked_at``: a step written by several nodes is scrubbed on a node-local
tier part by part, each node its own; NULL until the part is first re-checked.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("part_replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("part_replicas", schema=None) as batch_op:
        batch_op.drop_column("checked_at")

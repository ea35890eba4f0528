"""index replicas by tier and state

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 05:52:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.create_index("ix_replicas_tier_state", ["tier", "state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_index("ix_replicas_tier_state")

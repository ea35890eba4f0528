"""scrub: when each replica's bytes were last re-checked

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 16:00:00.000000

``replicas.checked_at`` is NULL until the scrubber (or ``POST /v1/checkpoints/{id}/verify``)
first re-checks the replica; ``verified_at`` keeps meaning "first verified".
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("checked_at")

"""replicas: the legal hold last set on the store's objects (S3 Object Lock)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 14:30:00.000000

``replicas.store_hold`` (true: ON, false: OFF, NULL: never set) and ``store_hold_at`` (when),
so the store-hold pass sends PutObjectLegalHold only for replicas whose catalog holds differ
from what was last set, or that were verified again (copied again) since.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("store_hold", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("store_hold_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("store_hold_at")
        batch_op.drop_column("store_hold")

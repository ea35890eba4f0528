"""peer_copies: each part's copies on other nodes' peer tiers

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 14:50:00.000000

A new, empty table: no existing data changes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "peer_copies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["part_id"], ["parts.id"], name=op.f("fk_peer_copies_part_id_parts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_peer_copies")),
        sa.UniqueConstraint("part_id", "holder", name=op.f("uq_peer_copies_part_id")),
    )


def downgrade() -> None:
    op.drop_table("peer_copies")

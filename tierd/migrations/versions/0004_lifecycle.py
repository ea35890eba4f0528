"""lifecycle: legal holds, checkpoint metrics, delayed deletion of replicas

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 04:10:00.000000

``checkpoints.hold`` (one free-text hold, never set by any release) becomes rows of
``holds``, named ``legacy``, so an upgrade keeps every hold it finds.
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "holds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_holds_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_holds")),
        sa.UniqueConstraint("checkpoint_id", "name", name=op.f("uq_holds_checkpoint_id")),
    )
    _move_legacy_holds()
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("metrics", sa.JSON(), nullable=False, server_default="{}"))
        batch_op.drop_column("hold")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.alter_column("metrics", server_default=None)
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("delete_after", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("delete_reason", sa.Text(), nullable=True))


def _move_legacy_holds() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, hold FROM checkpoints WHERE hold IS NOT NULL")).all()
    now = datetime.now(UTC)
    for checkpoint_id, hold in rows:
        conn.execute(
            sa.text(
                "INSERT INTO holds (checkpoint_id, name, reason, actor, created_at)"
                " VALUES (:c, 'legacy', :r, 'migration 0004', :t)"
            ),
            {"c": checkpoint_id, "r": hold, "t": now},
        )


def downgrade() -> None:
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("delete_reason")
        batch_op.drop_column("delete_after")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hold", sa.String(length=255), nullable=True))
        batch_op.drop_column("metrics")
    op.drop_table("holds")

"""files and directories: owner, group and mode at first sight

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 10:00:00.000000

``files.uid``, ``gid`` and ``mode`` (``stat.S_IMODE``) are NULL for the files recorded
before: their copies keep the store's default. ``directories`` holds the same of each
directory a checkpoint's files lie in (its own, those below and those above it up to the
tier-0 root), for the copies and restores that create them.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.add_column(sa.Column("uid", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("gid", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("mode", sa.Integer(), nullable=True))
    op.create_table(
        "directories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("relpath", sa.String(length=4096), nullable=False),
        sa.Column("uid", sa.BigInteger(), nullable=False),
        sa.Column("gid", sa.BigInteger(), nullable=False),
        sa.Column("mode", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_directories_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_directories")),
        sa.UniqueConstraint("checkpoint_id", "relpath", name=op.f("uq_directories_checkpoint_id")),
    )


def downgrade() -> None:
    op.drop_table("directories")
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.drop_column("mode")
        batch_op.drop_column("gid")
        batch_op.drop_column("uid")

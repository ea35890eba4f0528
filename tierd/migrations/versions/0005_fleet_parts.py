"""fleet: parts (a node's files of a step), their replicas, and what a step expects

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 16:00:00.000000

Every recorded checkpoint becomes one part on its node holding all its files (marked: its
detector saw the whole checkpoint complete), with a part
replica per tier in the checkpoint replica's state; a waiting step waits since it was created.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "parts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("marked", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(
            ["checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_parts_checkpoint_id_checkpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_parts")),
        sa.UniqueConstraint("checkpoint_id", "node", name=op.f("uq_parts_checkpoint_id")),
    )
    op.create_table(
        "part_replicas",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("part_id", sa.Integer(), nullable=False),
        sa.Column("tier", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("bytes_done", sa.BigInteger(), nullable=False),
        sa.Column("verified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["part_id"], ["parts.id"], name=op.f("fk_part_replicas_part_id_parts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_part_replicas")),
        sa.UniqueConstraint("part_id", "tier", name=op.f("uq_part_replicas_part_id")),
    )
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.add_column(sa.Column("part_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_files_part_id"), ["part_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_files_part_id_parts"), "parts", ["part_id"], ["id"], ondelete="CASCADE"
        )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("part_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_jobs_part_id_parts"), "parts", ["part_id"], ["id"], ondelete="CASCADE"
        )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expected_files", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("expected_ranks", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("expected_nodes", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("expected_source", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("waiting_since", sa.DateTime(timezone=True), nullable=True))
    _one_part_per_checkpoint()


def _one_part_per_checkpoint() -> None:
    conn = op.get_bind()
    conn.execute(
        sa.text(
            "INSERT INTO parts (checkpoint_id, node, file_count, total_bytes, recorded_at, marked)"
            " SELECT id, node, file_count, total_bytes, COALESCE(completed_at, created_at), :marked"
            " FROM checkpoints WHERE state != 'waiting'"
        ),
        {"marked": True},  # each was recorded whole, its detector's marker seen
    )
    conn.execute(
        sa.text(
            "UPDATE files SET part_id = (SELECT parts.id FROM parts"
            " WHERE parts.checkpoint_id = files.checkpoint_id)"
        )
    )
    conn.execute(
        sa.text(
            "INSERT INTO part_replicas (part_id, tier, state, bytes_done, verified_at, error, updated_at)"
            " SELECT parts.id, replicas.tier, replicas.state, replicas.bytes_done, replicas.verified_at,"
            " replicas.error, replicas.updated_at"
            " FROM replicas JOIN parts ON parts.checkpoint_id = replicas.checkpoint_id"
        )
    )
    conn.execute(sa.text("UPDATE checkpoints SET waiting_since = created_at WHERE state = 'waiting'"))


def downgrade() -> None:
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_column("waiting_since")
        batch_op.drop_column("expected_source")
        batch_op.drop_column("expected_nodes")
        batch_op.drop_column("expected_ranks")
        batch_op.drop_column("expected_files")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_jobs_part_id_parts"), type_="foreignkey")
        batch_op.drop_column("part_id")
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_files_part_id_parts"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_files_part_id"))
        batch_op.drop_column("part_id")
    op.drop_table("part_replicas")
    op.drop_table("parts")

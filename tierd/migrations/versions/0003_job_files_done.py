"""files a copy job has finished, one row each (was a list in jobs.detail)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 19:58:22.205204

Jobs that recorded progress before this revision keep their list in ``jobs.detail``;
``records.start_hop`` reads both.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_files_done",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["file_id"], ["files.id"], name=op.f("fk_job_files_done_file_id_files"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_files_done_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "file_id", name=op.f("pk_job_files_done")),
    )
    with op.batch_alter_table("job_files_done", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_files_done_file_id"), ["file_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("job_files_done", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_files_done_file_id"))
    op.drop_table("job_files_done")

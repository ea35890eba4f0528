"""audit_events: an index on (action, at) for the usage report's deletions

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 14:00:00.000000

``GET /v1/usage`` sums what retention deleted in the last 30 days from the audit log's
``deleted`` events; every detection, copy and pin appends an event too, so the index on ``at``
alone would walk all of a month's events to find the few deletions.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_audit_events_action_at", "audit_events", ["action", "at"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_action_at", table_name="audit_events")

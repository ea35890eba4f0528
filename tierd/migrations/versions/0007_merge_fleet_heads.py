"""merge the fleet branches' heads (0005 parts, 0006 nodes) on the fleet-it branch; no schema change

Only for the branch that runs both together before the integrator re-chains them: drop this
file once 0006 revises 0005.

Revision ID: 0007
Revises: 0005, 0006
Create Date: 2026-11-25 16:20:00.000000
"""

from collections.abc import Sequence

revision: str = "0007"
down_revision: tuple[str, ...] = ("0005", "0006")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass

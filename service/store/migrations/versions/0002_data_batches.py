"""Data batches: inputs (and labels) clients upload to condition candidates on their own data.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "data_batches",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("shape", _JSON, nullable=False),
        sa.Column("x", _JSON, nullable=False),
        sa.Column("y", _JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("data_batches")

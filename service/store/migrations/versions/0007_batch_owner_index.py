"""An index on ``data_batch_owners (owner_id, batch_id)``: a token's batches are counted for its
quota on every upload and listed by ``GET /v1/batches``, and the table's primary key, which
leads with ``batch_id``, made both read every owner's holds. Nothing stored changes.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_data_batch_owners_owner"


def upgrade() -> None:
    op.create_index(_INDEX, "data_batch_owners", ["owner_id", "batch_id"])


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="data_batch_owners")

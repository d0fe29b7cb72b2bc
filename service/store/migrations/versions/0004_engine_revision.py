"""The engine revision of each job: part of its cache key, and which workers may claim it.

``candidates.engine`` holds ``service.revision.engine_revision()`` of the service that queued the
job. Jobs queued before this migration keep None: their keys did not name an engine, and any
worker may claim them. Nothing stored is rewritten.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.add_column(sa.Column("engine", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.drop_column("engine")

"""Tenancy: owners of submissions, batches and studies; admin tokens; opaque candidate ids.

``owned_candidates`` holds each owner's submission of a shared candidate (its random public
id, study, trial, priority and whether that owner cancelled it); ``data_batch_owners`` who
uploaded each batch; ``submissions.owner_id`` whose study a submission belongs to;
``api_tokens.admin`` the tokens that see everything. What existed before belongs to the
anonymous owner (0): visible with auth off and to admin tokens.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 09:00:00
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_CHUNK = 1000


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("admin", sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("owner_id", sa.BigInteger(), server_default="0", nullable=False))
        batch_op.drop_index("ix_submissions_study")
        batch_op.create_index("ix_submissions_study", ["study", "owner_id", "candidate_id"], unique=False)

    owned = op.create_table(
        "owned_candidates",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("public_id", sa.String(length=32), nullable=False),
        sa.Column("candidate_id", _ID, nullable=False),
        sa.Column("owner_id", sa.BigInteger(), nullable=False),
        sa.Column("study", sa.String(length=200), nullable=True),
        sa.Column("trial", sa.BigInteger(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidates.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("owner_id", "candidate_id"),
        sa.UniqueConstraint("public_id"),
    )
    with op.batch_alter_table("owned_candidates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_owned_candidates_candidate_id"), ["candidate_id"], unique=False)
        batch_op.create_index("ix_owned_candidates_owner", ["owner_id", "id"], unique=False)

    batch_owners = op.create_table(
        "data_batch_owners",
        sa.Column("batch_id", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["batch_id"], ["data_batches.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("batch_id", "owner_id"),
    )
    _adopt_existing(owned, batch_owners)


def _adopt_existing(owned: sa.Table, batch_owners: sa.Table) -> None:
    """Every candidate and batch stored before tenancy gets the anonymous owner, and each
    candidate a fresh random public id (its old integer id is no longer an API id)."""
    bind = op.get_bind()
    candidates = sa.table(  # typed: SQLite hands back timestamps as text otherwise
        "candidates",
        sa.column("id", _ID),
        sa.column("study", sa.String()),
        sa.column("trial", sa.BigInteger()),
        sa.column("priority", sa.Integer()),
        sa.column("status", sa.String()),
        sa.column("created_at", sa.DateTime()),
        sa.column("finished_at", sa.DateTime()),
    )
    rows = bind.execute(sa.select(candidates).order_by(candidates.c.id)).all()
    for start in range(0, len(rows), _CHUNK):
        op.bulk_insert(
            owned,
            [
                {
                    "public_id": secrets.token_hex(16),
                    "candidate_id": row.id,
                    "owner_id": 0,
                    "study": row.study,
                    "trial": row.trial,
                    "priority": row.priority,
                    "created_at": row.created_at,
                    "cancelled_at": row.finished_at if row.status == "cancelled" else None,
                }
                for row in rows[start : start + _CHUNK]
            ],
        )
    batches = sa.table("data_batches", sa.column("id", sa.String()), sa.column("created_at", sa.DateTime()))
    stored = bind.execute(sa.select(batches.c.id, batches.c.created_at)).all()
    if stored:
        op.bulk_insert(batch_owners, [{"batch_id": key, "owner_id": 0, "created_at": at} for key, at in stored])


def downgrade() -> None:
    op.drop_table("data_batch_owners")
    with op.batch_alter_table("owned_candidates", schema=None) as batch_op:
        batch_op.drop_index("ix_owned_candidates_owner")
        batch_op.drop_index(batch_op.f("ix_owned_candidates_candidate_id"))
    op.drop_table("owned_candidates")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_submissions_study")
        batch_op.create_index("ix_submissions_study", ["study", "candidate_id"], unique=False)
        batch_op.drop_column("owner_id")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("admin")

"""Initial schema: candidates (the job queue), submissions, report rows, API tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 05:11:39.886112
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "candidates",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("cache_key", sa.String(length=64), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column(
            "spec",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "options",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("study", sa.String(length=200), nullable=True),
        sa.Column("trial", sa.BigInteger(), nullable=True),
        sa.Column("device", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_token", sa.String(length=64), nullable=True),
        sa.Column("leased_until", sa.DateTime(), nullable=True),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("tuning_seconds", sa.Float(), nullable=True),
        sa.Column(
            "report",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("cache_key"),
    )
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.create_index("ix_candidates_claim", ["status", "device", "priority", "id"], unique=False)
        batch_op.create_index("ix_candidates_lease", ["status", "leased_until"], unique=False)
        batch_op.create_index(batch_op.f("ix_candidates_spec_hash"), ["spec_hash"], unique=False)

    op.create_table(
        "candidate_blocks",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("candidate_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("block_index", sa.Integer(), nullable=False),
        sa.Column("apjn_before", sa.Float(), nullable=True),
        sa.Column("apjn_after", sa.Float(), nullable=True),
        sa.Column("k_before", sa.Float(), nullable=True),
        sa.Column("k_after", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidates.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("candidate_id", "block_index"),
    )
    op.create_table(
        "candidate_layers",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("candidate_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("fan_in", sa.BigInteger(), nullable=True),
        sa.Column("fan_out", sa.BigInteger(), nullable=True),
        sa.Column("gamma", sa.Float(), nullable=True),
        sa.Column("nu", sa.Float(), nullable=True),
        sa.Column("hessian_top_eigenvalue", sa.Float(), nullable=True),
        sa.Column("hessian_chain_rule", sa.Float(), nullable=True),
        sa.Column("hessian_mean_sq_singular", sa.Float(), nullable=True),
        sa.Column("kappa_d", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidates.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("candidate_id", "name"),
    )
    op.create_table(
        "candidate_scales",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("candidate_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("parameter", sa.String(length=300), nullable=False),
        sa.Column("multiplier", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidates.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("candidate_id", "parameter"),
    )
    op.create_table(
        "submissions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("candidate_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("study", sa.String(length=200), nullable=True),
        sa.Column("trial", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidates.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_submissions_candidate_id"), ["candidate_id"], unique=False)
        batch_op.create_index("ix_submissions_study", ["study", "candidate_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_submissions_study")
        batch_op.drop_index(batch_op.f("ix_submissions_candidate_id"))

    op.drop_table("submissions")
    op.drop_table("candidate_scales")
    op.drop_table("candidate_layers")
    op.drop_table("candidate_blocks")
    with op.batch_alter_table("candidates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_candidates_spec_hash"))
        batch_op.drop_index("ix_candidates_lease")
        batch_op.drop_index("ix_candidates_claim")

    op.drop_table("candidates")
    op.drop_table("api_tokens")

"""Study names as long as Optuna's: ``study`` on candidates, owned_candidates and submissions
widened from 200 to 512 characters (Optuna's ``studies.study_name``), so a gate or pruner on any
study Optuna accepts can submit. Widening rewrites no value; going down cuts names longer than
200 characters to their first 200, the only way back into the narrower column (PostgreSQL refuses
to shorten a column that holds a longer value).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("candidates", "owned_candidates", "submissions")
_OLD, _NEW = 200, 512


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(
                "study", existing_type=sa.String(length=_OLD), type_=sa.String(length=_NEW), existing_nullable=True
            )


def downgrade() -> None:
    for table in _TABLES:
        op.execute(sa.text(f"UPDATE {table} SET study = substr(study, 1, {_OLD}) WHERE length(study) > {_OLD}"))
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(
                "study", existing_type=sa.String(length=_NEW), type_=sa.String(length=_OLD), existing_nullable=True
            )

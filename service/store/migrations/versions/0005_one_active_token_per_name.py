"""One active token per name: a partial unique index on ``api_tokens.name`` where not revoked.

``preflight token create`` checked the name before inserting, but two creations at once could
both pass the check. Databases from before this migration may hold such duplicates: every active
token but the oldest of a shared name is renamed ``NAME #ID`` (its id), so each keeps working;
``preflight token revoke NAME``, which revoked all of them, now revokes the oldest alone (revoke
the others by id; ``preflight token list`` shows them). Revoked tokens keep their names. Going
down drops the index and leaves the names as they are.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28 07:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ux_api_tokens_active_name"
_NAME_LENGTH = 200  # the column's


def upgrade() -> None:
    _rename_duplicate_active_names()
    op.create_index(
        _INDEX,
        "api_tokens",
        ["name"],
        unique=True,
        sqlite_where=sa.text("revoked_at IS NULL"),
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="api_tokens")


def _rename_duplicate_active_names() -> None:
    connection = op.get_bind()
    active = connection.execute(sa.text("SELECT id, name FROM api_tokens WHERE revoked_at IS NULL ORDER BY id")).all()
    taken = {name for _, name in active}
    seen: set[str] = set()
    for token_id, name in active:
        if name not in seen:
            seen.add(name)
            continue
        renamed = _free_name(name, token_id, taken)
        taken.add(renamed)
        connection.execute(
            sa.text("UPDATE api_tokens SET name = :name WHERE id = :id"), {"name": renamed, "id": token_id}
        )


def _free_name(name: str, token_id: int, taken: set[str]) -> str:
    """``NAME #ID``, cut to the column's length; ``NAME #ID.2`` and on in the unlikely case that
    another active token already bears it."""
    attempt = 1
    while True:
        suffix = f" #{token_id}" if attempt == 1 else f" #{token_id}.{attempt}"
        candidate = name[: _NAME_LENGTH - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        attempt += 1

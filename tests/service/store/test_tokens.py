"""API tokens in the store: the database itself keeps one active token per name (a partial unique
index), so two creations racing past the name check cannot both win, and revoked tokens may
share a name with the active one."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from service.store.db import make_engine, make_sessionmaker, session_scope
from service.store.models import ApiToken
from service.store.tokens import create_token, revoke_token


@pytest.mark.postgres
def test_a_creation_that_loses_the_race_for_a_name_is_refused_by_name(pg_url: str, race: Any) -> None:
    """Two transactions create `ci` at once on PostgreSQL: neither sees the other's row when it
    checks the name, the second insert waits on the index and then finds the name taken. It gets
    the name's ValueError, not a second active `ci` (which it got before the index)."""
    engine = make_engine(pg_url)
    sessions = make_sessionmaker(engine)
    outcome = race(sessions, lambda session: create_token(session, name="ci"))
    with session_scope(sessions) as session:
        names = session.scalars(select(ApiToken.name).where(ApiToken.revoked_at.is_(None))).all()
    engine.dispose()
    assert outcome["blocked"]  # on the index, not past the check already
    assert "result" not in outcome, outcome
    assert isinstance(outcome["error"], ValueError) and "named 'ci' already" in str(outcome["error"])
    assert names == ["ci"]


def test_revoked_tokens_share_a_name_with_the_active_one(sessions: Any) -> None:
    for _ in range(3):
        with session_scope(sessions, write=True) as session:
            create_token(session, name="ci")
        with session_scope(sessions, write=True) as session:
            assert len(revoke_token(session, name="ci")) == 1
    with session_scope(sessions, write=True) as session:
        active = create_token(session, name="ci")
    with session_scope(sessions) as session:
        rows = session.execute(select(ApiToken.id, ApiToken.revoked_at).where(ApiToken.name == "ci")).all()
    assert len(rows) == 4 and [row.id for row in rows if row.revoked_at is None] == [active.id]


def test_the_index_refuses_a_second_active_name_even_past_the_check(
    sessions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the name check skipped (as a racing creation skips it), the insert itself is refused,
    on each backend, and the session stays usable."""
    from service.store import tokens

    with session_scope(sessions, write=True) as session:
        create_token(session, name="ci")
    monkeypatch.setattr(tokens, "_check_name", lambda session, name: None)
    with session_scope(sessions, write=True) as session:
        with pytest.raises(ValueError, match="named 'ci' already"):
            create_token(session, name="ci")
        other = create_token(session, name="ops")
    with session_scope(sessions) as session:
        names = session.scalars(select(ApiToken.name).order_by(ApiToken.id)).all()
    assert names == ["ci", "ops"] and other.name == "ops"


def test_a_name_that_is_not_text_revokes_nothing(sessions: Any) -> None:
    """A CLI argument's undecodable bytes arrive as lone surrogates, which no database can be
    asked for: such a name names no token (an empty list, no encoding error), a text one still does."""
    with session_scope(sessions, write=True) as session:
        create_token(session, name="ci")
    with session_scope(sessions, write=True) as session:
        assert revoke_token(session, name="ci\udcff") == []
        assert len(revoke_token(session, name="ci")) == 1

"""The store's race tests: a second transaction runs into a first one's uncommitted row."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

Race = Callable[[sessionmaker[Session], Callable[[Session], Any]], dict[str, Any]]


def _race(sessions: sessionmaker[Session], act: Callable[[Session], Any]) -> dict[str, Any]:
    """``act`` in a first session, left uncommitted, then in a second session on another thread,
    which commits; the first commits after the second has waited a second on its row. Returns the
    second's outcome: ``"result"`` or ``"error"`` (any exception), ``"blocked"``: whether it was
    still waiting when the first committed (on the database's lock, not past a check already), and
    ``"first"``: what ``act`` gave the first."""
    outcome: dict[str, Any] = {}

    def second() -> None:
        with sessions() as session:
            try:
                outcome["result"] = act(session)
                session.commit()
            except Exception as exc:  # the failure a race test guards against, or the refusal it expects
                outcome["error"] = exc

    first = sessions()
    try:
        outcome["first"] = act(first)  # inserted, not committed
        racer = threading.Thread(target=second, daemon=True)
        racer.start()
        racer.join(1.0)
        outcome["blocked"] = racer.is_alive()
        first.commit()
        racer.join(30)
        assert not racer.is_alive(), "the second transaction never finished"
    finally:
        first.close()
    return outcome


@pytest.fixture
def race() -> Race:
    return _race

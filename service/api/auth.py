"""Bearer API tokens: created and revoked with `preflight token`, stored as SHA-256.

A token is ``pf_`` followed by 43 URL-safe characters (256 random bits); the database keeps
only its hash and first characters. Tokens are required whenever the service listens
beyond localhost (setting ``PREFLIGHT_REQUIRE_AUTH`` turns them on for localhost too).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from service.store.db import utcnow
from service.store.models import ApiToken

__all__ = [
    "TOKEN_PREFIX",
    "CreatedToken",
    "TokenCache",
    "create_token",
    "hash_token",
    "list_tokens",
    "revoke_token",
]

TOKEN_PREFIX = "pf_"


@dataclass(frozen=True)
class CreatedToken:
    id: int
    name: str
    token: str  # shown once, never stored


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, *, name: str) -> CreatedToken:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, token_hash=hash_token(token), prefix=token[:10], created_at=utcnow())
    session.add(row)
    session.flush()
    return CreatedToken(id=row.id, name=name, token=token)


def revoke_token(session: Session, *, token_id: int | None = None, name: str | None = None) -> int:
    """Revoke by id or by name; returns how many tokens were revoked."""
    condition = ApiToken.id == token_id if token_id is not None else ApiToken.name == name
    result = session.execute(
        update(ApiToken).where(condition, ApiToken.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount


def list_tokens(session: Session) -> list[tuple[int, str, str, datetime, datetime | None]]:
    rows = session.execute(
        select(ApiToken.id, ApiToken.name, ApiToken.prefix, ApiToken.created_at, ApiToken.revoked_at)
        .order_by(ApiToken.id)
    )
    return [tuple(row) for row in rows]  # type: ignore[misc]


class TokenCache:
    """Checks bearer tokens against the database, remembering answers for ``ttl`` seconds
    so that an authenticated request costs no extra query; revocation applies within ``ttl``."""

    def __init__(self, sessions: sessionmaker[Session], ttl: float) -> None:
        self._sessions = sessions
        self._ttl = ttl
        self._known: dict[str, tuple[bool, float]] = {}
        self._lock = threading.Lock()

    def is_valid(self, token: str) -> bool:
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return False
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            cached = self._known.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        with self._sessions() as session:
            stored = session.scalar(
                select(ApiToken.token_hash).where(ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None))
            )
        valid = stored is not None and hmac.compare_digest(stored, digest)
        if self._ttl > 0:
            with self._lock:
                if len(self._known) > 10_000:
                    self._known.clear()
                self._known[digest] = (valid, now + self._ttl)
        return valid

"""The request side of bearer API tokens: checking a token, with a short cache.

Tokens are created, revoked and stored (as SHA-256) by ``service.store.tokens``. They are
required whenever the service listens beyond localhost (setting ``PREFLIGHT_REQUIRE_AUTH``
turns them on for localhost too).
"""

from __future__ import annotations

import hmac
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from service.store.owners import Caller
from service.store.tokens import TOKEN_PREFIX, active_token, hash_token

__all__ = ["TokenCache"]


class TokenCache:
    """Checks bearer tokens against the database, remembering answers for ``ttl`` seconds
    so that an authenticated request costs no extra query; revocation applies within ``ttl``."""

    def __init__(self, sessions: sessionmaker[Session], ttl: float) -> None:
        self._sessions = sessions
        self._ttl = ttl
        self._known: dict[str, tuple[Caller | None, float]] = {}
        self._lock = threading.Lock()

    def caller(self, token: str) -> Caller | None:
        """Whom a valid token acts for (its id owns what it creates); None: invalid or revoked."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            cached = self._known.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        with self._sessions() as session:
            stored = active_token(session, digest=digest)
        caller = None
        if stored is not None and hmac.compare_digest(stored.token_hash, digest):
            caller = Caller(owner_id=stored.id, admin=stored.admin)
        if self._ttl > 0:
            with self._lock:
                if len(self._known) > 10_000:
                    self._known.clear()
                self._known[digest] = (caller, now + self._ttl)
        return caller

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

from service.store.tokens import TOKEN_PREFIX, hash_token, stored_hash

__all__ = ["TokenCache"]


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
            stored = stored_hash(session, digest=digest)
        valid = stored is not None and hmac.compare_digest(stored, digest)
        if self._ttl > 0:
            with self._lock:
                if len(self._known) > 10_000:
                    self._known.clear()
                self._known[digest] = (valid, now + self._ttl)
        return valid

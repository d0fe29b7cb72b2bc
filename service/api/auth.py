"""The request side of bearer API tokens: checking a token, with a short cache.

Tokens are created, revoked and stored (as SHA-256) by ``service.store.tokens``. They are
required whenever the service listens beyond localhost (setting ``PREFLIGHT_REQUIRE_AUTH``
turns them on for localhost too), and for any request that did not come from this machine
(:func:`auth_required_for`).
"""

from __future__ import annotations

import hmac
import ipaddress
import threading
import time
from collections.abc import Sequence
from typing import Any

from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session, sessionmaker

from service.api.problems import ProblemError, ProblemIssue
from service.store.owners import Caller
from service.store.tokens import TOKEN_PREFIX, active_token, hash_token

__all__ = ["TokenCache", "auth_required_for", "authenticate", "bearer_token"]

# headers a reverse proxy adds to a request it relays: the request came from elsewhere
_FORWARDED = (b"forwarded", b"x-forwarded-for", b"x-real-ip")


def auth_required_for(settings: Any, scope: Any) -> bool:
    """Whether this request needs a token: always when the settings say so (a listen address
    beyond localhost, or ``PREFLIGHT_REQUIRE_AUTH``); else when it came in on a network address
    other than loopback (``uvicorn service.main:app --host 0.0.0.0``, which the settings' default
    host of 127.0.0.1 does not see) or through a proxy that says so (``Forwarded``,
    ``X-Forwarded-For``, ``X-Real-IP``). Such a request was served with auth off, as the
    anonymous caller, who sees every tenant's candidates."""
    if settings.auth_required:
        return True
    server = scope.get("server")
    if server:
        try:
            if not ipaddress.ip_address(str(server[0]).split("%")[0]).is_loopback:
                return True
        except ValueError:  # a Unix socket's path, or a test client's name: no network address
            pass
    return any(name in _FORWARDED for name, _ in scope.get("headers", ()))


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


def bearer_token(authorization: Sequence[str]) -> str:
    """The token of the ``Authorization: Bearer <token>`` header, given as its every value (the
    scheme in any case, then any whitespace: a tab there read as no token at all); empty when there
    is none or the scheme is another. More than one value is a 400 (RFC 9110 allows one; the first
    was taken in silence, so which of two tokens acted depended on their order)."""
    if len(authorization) > 1:
        message = f"given {len(authorization)} times; send it once"
        raise ProblemError(
            400,
            f"header.authorization: {message}",
            kind="invalid-request",
            errors=[ProblemIssue(path="header.authorization", message=message)],
        )
    parts = (authorization[0] if authorization else "").split(None, 1)
    return parts[1].strip() if len(parts) == 2 and parts[0].lower() == "bearer" else ""


async def authenticate(tokens: TokenCache, token: str) -> Caller:
    """Whom the bearer ``token`` acts for; a 401 problem when it is missing, invalid or revoked."""
    if not token:
        raise ProblemError(
            401,
            "missing bearer token; send 'Authorization: Bearer <token>' (see `preflight token create`)",
            kind="unauthorized",
            headers={"WWW-Authenticate": 'Bearer realm="preflight"'},
        )
    caller = await run_in_threadpool(tokens.caller, token)
    if caller is None:
        raise ProblemError(
            401,
            "invalid or revoked token",
            kind="unauthorized",
            headers={"WWW-Authenticate": 'Bearer realm="preflight", error="invalid_token"'},
        )
    return caller

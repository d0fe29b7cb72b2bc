"""Bearer API tokens in the store: created and revoked with `preflight token`, kept as SHA-256.

A token is ``pf_`` followed by 43 URL-safe characters (256 random bits); the database keeps
only its hash and first characters. The request side (checking a bearer token, with a cache)
is ``service.api.auth``.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from service.store.db import utcnow
from service.store.models import ApiToken

__all__ = [
    "TOKEN_PREFIX",
    "CreatedToken",
    "any_active",
    "create_token",
    "hash_token",
    "list_tokens",
    "revoke_token",
    "stored_hash",
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
    return cast(CursorResult[Any], result).rowcount


def list_tokens(session: Session) -> list[tuple[int, str, str, datetime, datetime | None]]:
    rows = session.execute(
        select(ApiToken.id, ApiToken.name, ApiToken.prefix, ApiToken.created_at, ApiToken.revoked_at).order_by(
            ApiToken.id
        )
    )
    return [tuple(row) for row in rows]  # type: ignore[misc]


def stored_hash(session: Session, *, digest: str) -> str | None:
    """The stored hash equal to ``digest`` when that token exists and is not revoked."""
    return session.scalar(
        select(ApiToken.token_hash).where(ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None))
    )


def any_active(session: Session) -> bool:
    """Whether at least one token exists that is not revoked."""
    return session.scalar(select(ApiToken.id).where(ApiToken.revoked_at.is_(None)).limit(1)) is not None

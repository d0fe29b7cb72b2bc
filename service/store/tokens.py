"""Bearer API tokens in the store: created and revoked with `preflight token`, kept as SHA-256.

A token is ``pf_`` followed by 43 URL-safe characters (256 random bits); the database keeps
only its hash and first characters. An admin token (``preflight token create NAME --admin``)
sees every owner's items (``service.store.owners``). The request side (checking a bearer token,
with a cache) is ``service.api.auth``.
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nas.strict_json import is_unicode_text
from service.store.db import utcnow
from service.store.models import ApiToken

__all__ = [
    "TOKEN_PREFIX",
    "ActiveToken",
    "CreatedToken",
    "TokenInfo",
    "active_token",
    "any_active",
    "create_token",
    "hash_token",
    "list_tokens",
    "revoke_token",
    "was_revoked",
]

TOKEN_PREFIX = "pf_"


@dataclass(frozen=True)
class CreatedToken:
    id: int
    name: str
    token: str  # shown once, never stored
    admin: bool = False


@dataclass(frozen=True)
class ActiveToken:
    """What a request's token stands for: the owner id of what it creates, and whether it is admin."""

    id: int
    token_hash: str
    admin: bool


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    prefix: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, *, name: str, admin: bool = False) -> CreatedToken:
    """A new token under ``name``, which must say who holds it and name one active token only:
    ``preflight token revoke NAME`` revokes by it, and reads a number as an id."""
    name = unicodedata.normalize("NFC", name)  # one name however the terminal composed its accents
    _check_name(session, name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, token_hash=hash_token(token), prefix=token[:10], admin=admin, created_at=utcnow())
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:  # another creation took the name between the check and the insert
        raise ValueError(_taken(name)) from None
    return CreatedToken(id=row.id, name=name, token=token, admin=admin)


MAX_NAME = 200  # the column's length


def _check_name(session: Session, name: str) -> None:
    if not name.strip():
        raise ValueError("a token's name must not be empty: say who or what uses it")
    if name != name.strip():
        raise ValueError(
            f"a token's name must not begin or end with spaces: {name!r} would be listed as {name.strip()!r}"
        )
    if len(name) > MAX_NAME:
        raise ValueError(f"a token's name is at most {MAX_NAME} characters, got {len(name)}")
    if any(not character.isprintable() for character in name):
        raise ValueError(f"a token's name must be printable, without tabs or newlines: {name!r}")
    if name.isdecimal():
        raise ValueError(
            f"a token's name must not be a number ({name!r}): `token revoke {name}` could be read as an id"
        )
    taken = select(ApiToken.id).where(ApiToken.name == name, ApiToken.revoked_at.is_(None)).limit(1)
    if session.scalar(taken) is not None:
        raise ValueError(_taken(name))


def _taken(name: str) -> str:
    return f"an active token is named {name!r} already; pick another name or revoke that one first"


def revoke_token(session: Session, *, token_id: int | None = None, name: str | None = None) -> list[int]:
    """Revoke by id or by name (as given, or composed as a new name is stored); returns the ids of
    the tokens revoked. A name that is not text (a non-UTF-8 argument) names none."""
    if token_id is not None:
        condition = ApiToken.id == token_id
    else:
        if name is None or not is_unicode_text(name):  # a non-UTF-8 argument's bytes arrive as lone surrogates
            return []
        condition = ApiToken.name.in_({name, unicodedata.normalize("NFC", name)})
    revoked = session.scalars(
        update(ApiToken)
        .where(condition, ApiToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
        .returning(ApiToken.id)
    )
    return sorted(revoked)


def was_revoked(session: Session, *, token_id: int) -> bool:
    """Whether a token with this id exists and is revoked (``token revoke ID`` again cancels what it
    queued in the API's token cache window)."""
    found = select(ApiToken.id).where(ApiToken.id == token_id, ApiToken.revoked_at.is_not(None))
    return session.scalar(found) is not None


def list_tokens(session: Session) -> list[TokenInfo]:
    rows = session.execute(
        select(
            ApiToken.id, ApiToken.name, ApiToken.prefix, ApiToken.admin, ApiToken.created_at, ApiToken.revoked_at
        ).order_by(ApiToken.id)
    )
    return [TokenInfo(*row) for row in rows]


def active_token(session: Session, *, digest: str) -> ActiveToken | None:
    """The token whose hash is ``digest``, when it exists and is not revoked."""
    row = session.execute(
        select(ApiToken.id, ApiToken.token_hash, ApiToken.admin).where(
            ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None)
        )
    ).one_or_none()
    return None if row is None else ActiveToken(id=row.id, token_hash=row.token_hash, admin=bool(row.admin))


def any_active(session: Session) -> bool:
    """Whether at least one token exists that is not revoked."""
    return session.scalar(select(ApiToken.id).where(ApiToken.revoked_at.is_(None)).limit(1)) is not None

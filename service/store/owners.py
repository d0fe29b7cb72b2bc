"""Tenancy: who a request acts for, and the opaque ids the API shows.

Every candidate submission, data batch and study belongs to the token that created it (its
``owner_id``, the token's id). Another token's items are invisible to a caller: a read, a
list, a cancel or a study summary finds nothing, exactly as for an id that never existed. An
admin token sees every owner's items. With auth off (the service on localhost without tokens)
every request acts for one anonymous owner, :data:`ANONYMOUS`, which sees everything, as
before tenancy.

The shared work stays shared: one ``candidates`` row (the job and its report) per cache key,
and one ``data_batches`` row per content; what each owner holds is its own row in
``owned_candidates`` / ``data_batch_owners``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

__all__ = ["ANONYMOUS", "ANONYMOUS_OWNER", "PUBLIC_ID_LENGTH", "Caller", "capped_priority", "is_public_id", "public_id"]

# Token ids start at 1: 0 is no token (auth off). A number, not NULL, so that (owner, item)
# can be a unique key on SQLite and PostgreSQL alike (NULLs never collide in a unique index).
ANONYMOUS_OWNER = 0
PUBLIC_ID_LENGTH = 32  # 128 random bits as hex


@dataclass(frozen=True)
class Caller:
    """Whom a request acts for: the owner of what it creates, and whose items it sees."""

    owner_id: int
    admin: bool = False

    @property
    def anonymous(self) -> bool:
        """Auth is off: one owner, nothing to hide from anyone."""
        return self.owner_id == ANONYMOUS_OWNER

    def sees(self, owner_id: int) -> bool:
        return self.admin or owner_id == self.owner_id


ANONYMOUS = Caller(owner_id=ANONYMOUS_OWNER, admin=True)


def public_id() -> str:
    """A candidate's id in the API: 128 random bits, so that ids say nothing about how many
    others exist and cannot be guessed (sequential ids could be walked)."""
    return secrets.token_hex(PUBLIC_ID_LENGTH // 2)


def is_public_id(text: str) -> bool:
    """Whether ``text`` can be a public id at all; anything else is no candidate, not a query."""
    return len(text) == PUBLIC_ID_LENGTH and all(c in "0123456789abcdef" for c in text)


def capped_priority(priority: int, caller: Caller, cap: int) -> int:
    """The priority a submission gets: a token that is not admin gets at most ``cap``, so that no
    tenant can put its work ahead of everybody else's; lowering it is always allowed."""
    return priority if caller.admin else min(priority, cap)

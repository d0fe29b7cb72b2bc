"""Typed dependencies of the routes: the settings, a database session, the caller's token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from service.api.auth import TokenCache
from service.api.problems import ProblemError
from service.settings import Settings
from service.store.db import session_scope

__all__ = ["AuthDep", "SessionDep", "SettingsDep", "require_token"]


# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` in the
# thread pool, a hop that costs more than the work.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """A read transaction for one request. Writes never use a dependency: a write
    transaction runs in one thread-pool hop (see ``cancel_candidate``), because on SQLite
    it holds a lock that must not be held while waiting for another thread."""
    with session_scope(request.app.state.sessions) as session:
        yield session


async def require_token(request: Request) -> None:
    """Refuse the request unless auth is off or it carries a valid bearer token."""
    settings: Settings = request.app.state.settings
    if not settings.auth_required:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="preflight"'}
    if scheme.lower() != "bearer" or not token.strip():
        raise ProblemError(
            401, "missing bearer token; send 'Authorization: Bearer <token>' (see `preflight token create`)",
            kind="unauthorized", headers=challenge,
        )  # fmt: skip
    tokens: TokenCache = request.app.state.tokens
    if not await run_in_threadpool(tokens.is_valid, token.strip()):
        raise ProblemError(
            401, "invalid or revoked token", kind="unauthorized",
            headers={"WWW-Authenticate": 'Bearer realm="preflight", error="invalid_token"'},
        )  # fmt: skip


# scope="function": the transaction commits before the response is sent, so a client that
# reads right after a write sees it.
SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
AuthDep = Depends(require_token)

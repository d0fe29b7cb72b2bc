"""Typed dependencies of the routes: the settings, the store (engine, sessionmaker, a read
session, the group commit), the spec limits, the metrics and the caller (whom the request's
token acts for: ``service.store.owners``).

Routes take what they use as ``Annotated[..., Depends(...)]`` aliases from here and never
read ``request.app.state`` themselves; the app's lifespan puts these objects there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from nas import SpecLimits
from service.api.auth import TokenCache, auth_required_for, authenticate, bearer_token
from service.api.metrics import Metrics
from service.settings import Settings
from service.store.db import session_scope
from service.store.group_commit import GroupCommitter
from service.store.owners import ANONYMOUS, Caller

__all__ = [
    "AuthDep",
    "CallerDep",
    "WorkerLivenessDep",
    "CommitterDep",
    "EngineDep",
    "MetricsDep",
    "SessionDep",
    "SessionsDep",
    "SettingsDep",
    "SpecLimitsDep",
    "TokensDep",
    "require_token",
]


# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` in the
# thread pool, a hop that costs more than the work.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_engine(request: Request) -> Engine:
    return request.app.state.engine


async def get_sessions(request: Request) -> sessionmaker[Session]:
    """The sessionmaker, for a route that runs its own (write) transaction in one hop."""
    return request.app.state.sessions


async def get_committer(request: Request) -> GroupCommitter:
    return request.app.state.committer


async def get_spec_limits(request: Request) -> SpecLimits:
    return request.app.state.spec_limits


async def get_tokens(request: Request) -> TokenCache:
    return request.app.state.tokens


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def get_session(request: Request) -> Iterator[Session]:
    """A read transaction for one request. Writes never use a dependency: a write
    transaction runs in one thread-pool hop (see ``cancel_candidate``), because on SQLite
    it holds a lock that must not be held while waiting for another thread."""
    with session_scope(request.app.state.sessions) as session:
        yield session


# the bearer scheme, declared in the OpenAPI (the Authorize button of /docs); the check is ours
_BEARER = HTTPBearer(auto_error=False, description="an API token: `preflight token create NAME`")


async def require_token(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
) -> Caller:
    """Refuse the request unless auth is off or it carries a valid bearer token; answer whom it
    acts for (auth off: the one anonymous owner, who sees everything, as before tenancy). A
    request with a body had its token checked before the body was read
    (``service.api.middleware.TokenFirstMiddleware``), which left the caller in its state."""
    settings: Settings = request.app.state.settings
    if not auth_required_for(settings, request.scope):
        return ANONYMOUS
    checked: Caller | None = getattr(request.state, "caller", None)  # by TokenFirstMiddleware
    if checked is not None:
        return checked
    del credentials  # HTTPBearer's reading splits at a space only: the header is read as the middleware reads it
    return await authenticate(request.app.state.tokens, bearer_token(request.headers.getlist("authorization")))


async def get_waits(request: Request) -> Counter[int]:
    """Open long-polls per owner in this process (``PREFLIGHT_MAX_WAITS_PER_OWNER``)."""
    waits: Counter[int] = request.app.state.waits
    return waits


async def get_worker_liveness(request: Request) -> Callable[[], str | None] | None:
    """What runs beside the app (an embedded worker) says whether it can take jobs: its
    ``liveness()`` (None: it can; else why not), or None when nothing runs beside the app."""
    liveness: Callable[[], str | None] | None = request.app.state.worker_liveness
    return liveness


SettingsDep = Annotated[Settings, Depends(get_settings)]
WorkerLivenessDep = Annotated[Callable[[], str | None] | None, Depends(get_worker_liveness)]
EngineDep = Annotated[Engine, Depends(get_engine)]
SessionsDep = Annotated[sessionmaker[Session], Depends(get_sessions)]
CommitterDep = Annotated[GroupCommitter, Depends(get_committer)]
SpecLimitsDep = Annotated[SpecLimits, Depends(get_spec_limits)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
TokensDep = Annotated[TokenCache, Depends(get_tokens)]
WaitsDep = Annotated[Counter[int], Depends(get_waits)]
# scope="function": the transaction commits before the response is sent, so a client that
# reads right after a write sees it.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
AuthDep = Depends(require_token)
# the same dependency (FastAPI runs it once per request): routes that scope what they touch to its owner
CallerDep = Annotated[Caller, Depends(require_token)]

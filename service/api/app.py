"""The application factory: settings in, a FastAPI app out, with its database and metrics
started and stopped by the lifespan, and whatever the caller runs beside it (``background``:
``preflight serve --embedded-worker`` and ``service.embedded`` pass a job runner there)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager
from typing import Any

from anyio import to_thread
from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from sqlalchemy.orm import Session, sessionmaker

from nas import SpecLimits
from service.api.auth import TokenCache
from service.api.metrics import Metrics, RequestLatencyMiddleware
from service.api.middleware import (
    BodyLimitMiddleware,
    HeadAsGetMiddleware,
    RequestFormatMiddleware,
    TokenFirstMiddleware,
)
from service.api.problems import install_problem_handlers
from service.api.routes import batches, candidates, health, studies
from service.settings import Settings, get_settings
from service.store.db import make_engine, make_sessionmaker
from service.store.group_commit import GroupCommitter
from service.store.migrations import check_current

__all__ = ["Background", "create_app"]

log = logging.getLogger(__name__)

API_VERSION = "1"

# What runs beside the API for its lifetime: called at start-up with the app's sessionmaker
# (so that it shares the app's connection pool), it returns a context manager that the
# lifespan enters after the app's own resources are up and exits at shutdown, after the
# group commit has drained.
Background = Callable[[sessionmaker[Session]], AbstractContextManager[object]]


def create_app(settings: Settings | None = None, *, background: Background | None = None) -> FastAPI:
    """Build the API. ``background`` runs beside it in this process (e.g. a job runner, see
    ``service.embedded.embedded_runner``); the app itself starts no worker."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Blocking database work runs in the thread pool; its size bounds the connections
        # this process uses, so the pool holds one per thread and never opens and closes
        # connections under load.
        to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        engine = make_engine(settings.database_url, **_pool(settings))
        if settings.check_migrations:
            check_current(engine)
        sessions = make_sessionmaker(engine)
        app.state.engine = engine
        app.state.sessions = sessions
        app.state.committer = GroupCommitter(sessions, max_attempts=settings.max_attempts)
        app.state.tokens = TokenCache(sessions, settings.token_cache_seconds)
        app.state.spec_limits = SpecLimits()  # PREFLIGHT_SPEC_*, read once
        app.state.waits = Counter()  # open long-polls per owner (PREFLIGHT_MAX_WAITS_PER_OWNER)
        with ExitStack() as beside:
            # what runs beside the app (an embedded runner); readiness and /metrics ask it for its
            # liveness when it has one (``liveness() -> str | None``: None while it can take jobs)
            app.state.background = beside.enter_context(background(sessions)) if background is not None else None
            app.state.worker_liveness = _liveness_of(app.state.background)
            app.state.metrics = Metrics(sessions, liveness=app.state.worker_liveness)
            try:
                yield
            finally:
                await app.state.committer.aclose()
                beside.close()  # stops what ran beside the app (a runner: joins its thread)
                app.state.metrics = None
                engine.dispose()

    # FastAPIOffline: FastAPI whose /docs and /redoc load Swagger UI and ReDoc from assets the app
    # serves itself (a maintained package's), so the docs render without internet
    app = FastAPIOffline(
        title="Preflight",
        version=API_VERSION,
        summary="Conditions and scores NAS candidate architectures before training.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = None
    app.state.background = None
    app.state.worker_liveness = None
    install_problem_handlers(app)
    _declare_problem_responses(app)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        by_path={batches.router.prefix: (settings.max_batch_body_bytes, "PREFLIGHT_MAX_BATCH_BODY_BYTES")},
    )
    app.add_middleware(RequestFormatMiddleware)
    app.add_middleware(TokenFirstMiddleware)  # runs before the two above: a 401 before a 413 or 415
    app.add_middleware(RequestLatencyMiddleware, get_metrics=lambda: app.state.metrics)
    app.add_middleware(HeadAsGetMiddleware)  # outermost: every other layer sees a HEAD as the GET it is
    app.include_router(candidates.router)
    app.include_router(batches.router)
    app.include_router(studies.router)
    app.include_router(health.router)
    return app


def _declare_problem_responses(app: FastAPI) -> None:
    """The OpenAPI says what the server sends: every 4xx and 5xx body is ``application/problem+json``
    (``service.api.problems``), not the ``application/json`` FastAPI declares by default."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    for code, response in operation.get("responses", {}).items():
                        content = response.get("content", {})
                        if code[:1] in "45" and "application/json" in content:
                            response["content"] = {"application/problem+json": content["application/json"]}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _liveness_of(beside: object) -> Callable[[], str | None] | None:
    """The ``liveness()`` of what runs beside the app (an embedded worker), when it has one."""
    check = getattr(beside, "liveness", None)
    return check if callable(check) else None


def _pool(settings: Settings) -> dict[str, int]:
    """Connection pool of the API process: a connection for each thread of the pool, plus a
    few for the blocking work FastAPI runs outside that limit (dependency exits) and what
    runs in the background (an embedded worker)."""
    url = settings.database_url
    if url.startswith("sqlite") and (":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite+pysqlite:")):
        return {}  # an in-memory database has one connection per thread, no pool to size
    return {"pool_size": settings.api_threads + 2, "max_overflow": 4}

"""``create_app(settings, *, background=None)``: the app starts no worker of its own; what the
caller passes as ``background`` is entered with the app's sessionmaker at start-up and
exited at shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import FastAPI

from service.api.app import create_app
from service.api.auth import bearer_token
from service.settings import Settings


def _during_lifespan(app: FastAPI, check: Callable[[], None]) -> None:
    """Start the app's lifespan, run ``check``, shut it down."""

    async def run() -> None:
        async with app.router.lifespan_context(app):
            check()

    asyncio.run(run())


def test_background_runs_for_the_apps_lifetime_with_its_sessions(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    events: list[str] = []
    given: list[Any] = []

    @contextmanager
    def background(sessions: Any) -> Iterator[None]:
        given.append(sessions)
        events.append("start")
        try:
            yield
        finally:
            events.append("stop")

    app = create_app(make_settings(sqlite_url), background=background)
    assert events == []  # nothing starts before the lifespan

    def check() -> None:
        assert events == ["start"] and given[0] is app.state.sessions

    _during_lifespan(app, check)
    assert events == ["start", "stop"]


def test_without_background_the_app_runs_no_worker(sqlite_url: str, make_settings: Callable[..., Settings]) -> None:
    before = {t.name for t in threading.enumerate()}
    started: set[str] = set()
    _during_lifespan(
        create_app(make_settings(sqlite_url)),
        lambda: started.update({t.name for t in threading.enumerate()} - before),
    )
    assert not [name for name in started if "runner" in name.lower()]


def test_health_and_readiness_answer_while_every_thread_of_the_shared_pool_is_busy(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """One tenant's large batch validations filled the routes' thread pool (PREFLIGHT_API_THREADS)
    and held /healthz and /readyz back 26 s: a container healthcheck failed a working service."""
    import httpx
    from anyio import to_thread

    app = create_app(make_settings(sqlite_url, api_threads=1))
    release = threading.Event()

    async def run() -> dict[str, int]:
        async with app.router.lifespan_context(app):
            holder = asyncio.create_task(to_thread.run_sync(release.wait))  # the pool's one thread
            try:
                while to_thread.current_default_thread_limiter().borrowed_tokens < 1:
                    await asyncio.sleep(0.01)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                    # a generous bound: each answers in milliseconds when it needs no pool thread
                    return {
                        path: (await asyncio.wait_for(client.get(path), 60)).status_code
                        for path in ("/healthz", "/readyz")
                    }
            finally:
                release.set()
                await holder

    assert asyncio.run(run()) == {"/healthz": 200, "/readyz": 200}


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ([], ""),
        ([""], ""),
        (["   "], ""),
        (["Bearer"], ""),
        (["Bearer "], ""),
        (["Basic abc"], ""),
        (["Bearer abc"], "abc"),
        (["bearer  abc "], "abc"),
        (["Bearer\tabc"], "abc"),
    ],
)
def test_the_bearer_token_is_read_after_any_whitespace_and_an_empty_header_is_no_token(
    header: list[str], token: str
) -> None:
    assert bearer_token(header) == token

"""``create_app(settings, *, background=None)``: the app starts no worker of its own; what the
caller passes as ``background`` is entered with the app's sessionmaker at start-up and
exited at shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from service.api.app import create_app
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

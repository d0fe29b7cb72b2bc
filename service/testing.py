"""Helpers to run the real service in tests (here and in users' own test suites): a live
API on a free local port, in a thread of the test process, and a scratch PostgreSQL database."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.pool import NullPool

from service.embedded import EmbeddedService
from service.settings import Settings

__all__ = ["free_port", "live_server", "queue_candidates", "scratch_database"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def live_server(
    settings: Settings,
    *,
    embedded_worker: bool = False,
    migrate: bool = True,
    timeout: float = 30.0,
) -> Iterator[str]:
    """Serve the API over real HTTP on 127.0.0.1 and yield its base URL.

    >>> with live_server(Settings(database_url="sqlite:///" + path)) as url:  # doctest: +SKIP
    ...     httpx.get(url + "/healthz")
    """
    service = EmbeddedService(settings, embedded_worker=embedded_worker, migrate=migrate, startup_timeout=timeout)
    with service:
        yield service.url


@contextmanager
def scratch_database(server_url: str, prefix: str = "preflight_scratch", drop_timeout: float = 0.0) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the server of ``server_url`` (any database there that
    the user may connect to); yields its URL and drops it at the end, even with connections still
    open. ``drop_timeout``: seconds to retry the drop while the server is unreachable (a test that
    restarts it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            deadline = time.monotonic() + drop_timeout
            while True:
                try:
                    with admin.connect() as connection:
                        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                    break
                except (OperationalError, InterfaceError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
    finally:
        admin.dispose()


def queue_candidates(
    database_url: str,
    specs: Sequence[dict[str, Any]],
    options: dict[str, Any],
    *,
    owner_id: int = 0,
    max_attempts: int = 3,
    engine: str | None = None,
    device: str = "any",
) -> list[int]:
    """Queue ``specs`` straight into the store, as the API's submission does (``owner_id``: a
    token's id, 0 the anonymous owner; ``engine`` None: this checkout's revision); their job ids."""
    from nas import parse_spec, spec_hash
    from service.store import jobs
    from service.store.db import make_engine, make_sessionmaker, session_scope

    new = []
    for raw in specs:
        parsed = parse_spec(raw)
        new.append(
            jobs.NewCandidate(
                spec=parsed.model_dump(mode="json", exclude_none=True),
                spec_hash=spec_hash(parsed),
                options=options,
                owner_id=owner_id,
                device=device,
                **cast(dict[str, Any], {"engine": engine} if engine else {}),
            )
        )
    store = make_engine(database_url)
    try:
        with session_scope(make_sessionmaker(store), write=True) as session:
            return [entry.id for entry in jobs.submit(session, candidates=new, max_attempts=max_attempts)]
    finally:
        store.dispose()

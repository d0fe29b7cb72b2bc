"""Helpers to run the real service in tests (here and in users' own test suites): a live
API on a free local port, in a thread of the test process, and a scratch PostgreSQL database."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.pool import NullPool

from service.embedded import EmbeddedService
from service.settings import Settings

__all__ = ["free_port", "live_server", "scratch_database"]


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

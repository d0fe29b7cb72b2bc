"""Helpers to run the real service in tests (here and in users' own test suites): a live
API on a free local port, in a thread of the test process."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from service.embedded import EmbeddedService
from service.settings import Settings

__all__ = ["free_port", "live_server"]


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

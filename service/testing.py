"""Helpers to run the real service in tests (here and in users' own test suites): a live
API on a free local port, in a thread of the test process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from service.app import create_app
from service.migrations import upgrade
from service.settings import Settings

__all__ = ["free_port", "live_server"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def live_server(
    settings: Settings, *, embedded_worker: bool = False, migrate: bool = True, timeout: float = 30.0
) -> Iterator[str]:
    """Serve the API over real HTTP on 127.0.0.1 and yield its base URL.

    >>> with live_server(Settings(database_url="sqlite:///" + path)) as url:  # doctest: +SKIP
    ...     httpx.get(url + "/healthz")
    """
    if migrate:
        upgrade(settings.database_url)
    port = free_port()
    settings = settings.model_copy(update={"port": port})
    app = create_app(settings, embedded_worker=embedded_worker)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on")
    )
    thread = threading.Thread(target=server.run, name=f"preflight-api-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the API did not start (see the log above)")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)

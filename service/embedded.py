"""The service inside this process: migrations applied, the API served by uvicorn in a
background thread on a free local port, and (optionally) a job runner embedded in the app.

``preflight demo`` runs on it, and so do tests that need a real running service (here and in
users' own suites; ``service.testing.live_server`` is the context-manager form)::

    with EmbeddedService("sqlite:///" + str(tmp_path / "preflight.db")) as service:
        client = PreflightClient(service.url)

In a script, start it under ``if __name__ == "__main__":``: the worker's engine runs in a child
process started with ``spawn``, which imports the main script again (as ``multiprocessing``
requires of any script that starts processes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from service.settings import Settings

if TYPE_CHECKING:
    from service.api.app import Background

__all__ = ["EmbeddedService", "embedded_runner"]


def embedded_runner(settings: Settings, *, device: str = "auto") -> Background:
    """A job runner in a thread beside the API, for ``create_app(background=...)``: it uses
    the app's sessionmaker, starts with the app and is stopped (and joined) at its shutdown."""

    @contextmanager
    def run(sessions: Any) -> Iterator[object]:
        from worker.jobs.runner import Runner

        runner = Runner(settings, device=device, sessions=sessions)
        runner.start_thread()
        try:
            yield runner
        finally:
            runner.stop()
            runner.join(timeout=settings.shutdown_grace_seconds + 10)

    return run


def _refuse_while_a_child_imports_main() -> None:
    """The worker's engine runs in a child process started with ``spawn``, which imports the main
    script again: a script that starts the service at its top level started another one in each
    child, whose engine never came up, and its candidates stayed queued until the client's timeout.
    multiprocessing marks that import (``_inheriting``, what its own "bootstrapping phase" error
    reads); the child now stops at once, saying why, and the job fails instead of hanging."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "EmbeddedService was started while a child process (the worker's engine, started with spawn) imported "
            'the main script again: start it under `if __name__ == "__main__":` in a script'
        )


class EmbeddedService:
    """Start the service on 127.0.0.1 in this process; stop it on exit.

    Args:
        database: SQLAlchemy URL of the store, or complete :class:`Settings` (it listens on a
            free port of 127.0.0.1 whatever they say; their host still decides auth).
        embedded_worker: run a job runner in the app (the one-machine default).
        device: the embedded worker's device (``auto``, ``cpu``, ``cuda:N``).
        migrate: apply the migrations first.
        startup_timeout: seconds to wait for the API to listen.
        settings: further :class:`Settings` fields (e.g. ``poll_seconds``).
    """

    def __init__(
        self,
        database: str | Settings,
        *,
        embedded_worker: bool = True,
        device: str = "auto",
        migrate: bool = True,
        startup_timeout: float = 60.0,
        **settings: Any,
    ) -> None:
        base = database if isinstance(database, Settings) else Settings(database_url=database)
        # it listens on 127.0.0.1 whatever the settings say; their host still decides auth
        self.settings = base.model_copy(update={**settings, "port": 0})
        self.embedded_worker = embedded_worker
        self.device = device
        self.migrate = migrate
        self.startup_timeout = startup_timeout
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> EmbeddedService:
        _refuse_while_a_child_imports_main()
        import uvicorn

        from service.api.app import create_app
        from service.store.migrations import upgrade

        if self.migrate:
            upgrade(self.settings.database_url)
        background = embedded_runner(self.settings, device=self.device) if self.embedded_worker else None
        app = create_app(self.settings, background=background)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            access_log=False,
            lifespan="on",
            root_path=self.settings.root_path,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="preflight-embedded-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self._server.started:
            if not self._thread.is_alive():
                self.stop()
                raise RuntimeError("the embedded Preflight service failed to start (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the embedded Preflight service did not start within {self.startup_timeout} s")
            time.sleep(0.02)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._server = self._thread = None

    def __enter__(self) -> EmbeddedService:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

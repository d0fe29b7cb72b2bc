"""The job runner: claims candidates from the store, runs the conditioning engine on them
and writes what it finds, for as long as it is told to.

One runner works one job at a time on one device. While the engine runs, a watcher thread
renews the lease (heartbeat) and enforces the per-job timeout, cancellation and shutdown by
raising an exception into the runner's thread (:class:`JobAborted`), between two Python
bytecodes of the engine; the engine never needs to poll. Database errors (a restarted
server, a locked SQLite file) are retried with backoff, so a runner outlives its database.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service import queue
from service.db import make_engine, make_sessionmaker, session_scope
from service.settings import Settings

__all__ = ["JobAborted", "JobLost", "JobReleased", "JobTimeout", "Runner", "resolve_device"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that retrying cannot fix: the job fails at once instead of using up its attempts.
_DETERMINISTIC = (ValueError, TypeError, KeyError)


class JobAborted(BaseException):
    """The job was taken away from the engine (a BaseException: the engine cannot swallow it)."""


class JobTimeout(JobAborted):
    """The job ran past the per-job timeout (setting PREFLIGHT_JOB_TIMEOUT_SECONDS)."""


class JobLost(JobAborted):
    """The lease is no longer ours: the job was cancelled, or expired and taken by another worker."""


class JobReleased(JobAborted):
    """The worker is shutting down and the grace period is over; the job goes back to the queue."""


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda:0`` when a GPU is visible, else ``cpu``; ``cuda`` -> ``cuda:0``."""
    if device == "cpu":
        return "cpu"
    import torch

    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        device = "cuda:0"
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} asked for, but no CUDA device is visible")
    return device


def _raise_in_thread(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Schedule ``exc_type`` in another thread (None clears a scheduled one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id),
        ctypes.py_object(exc_type) if exc_type is not None else ctypes.c_void_p(None),
    )


class _Watch:
    """Shared between the runner's thread and its watcher for one job."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.computing = True
        self.finished = threading.Event()


class Runner:
    """Claims and runs jobs until :meth:`stop` (or, with ``burst``, until the queue is empty)."""

    def __init__(
        self,
        settings: Settings,
        *,
        device: str = "auto",
        sessions: sessionmaker[Session] | None = None,
        name: str | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
    ) -> None:
        self.settings = settings
        self.requested_device = device
        self.device = "cpu" if device == "cpu" else ""  # resolved when the loop starts
        self._own_engine = None
        if sessions is None:
            self._own_engine = make_engine(settings.database_url)
            sessions = make_sessionmaker(self._own_engine)
        self.sessions = sessions
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.burst = burst
        self.max_jobs = max_jobs
        self.done = 0
        self._stop = threading.Event()
        self._stop_at: float | None = None
        self._hard_stop = False
        self._thread: threading.Thread | None = None
        self._last_reap = 0.0

    # Control -------------------------------------------------------------------------

    def stop(self, *, hard: bool = False) -> None:
        """Stop claiming; finish the current job within the grace period (``hard``: release it now)."""
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        self._hard_stop = self._hard_stop or hard
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM / SIGINT: stop gracefully; a second one releases the current job at once."""

        def handler(signum: int, _frame: Any) -> None:
            log.info("worker %s: signal %d, %s", self.name, signum,
                     "releasing the job" if self._stop.is_set() else "finishing the job, then exiting")  # fmt: skip
            self.stop(hard=self._stop.is_set())

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def start_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name=f"preflight-runner-{self.name}", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # The loop ------------------------------------------------------------------------

    def run(self) -> int:
        """The main loop; returns how many jobs this runner finished (done or failed)."""
        self.device = resolve_device(self.requested_device)
        kind = "cuda" if self.device.startswith("cuda") else "cpu"
        if kind == "cuda":
            import torch

            torch.cuda.set_device(torch.device(self.device))
        self.name = f"{self.name}:{self.device}"
        log.info("worker %s: started", self.name)
        try:
            while not self._stop.is_set():
                if self.max_jobs is not None and self.done >= self.max_jobs:
                    break
                self._maybe_reap()
                job = self._db(lambda s: queue.claim(
                    s, worker=self.name, device_kind=kind, lease_seconds=self.settings.lease_seconds,
                ), until_stopped=True)  # fmt: skip
                if job is None:
                    if self.burst and not self._stop.is_set() and self._queue_empty():
                        break
                    self._stop.wait(self.settings.poll_seconds)
                    continue
                self._run_job(job)
        finally:
            log.info("worker %s: stopped after %d job(s)", self.name, self.done)
            if self._own_engine is not None:
                self._own_engine.dispose()
        return self.done

    def _queue_empty(self) -> bool:
        depth = self._db(queue.queue_depth, write=False, until_stopped=True)
        return not depth or (depth[queue.Status.QUEUED] == 0 and depth[queue.Status.RUNNING] == 0)

    def _maybe_reap(self) -> None:
        now = time.monotonic()
        if now - self._last_reap < min(self.settings.lease_seconds / 2, 10.0):
            return
        self._last_reap = now
        reaped = self._db(queue.reap, until_stopped=True)
        if reaped:
            log.warning("worker %s: put %d job(s) with expired leases back", self.name, reaped)

    def _run_job(self, job: queue.Job) -> None:
        log.info("worker %s: job %d, attempt %d/%d", self.name, job.id, job.attempts, job.max_attempts)
        watch = _Watch()
        watcher = threading.Thread(
            target=self._watch, args=(job, threading.get_ident(), watch), name="preflight-lease", daemon=True
        )
        watcher.start()
        outcome: tuple[str, Any]
        try:
            try:
                try:
                    outcome = ("done", self._condition(job))
                except JobAborted:
                    raise
                except Exception as exc:  # the engine's error is the job's outcome
                    outcome = ("error", exc)
                finally:
                    with watch.lock:
                        watch.computing = False
                        _raise_in_thread(threading.get_ident(), None)
            except JobAborted as exc:
                outcome = ("aborted", exc)
        finally:
            watch.finished.set()
            watcher.join()
        self._record(job, *outcome)

    def _record(self, job: queue.Job, kind: str, value: Any) -> None:
        token = job.lease_token
        if kind == "done":
            stored = self._db(lambda s: queue.complete(s, job_id=job.id, token=token, report=value))
            log.info("worker %s: job %d %s", self.name, job.id, "done" if stored else "lost its lease; result dropped")
            self.done += 1
        elif kind == "error":
            error = f"{type(value).__name__}: {value}"
            status = self._db(lambda s: queue.fail(
                s, job_id=job.id, token=token, error=error, retry=not isinstance(value, _DETERMINISTIC)
            ))  # fmt: skip
            log.warning("worker %s: job %d failed (%s), now %s", self.name, job.id, error, status)
            self.done += 1
        elif isinstance(value, JobTimeout):
            error = f"timed out after {self.settings.job_timeout_seconds:g} s (setting PREFLIGHT_JOB_TIMEOUT_SECONDS)"
            status = self._db(lambda s: queue.fail(s, job_id=job.id, token=token, error=error))
            log.warning("worker %s: job %d %s, now %s", self.name, job.id, error, status)
            self.done += 1
        elif isinstance(value, JobReleased):
            self._db(lambda s: queue.release(s, job_id=job.id, token=token))
            log.info("worker %s: job %d released (shutting down)", self.name, job.id)
        else:
            log.info("worker %s: job %d cancelled or taken over; dropped", self.name, job.id)

    def _condition(self, job: queue.Job) -> dict[str, Any]:
        from worker.condition import condition
        from worker.options import ConditionOptions

        options = ConditionOptions.model_validate({**job.options, "device": self.device})
        report = condition(job.spec, options=options)
        return report.model_dump(mode="json")

    def _watch(self, job: queue.Job, thread_id: int, watch: _Watch) -> None:
        """Heartbeat, and abort the job on timeout, lost lease or the end of the grace period."""
        settings = self.settings
        started = time.monotonic()
        next_beat = started + settings.heartbeat_seconds
        while not watch.finished.wait(0.1):
            now = time.monotonic()
            reason: type[JobAborted] | None = None
            if now - started > settings.job_timeout_seconds:
                reason = JobTimeout
            elif self._hard_stop or (
                self._stop_at is not None and now - self._stop_at > settings.shutdown_grace_seconds
            ):
                reason = JobReleased
            elif now >= next_beat:
                next_beat = now + settings.heartbeat_seconds
                try:
                    with session_scope(self.sessions, write=True) as session:
                        held = queue.heartbeat(
                            session, job_id=job.id, token=job.lease_token, lease_seconds=settings.lease_seconds
                        )
                except (OperationalError, InterfaceError, DBAPIError) as exc:
                    log.warning("worker %s: heartbeat of job %d failed (%s); retrying", self.name, job.id, exc)
                    held = True
                if not held:
                    reason = JobLost
            if reason is not None:
                with watch.lock:
                    if watch.computing:
                        _raise_in_thread(thread_id, reason)
                return

    def _db(self, work: Callable[[Session], T], *, write: bool = True, until_stopped: bool = False) -> T | None:
        """Run ``work`` in a transaction, retrying while the database is unreachable.

        ``until_stopped``: give up (None) once the runner is stopping; otherwise keep
        trying until the shutdown grace period is over.
        """
        delay = 0.1
        while True:
            try:
                with session_scope(self.sessions, write=write) as session:
                    return work(session)
            except (OperationalError, InterfaceError, DBAPIError) as exc:
                if isinstance(exc, DBAPIError) and not isinstance(exc, (OperationalError, InterfaceError)) \
                        and not exc.connection_invalidated:
                    raise
                log.warning("worker %s: database error (%s); retrying in %.1f s",
                            self.name, str(exc).splitlines()[0], delay)  # fmt: skip
            if until_stopped and self._stop.is_set():
                return None
            if self._stop_at is not None and time.monotonic() - self._stop_at > self.settings.shutdown_grace_seconds + 30:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

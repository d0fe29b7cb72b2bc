"""The job runner: claims candidates from the store, has the conditioning engine work on
them and writes what it finds, for as long as it is told to.

One runner works one job at a time on one device. The engine runs in a child process
(:mod:`worker.jobs.engine_process`); while it works, the runner renews the lease (heartbeat) and
enforces the per-job timeout, cancellation and shutdown by ending that child, which stops
the job at once whatever the engine is doing. Database errors (a restarted server, a locked
SQLite file) are retried with backoff, so a runner outlives its database.

Each attempt ends in one :class:`~worker.jobs.outcome.Outcome`; :meth:`Runner._record` writes
it to the store, asking the runner's :class:`~worker.jobs.outcome.RetryPolicy` whether a
failed attempt is tried again.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from nas.canonical import DATA_OPTION as DATA
from service.revision import engine_revision
from service.settings import Settings
from service.store import data_batches, jobs
from service.store.db import make_engine, make_sessionmaker, session_scope
from worker.jobs.engine_process import EngineCrashed, EngineError, EngineProcess, EngineStartStopped
from worker.jobs.outcome import Outcome, RetryPolicy

__all__ = ["Runner"]

log = logging.getLogger(__name__)
T = TypeVar("T")

# How often an idle worker that is not a burst worker looks at the backlog (for the warning
# about another engine revision's jobs): a query a minute, not one per poll.
_BACKLOG_SECONDS = 60.0


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
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.settings = settings
        self.retry_policy = retry_policy or RetryPolicy()
        self.engine = EngineProcess(device, memory_bytes=settings.engine_memory_bytes)
        self._own_engine = None
        if sessions is None:
            self._own_engine = make_engine(settings.database_url)
            sessions = make_sessionmaker(self._own_engine)
        self.sessions = sessions
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.burst = burst
        self.max_jobs = max_jobs
        self.done = 0
        # the last data batch a job named, by id
        self._batch: tuple[str, dict[str, Any]] | None = None
        self._stop = threading.Event()
        self._stop_at: float | None = None
        self._hard_stop = False
        self._thread: threading.Thread | None = None
        self._last_reap = 0.0
        self._last_backlog = -math.inf  # when the idle loop last looked at the backlog
        self._foreign_warned = 0  # the other revisions' queued jobs named in the last warning
        self._kind: str | None = None  # the device kind the runner claims for, once its engine runs
        # liveness (``liveness()``): when the loop last made progress, and why the engine is down
        self._progress = time.monotonic()
        self._touched = -math.inf  # when the alive file was last touched
        self._touch_failed = False  # the last touch failed (warned once until one succeeds)
        self._engine_down: str | None = None

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
            log.info(
                "worker %s: signal %d, %s",
                self.name,
                signum,
                "releasing the job" if self._stop.is_set() else "finishing the job, then exiting",
            )
            self.stop(hard=self._stop.is_set())

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def start_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name=f"preflight-runner-{self.name}", daemon=True)
        self._thread.start()
        return self._thread

    def liveness(self) -> str | None:
        """None while this runner can take jobs; else why not, for readiness probes: its thread
        ended, its engine cannot start (it retries with backoff), or its loop made no progress for a
        lease (a poll or a heartbeat is due far more often)."""
        if self._thread is not None and not self._thread.is_alive():
            return "the worker thread has stopped"
        if self._engine_down is not None:
            return self._engine_down
        stalled = time.monotonic() - self._progress
        if stalled > self.settings.lease_seconds:
            return f"the worker loop made no progress for {stalled:.0f} s"
        return None

    def _mark_progress(self) -> None:
        """The loop made progress: for ``liveness()``, and for a container healthcheck the file
        ``settings.worker_alive_file`` touched (at most once a heartbeat)."""
        now = time.monotonic()
        self._progress = now
        path = self.settings.worker_alive_file
        if path and now - self._touched >= self.settings.heartbeat_seconds:
            self._touched = now
            try:
                Path(path).touch()
                self._touch_failed = False
            except OSError as exc:  # a healthcheck's file must not stop the work; said once, not every heartbeat
                if not self._touch_failed:
                    log.warning(
                        "worker %s: cannot touch %s (%s); a healthcheck that reads PREFLIGHT_WORKER_ALIVE_FILE "
                        "will call this worker dead until it can",
                        self.name,
                        path,
                        exc,
                    )
                self._touch_failed = True

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # The loop ------------------------------------------------------------------------

    def run(self) -> int:
        """The main loop; returns how many jobs this runner finished (done or failed)."""
        try:
            device = self._ensure_engine()  # an engine that cannot start is retried, not fatal
            if device is None:
                return self.done
            kind = self._kind = "cuda" if device.startswith("cuda") else "cpu"
            self.name = f"{self.name}:{device}"
            log.info("worker %s: started (engine revision %s)", self.name, engine_revision())
            while not self._stop.is_set():
                self._mark_progress()
                if self.max_jobs is not None and self.done >= self.max_jobs:
                    break
                self._maybe_reap()
                if self._ensure_engine() is None:  # (re)started before a claim: no lease is held meanwhile
                    break  # stopped while it started: claim nothing
                job = self._db(
                    lambda s: jobs.claim(
                        s,
                        worker=self.name,
                        device_kind=kind,
                        lease_seconds=self.settings.lease_seconds,
                    ),
                    until_stopped=True,
                )
                if job is None:
                    if self._idle_and_done():
                        break
                    self._idle(self.settings.poll_seconds)
                    continue
                self._run_job(job)
        finally:
            log.info("worker %s: stopped after %d job(s)", self.name, self.done)
            self.engine.close()
            if self._own_engine is not None:
                self._own_engine.dispose()
        return self.done

    def _idle(self, seconds: float) -> None:
        """Wait ``seconds`` for work, or until stopped, marking progress at least once a heartbeat:
        a poll longer than the lease (or than a healthcheck's bound on the alive file) is a
        waiting loop, not a stalled one."""
        until = time.monotonic() + seconds
        while not self._stop.is_set() and (left := until - time.monotonic()) > 0:
            self._stop.wait(min(left, self.settings.heartbeat_seconds))
            self._mark_progress()

    def _ensure_engine(self) -> str | None:
        """Start the engine (a no-op when it runs), retrying with backoff (1 s doubling to 60 s)
        while it fails; its device, or None when the runner stopped first."""
        delay = 1.0
        while not self._stop.is_set():
            try:
                if not self.engine.running:
                    self._engine_down = self._engine_down or "the engine is starting"
                device = self.engine.start(stop=self._stop)
                self._engine_down = None
                self._progress = time.monotonic()
                return device
            except EngineStartStopped:
                return None
            except EngineCrashed as exc:
                self._engine_down = f"the engine cannot start ({exc}); retrying with backoff"
                log.error("worker %s: %s; retrying in %.0f s", self.name, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 60.0)
        return None

    def _idle_and_done(self) -> bool:
        """A claim found nothing: look at the backlog (a burst worker every time, any other once
        a minute) and warn, once per change, about jobs queued under another engine revision,
        which wait for a worker of their own release. True when a burst worker should stop:
        nothing claimable is queued and nothing runs."""
        now = time.monotonic()
        if self._stop.is_set() or (not self.burst and now - self._last_backlog < _BACKLOG_SECONDS):
            return self.burst
        self._last_backlog = now
        backlog = self._db(lambda s: jobs.backlog(s, device_kind=self._kind), write=False, until_stopped=True)
        if backlog is None:  # stopped while the database was unreachable
            return True
        if backlog.foreign and backlog.foreign != self._foreign_warned:
            log.warning(
                "worker %s: %d queued job(s) were keyed by another engine revision than this worker's (%s); "
                "a worker of the same release as the service that queued them takes them",
                self.name,
                backlog.foreign,
                engine_revision(),
            )
        self._foreign_warned = backlog.foreign
        return self.burst and backlog.claimable == 0 and backlog.running == 0

    def _maybe_reap(self, *, busy: bool = False) -> None:
        """Put expired leases back every ``min(lease / 2, 10 s)``: from the idle loop, and from a
        busy job's heartbeat too, so that a dead worker's job is back in the queue within about a
        lease and a heartbeat even when every worker is busy. While busy, one attempt: a worker
        with a job to watch does not wait on an unreachable database for the sake of another's."""
        now = time.monotonic()
        if now - self._last_reap < min(self.settings.lease_seconds / 2, 10.0):
            return
        self._last_reap = now
        reaped: int | None
        if busy:
            try:
                with session_scope(self.sessions, write=True) as session:
                    reaped = jobs.reap(session)
            except (OperationalError, InterfaceError, DBAPIError) as exc:
                log.warning("worker %s: reaping failed (%s); next heartbeat", self.name, str(exc).splitlines()[0])
                return
        else:
            reaped = self._db(jobs.reap, until_stopped=True)
        if reaped:
            log.warning("worker %s: put %d job(s) with expired leases back", self.name, reaped)

    def _run_job(self, job: jobs.Job) -> None:
        """Hand the job to the engine; heartbeat, and stop it on timeout, lost lease or shutdown."""
        log.info("worker %s: job %d, attempt %d/%d", self.name, job.id, job.attempts, job.max_attempts)
        settings = self.settings
        started = time.monotonic()
        next_beat = started + settings.heartbeat_seconds
        outcome: tuple[Outcome, Any] | None = None
        options, data = self._options_and_data(job)
        try:
            if isinstance(data, EngineError):
                outcome = (data.outcome, data)
            else:
                self.engine.submit(job.spec, options, data)
        except EngineCrashed as exc:
            outcome = (Outcome.CRASHED, exc)
        while outcome is None:
            self._mark_progress()
            try:
                outcome = self.engine.result(timeout=0.1)
            except EngineCrashed as exc:
                outcome = (Outcome.CRASHED, exc)
            if outcome is not None:
                break
            now = time.monotonic()
            if now - started > settings.job_timeout_seconds:
                outcome = (Outcome.TIMEOUT, None)
            elif self._hard_stop or (
                self._stop_at is not None and now - self._stop_at > settings.shutdown_grace_seconds
            ):
                outcome = (Outcome.RELEASED, None)
            elif now >= next_beat:
                next_beat = now + settings.heartbeat_seconds
                if not self._heartbeat(job):
                    outcome = (Outcome.LOST, None)
                else:
                    self._maybe_reap(busy=True)
            if outcome is not None:
                self.engine.kill()
        self._record(job, *outcome)

    def _options_and_data(self, job: jobs.Job) -> tuple[dict[str, Any], dict[str, Any] | EngineError | None]:
        """The engine's options, and the uploaded data batch the job names (None: the engine's
        Gaussian batch; an EngineError, which fails the job, when the batch is gone)."""
        options = dict(job.options)
        key = options.pop(DATA, None)
        if key is None:
            return options, None
        # ids are content hashes: a cached batch never goes stale
        if self._batch is None or self._batch[0] != key:
            data = self._db(lambda s: data_batches.load(s, key), write=False)
            if data is None:
                return options, EngineError(
                    "LookupError",
                    f"the data batch {key} named in the options is not in the database",
                    True,
                )
            self._batch = (key, data)
        return options, self._batch[1]

    def _heartbeat(self, job: jobs.Job) -> bool:
        """Renew the lease once; True unless the job is no longer ours (a failed try counts as held)."""
        try:
            with session_scope(self.sessions, write=True) as session:
                return jobs.heartbeat(
                    session,
                    job_id=job.id,
                    token=job.lease_token,
                    lease_seconds=self.settings.lease_seconds,
                )
        except (OperationalError, InterfaceError, DBAPIError) as exc:
            log.warning(
                "worker %s: heartbeat of job %d failed (%s); retrying", self.name, job.id, str(exc).splitlines()[0]
            )
            return True

    def _record(self, job: jobs.Job, outcome: Outcome, value: Any) -> None:
        """Write the attempt's outcome to the store. ``value``: the report (DONE), the
        EngineError (ERROR, DETERMINISTIC_ERROR), the EngineCrashed (CRASHED), else None."""
        token = job.lease_token
        if outcome is Outcome.DONE:
            stored = self._db(lambda s: jobs.complete(s, job_id=job.id, token=token, report=value))
            log.info(
                "worker %s: job %d %s",
                self.name,
                job.id,
                "done" if stored else "lost its lease; result dropped",
            )
            self.done += 1
            return
        if outcome is Outcome.RELEASED:
            self._db(lambda s: jobs.release(s, job_id=job.id, token=token))
            log.info("worker %s: job %d released (shutting down)", self.name, job.id)
            return
        if outcome is Outcome.LOST:
            log.info("worker %s: job %d cancelled or taken over; dropped", self.name, job.id)
            return
        if outcome is Outcome.TIMEOUT:
            error = f"timed out after {self.settings.job_timeout_seconds:g} s (setting PREFLIGHT_JOB_TIMEOUT_SECONDS)"
        elif isinstance(value, EngineError):
            error = str(value)
        else:
            error = f"{type(value).__name__}: {value}"
        # job.attempts is the store's count while the lease is held (the claim counted this
        # attempt); jobs.fail checks it against max_attempts again, in the same statement
        retry = self.retry_policy.retries(outcome, job.attempts, job.max_attempts)
        status = self._db(lambda s: jobs.fail(s, job_id=job.id, token=token, error=error, retry=retry))
        log.warning("worker %s: job %d failed (%s), now %s", self.name, job.id, error, status)
        self.done += 1

    def _db(self, work: Callable[[Session], T], *, write: bool = True, until_stopped: bool = False) -> T | None:
        """Run ``work`` in a transaction, retrying while the database is unreachable.

        ``until_stopped``: give up (None) once the runner is stopping; otherwise keep
        trying until 30 s past the shutdown grace period.
        """
        delay = 0.1
        while True:
            try:
                with session_scope(self.sessions, write=write) as session:
                    return work(session)
            except (OperationalError, InterfaceError, DBAPIError) as exc:
                if (
                    isinstance(exc, DBAPIError)
                    and not isinstance(exc, (OperationalError, InterfaceError))
                    and not exc.connection_invalidated
                ):
                    raise
                log.warning(
                    "worker %s: database error (%s); retrying in %.1f s", self.name, str(exc).splitlines()[0], delay
                )
            if until_stopped and self._stop.is_set():
                return None
            if (
                self._stop_at is not None
                and time.monotonic() - self._stop_at > self.settings.shutdown_grace_seconds + 30
            ):
                return None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

"""``python -m bench.perf.fault_run``: the queue's guarantees, measured against real processes.

On a scratch PostgreSQL database (created, migrated with ``preflight db upgrade``, dropped at the
end) it starts the API (``preflight serve``, bearer tokens required) and two workers
(``preflight worker --device cpu``, short leases), each as ``python -m service.cli`` (the console
script's module) with this interpreter, submits N distinct candidates over HTTP
with fast tuning options, and meanwhile injects faults, each once the queue has done a given
share of the jobs:

- SIGKILL of a worker while it holds a job (restarted at once), ``--worker-kills`` times,
  alternating between the two workers;
- SIGKILL of the API process (restarted on the same port), ``--api-restarts`` times;
- a restart of the PostgreSQL server (``pg_ctlcluster ... restart``), ``--db-restarts`` times;
- clock skew: the second worker runs with its Python wall clock ``--skew-seconds`` ahead. No
  setting shifts a worker's clock, so that worker is started through a shim here that shifts
  ``time.time`` and the ``datetime.now`` of the service's modules (as the store's own skew tests
  do). Leases are measured on the database's clock (``service.store.db.db_now``), so the skew
  must change nothing; if it did, that worker would reap healthy leases and jobs would run twice.

It then waits until every job is done and counts, from the database, from the API and from the
workers' logs: jobs lost (acknowledged but never done), jobs completed more than once (a worker
logs ``job N done`` exactly when its lease-checked ``complete`` wrote the result), duplicate rows,
re-executions (attempts above one: at-least-once execution), results dropped by the lease check,
every HTTP status the client saw (5xx included), and each fault's recovery time. The figures go to
``--json`` (default ``bench/results/fault_run.json``); the exit status is 1 when a guarantee
failed. The smoke test is ``tests/bench/perf/test_fault_run.py``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.pool import NullPool

from nas.testing import FAST_OPTIONS, mlp
from service.testing import free_port, scratch_database

__all__ = ["main"]

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JSON = ROOT / "bench" / "results" / "fault_run.json"
STUDY = "fault-run"
# Fast leases, so that a killed worker's job is back in the queue within seconds.
QUEUE_SETTINGS = {
    "PREFLIGHT_LEASE_SECONDS": "5",
    "PREFLIGHT_HEARTBEAT_SECONDS": "1",
    "PREFLIGHT_POLL_SECONDS": "0.2",
    "PREFLIGHT_SHUTDOWN_GRACE_SECONDS": "5",
    "PREFLIGHT_REQUIRE_AUTH": "true",
}
# The fast options (nas.testing) with a longer trainability probe: about 0.3 s a job on a busy
# 2-core CPU, long enough that a kill finds a worker mid-job, short enough for hundreds of jobs.
JOB_OPTIONS: dict[str, Any] = {**FAST_OPTIONS, "probe_steps": 1000}
FINAL = ("done", "failed", "cancelled")
T = TypeVar("T")

_DONE = re.compile(r"worker \S+: job (\d+) done$")
_ATTEMPT = re.compile(r"worker \S+: job (\d+), attempt \d+/\d+$")
_REAPED = re.compile(r"worker \S+: put (\d+) job\(s\) with expired leases back$")
_DROPPED = re.compile(r"worker \S+: job (\d+) (?:lost its lease; result dropped|cancelled or taken over; dropped)$")


# Processes ---------------------------------------------------------------------------------


@dataclass
class _Process:
    """A service process this run started, with the log it writes."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    handle: IO[bytes]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")


class _Cluster:
    """Starts, kills and restarts the API and the workers; every process it started is ended by
    :meth:`close`, whatever happened."""

    def __init__(self, url: str, logs: Path, skew_seconds: float) -> None:
        self.url = url
        self.logs = logs
        self.skew_seconds = skew_seconds
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.env = {
            **os.environ,
            **QUEUE_SETTINGS,
            "PREFLIGHT_DATABASE_URL": url,
            "OMP_NUM_THREADS": "1",  # each engine on one core: two workers on a 2-core machine
            "PYTHONPATH": path,  # the skew shim imports this module
        }
        self.api: _Process | None = None
        self.workers: dict[str, _Process] = {}
        self.incarnations: collections.Counter[str] = collections.Counter()
        self.started: list[_Process] = []

    def cli(self, *args: str) -> str:
        """Run a short ``preflight`` command to its end; its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "service.cli", *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"preflight {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def _spawn(self, name: str, argv: list[str]) -> _Process:
        log = self.logs / f"{name}.log"
        handle = log.open("ab")
        popen = subprocess.Popen(argv, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        process = _Process(name, popen, log, handle)
        self.started.append(process)
        return process

    def start_api(self, timeout: float = 120.0) -> float:
        """Start ``preflight serve`` and wait until it is ready; seconds it took."""
        started = time.monotonic()
        self.incarnations["api"] += 1
        argv = [sys.executable, "-m", "service.cli", "serve", "--port", str(self.port), "--log-level", "warning"]
        self.api = self._spawn(f"api.{self.incarnations['api']}", argv)
        _wait_for(lambda: _ready(self.base), timeout, "the API to be ready", self.api)
        return time.monotonic() - started

    def start_worker(self, name: str, timeout: float = 180.0) -> float:
        """Start a CPU worker and wait until its engine is warm and it claims; seconds it took."""
        started = time.monotonic()
        process = self.spawn_worker(name)
        _wait_for(lambda: self.worker_started(process), timeout, f"worker {process.name} to start", process)
        return time.monotonic() - started

    def spawn_worker(self, name: str) -> _Process:
        """Start a CPU worker (``w2`` through the clock shim when there is skew), not waiting."""
        self.incarnations[name] += 1
        worker_name = f"{name}.{self.incarnations[name]}"
        args = ["worker", "--device", "cpu", "--name", worker_name, "--log-level", "info"]
        if name == "w2" and self.skew_seconds:
            shim = "import sys; from bench.perf.fault_run import _skewed_cli; sys.exit(_skewed_cli(float(sys.argv[1])))"
            args = [repr(self.skew_seconds), *args]
            argv = [sys.executable, "-c", shim, *args]
        else:
            argv = [sys.executable, "-m", "service.cli", *args]
        process = self._spawn(worker_name, argv)
        self.workers[name] = process
        return process

    @staticmethod
    def worker_started(process: _Process) -> bool:
        return ": started" in process.text()

    def kill(self, process: _Process) -> None:
        """SIGKILL the process itself (a worker's engine child dies with it: PR_SET_PDEATHSIG)."""
        process.popen.send_signal(signal.SIGKILL)
        process.popen.wait(30)

    def worker_logs(self) -> list[str]:
        return [p.text() for p in self.started if p.name.startswith("w")]

    def close(self) -> None:
        """End every process this run started (SIGTERM, then SIGKILL of its process group)."""
        for process in self.started:
            if process.alive():
                process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.started:
            try:
                process.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # its group: an engine child that outlived it, uvicorn's helpers
                os.killpg(process.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if process.popen.poll() is None:
                process.popen.wait(10)
            process.handle.close()


def _skewed_cli(seconds: float) -> int:
    """``preflight`` (its arguments after the offset in sys.argv) with this process's wall clock ``seconds`` ahead:
    ``time.time`` and every ``datetime`` the service's modules imported, as on a host whose clock
    is off. (No setting shifts it; the store's skew tests patch the same.)"""
    import datetime as real
    import importlib
    from datetime import timedelta

    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + int(seconds * 1e9)

    class _Skewed(real.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return real.datetime.now(tz) + timedelta(seconds=seconds)

    for dotted in ("service.store.db", "service.store.jobs", "service.store.data_batches", "worker.jobs.runner"):
        importlib.import_module(dotted)
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("service", "worker", "nas") and getattr(module, "datetime", None) is real.datetime:
            module.datetime = _Skewed  # type: ignore[attr-defined]
    from service.cli import main
    from service.store.db import utcnow

    print(f"fault_run: this worker's clock runs {seconds:+g} s off: utcnow() = {utcnow():%H:%M:%S}", file=sys.stderr)
    return main(sys.argv[2:])


# Waiting -------------------------------------------------------------------------------------


def _wait_for(
    ready: Callable[[], bool], timeout: float, what: str, process: _Process | None = None, every: float = 0.1
) -> float:
    """Poll ``ready`` until it holds; seconds waited. Fails at ``timeout``, or at once when the
    process it waits on died (its log's tail in the message)."""
    started = time.monotonic()
    while not ready():
        if process is not None and not process.alive():
            raise RuntimeError(
                f"{process.name} exited ({process.popen.returncode}) waiting for {what}:\n{_tail(process)}"
            )
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(every)
    return time.monotonic() - started


def _tail(process: _Process, lines: int = 20) -> str:
    return "\n".join(process.text().splitlines()[-lines:])


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


# The database ------------------------------------------------------------------------------


def _scratch_database(postgres_url: str) -> AbstractContextManager[str]:
    """A fresh empty database on the server of ``postgres_url``; dropped at the end (retried while
    a restart of the server is in progress)."""
    admin_url = make_url(postgres_url).set(database="postgres").render_as_string(hide_password=False)
    return scratch_database(admin_url, "preflight_fault", drop_timeout=60.0)


def _retry(work: Callable[[], T], timeout: float) -> T:
    """``work()``, retried while the database is unreachable (a restart in progress)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return work()
        except (OperationalError, InterfaceError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _rows(engine: Engine, sql: str, **params: Any) -> list[Any]:
    def read() -> list[Any]:
        with engine.connect() as connection:
            return list(connection.execute(text(sql), params))

    return _retry(read, 120.0)


def _done_count(engine: Engine) -> int:
    return int(_rows(engine, "SELECT count(*) FROM candidates WHERE status = 'done'")[0][0])


def _done_at_least(engine: Engine, count: int) -> Callable[[], bool]:
    return lambda: _done_count(engine) >= count


def _restart_command() -> list[str]:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions:
        raise RuntimeError("no cluster under /etc/postgresql: pass --db-restarts 0, or --pg-restart-command")
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"]


# The client --------------------------------------------------------------------------------


class _Client:
    """The controller's side: HTTP calls that retry what a client should retry (no connection,
    503), counting every status and transport error it meets on ``/v1``."""

    def __init__(self, base: str, token: str) -> None:
        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        self.origin = time.monotonic()  # the run's start: 5xx are timed from it
        self.statuses: collections.Counter[int] = collections.Counter()
        self.server_errors: list[dict[str, Any]] = []
        self.transport_errors: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def call(self, method: str, path: str, *, expect: int, timeout: float = 300.0, **kwargs: Any) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                with self.lock:
                    self.transport_errors[type(exc).__name__] += 1
                wait = 0.2
            else:
                with self.lock:
                    self.statuses[response.status_code] += 1
                    if response.status_code >= 500:
                        self.server_errors.append(
                            {
                                "at_s": round(time.monotonic() - self.origin, 2),
                                "request": f"{method} {path}",
                                "status": response.status_code,
                                "retry_after": response.headers.get("Retry-After"),
                                "detail": response.text[:200],
                            }
                        )
                if response.status_code == expect:
                    return response.json()
                if response.status_code < 500:
                    raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
                wait = min(float(response.headers.get("Retry-After", "1")), 1.0)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no {expect} within {timeout:g} s")
            time.sleep(wait)

    def close(self) -> None:
        self.http.close()


def _spec(index: int) -> dict[str, Any]:
    """A distinct small MLP per index (width and depth vary), so that no submission is a cache hit."""
    return mlp(1 + index % 3, ("relu", "tanh")[index % 2], 16 + index, inputs=16, name=f"fault-{index}")


class _Submitter(threading.Thread):
    """Submits the candidates one request each, at ``rate`` per second, while faults happen."""

    def __init__(self, client: _Client, count: int, rate: float) -> None:
        super().__init__(name="fault-run-submitter", daemon=True)
        self.client, self.count, self.rate = client, count, rate
        self.ids: dict[int, str] = {}
        self.cached: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            for index in range(self.count):
                time.sleep(max(0.0, started + index / self.rate - time.monotonic()))
                body = {"spec": _spec(index), "options": {**JOB_OPTIONS, "study": STUDY, "trial": index}}
                answer = self.client.call("POST", "/v1/candidates", expect=202, json=body)
                self.ids[index] = str(answer["id"])
                if answer.get("cached"):  # only a retried submission whose first answer was lost
                    self.cached.append(index)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


# Faults ------------------------------------------------------------------------------------


@dataclass
class _Fault:
    kind: str  # kill-worker, restart-api, restart-db
    target: str
    at_fraction: float
    at_done: int = 0
    at_s: float = 0.0  # since the run started
    figures: dict[str, Any] = field(default_factory=dict)


def _plan(kills: int, api_restarts: int, db_restarts: int, first: float = 0.1, last: float = 0.7) -> list[_Fault]:
    """The faults interleaved (kill, API, database, kill, ...) at done shares spread over
    ``first`` to ``last`` of the jobs, so each hits a busy queue."""
    kinds: list[tuple[str, str]] = []
    for round_ in range(max(kills, api_restarts, db_restarts)):
        if round_ < kills:
            kinds.append(("kill-worker", f"w{1 + round_ % 2}"))
        if round_ < api_restarts:
            kinds.append(("restart-api", "api"))
        if round_ < db_restarts:
            kinds.append(("restart-db", "postgresql"))
    step = (last - first) / max(len(kinds) - 1, 1)
    return [_Fault(kind, target, round(first + i * step, 3)) for i, (kind, target) in enumerate(kinds)]


def _kill_worker(cluster: _Cluster, engine: Engine, fault: _Fault, timeout: float) -> None:
    """SIGKILL the worker while it holds a job and restart it at once; time until its job is
    back in the queue (the lease expired and a worker reaped it) and until it is done."""
    process = cluster.workers[fault.target]
    held_by = "SELECT id, attempts FROM candidates WHERE status = 'running' AND worker LIKE :w"
    pattern = f"{process.name}:%"
    _wait_for(
        lambda: bool(_rows(engine, held_by, w=pattern)), timeout, f"{process.name} to hold a job", process, every=0.05
    )
    killed = time.monotonic()
    cluster.kill(process)
    held = _rows(engine, held_by, w=pattern)  # what it held when it died (it may have just finished one)
    successor = cluster.spawn_worker(fault.target)
    times: dict[str, float] = {}

    def recovered() -> bool:
        now = time.monotonic() - killed
        if "restart" not in times and cluster.worker_started(successor):
            times["restart"] = now
        if held:
            status, attempts = _rows(engine, "SELECT status, attempts FROM candidates WHERE id = :i", i=held[0].id)[0]
            if "requeued" not in times and (status != "running" or attempts > held[0].attempts):
                times["requeued"] = now
            if status in FINAL and "done" not in times:
                times["done"] = now
        return "restart" in times and (not held or "done" in times)

    _wait_for(recovered, timeout, f"recovery from the kill of {process.name}", successor, every=0.05)
    fault.figures = {
        "worker": process.name,
        "job": int(held[0].id) if held else None,
        "worker_restart_s": round(times["restart"], 2),
    }
    if held:
        fault.figures["job_back_in_queue_s"] = round(times["requeued"], 2)
        fault.figures["job_done_s"] = round(times["done"], 2)
        fault.figures["job_attempts"] = int(
            _rows(engine, "SELECT attempts FROM candidates WHERE id = :i", i=held[0].id)[0][0]
        )


def _restart_api(cluster: _Cluster, fault: _Fault, timeout: float) -> None:
    """SIGKILL the API (in-flight submissions get no answer; the client retries) and start it
    again on the same port; time until it is ready."""
    assert cluster.api is not None
    old = cluster.api
    killed = time.monotonic()
    cluster.kill(old)
    cluster.start_api(timeout)
    fault.figures = {"api_down_s": round(time.monotonic() - killed, 2)}


def _restart_db(cluster: _Cluster, engine: Engine, fault: _Fault, command: list[str], timeout: float) -> None:
    """Restart the PostgreSQL server; time the restart, the API's readiness after it and the
    first job done after it, and check that every worker outlived it."""
    before = _done_count(engine)
    started = time.monotonic()
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    restart_s = time.monotonic() - started
    api_s = _wait_for(lambda: _ready(cluster.base), timeout, "the API to be ready after the restart") + restart_s
    _wait_for(lambda: _done_count(engine) > before, timeout, "a job done after the restart", every=0.1)
    fault.figures = {
        "restart_command_s": round(restart_s, 2),
        "api_ready_s": round(api_s, 2),
        "first_job_done_s": round(time.monotonic() - started, 2),
        "workers_alive_after": all(p.alive() for p in cluster.workers.values()),
        "api_alive_after": cluster.api is not None and cluster.api.alive(),
    }


# Counting ----------------------------------------------------------------------------------


def _count(engine: Engine, client: _Client, submitter: _Submitter, worker_logs: list[str], jobs: int) -> dict[str, Any]:
    """Every figure, from the three places that can tell: the store, the API and the workers' logs."""
    rows = _rows(
        engine,
        "SELECT o.public_id, c.id, c.spec_hash, c.status, c.attempts, c.report->>'spec_hash' AS report_hash, "
        "(SELECT count(*) FROM candidate_scales s WHERE s.candidate_id = c.id) AS scales "
        "FROM owned_candidates o JOIN candidates c ON c.id = o.candidate_id WHERE o.study = :s",
        s=STUDY,
    )
    by_public = {row.public_id: row for row in rows}
    acked = set(submitter.ids.values())
    statuses = collections.Counter(row.status for row in rows)
    duplicates = int(
        _rows(
            engine, "SELECT count(*) FROM (SELECT spec_hash FROM candidates GROUP BY spec_hash HAVING count(*) > 1) d"
        )[0][0]
    )
    completions: collections.Counter[int] = collections.Counter()
    executions: collections.Counter[int] = collections.Counter()
    dropped = reaped = 0
    for log in worker_logs:
        for line in log.splitlines():
            if match := _DONE.search(line):
                completions[int(match[1])] += 1
            elif match := _ATTEMPT.search(line):
                executions[int(match[1])] += 1
            elif _DROPPED.search(line):
                dropped += 1
            elif match := _REAPED.search(line):
                reaped += int(match[1])
    api = _api_view(client, acked)
    lost = sorted(
        index for index in range(jobs) if index not in submitter.ids or by_public.get(submitter.ids[index]) is None
    )
    lost += sorted(
        index for index, public in submitter.ids.items() if public in by_public and by_public[public].status != "done"
    )
    return {
        "jobs": jobs,
        "acknowledged": len(acked),
        "resubmissions_answered_cached": len(submitter.cached),
        "rows_in_store": len(rows),
        "done": statuses["done"],
        "failed": statuses["failed"],
        "lost": len(lost),
        "lost_trials": lost,
        "completed_more_than_once": sum(1 for n in completions.values() if n > 1),
        "completions_logged": sum(completions.values()),
        "duplicate_rows": duplicates,
        "reports_of_another_spec": sum(1 for row in rows if row.status == "done" and row.report_hash != row.spec_hash),
        "done_without_scales": sum(1 for row in rows if row.status == "done" and not row.scales),
        "re_executed": sum(1 for row in rows if row.attempts > 1),
        "attempts_total": sum(int(row.attempts) for row in rows),
        "executions_logged": sum(executions.values()),
        "results_dropped_by_lease_check": dropped,
        "leases_reaped_logged": reaped,
        "http_statuses": {str(code): n for code, n in sorted(client.statuses.items())},
        "http_5xx": sum(n for code, n in client.statuses.items() if code >= 500),
        "http_5xx_seen": client.server_errors,
        "transport_errors": dict(client.transport_errors),
        "api": api,
    }


def _api_view(client: _Client, acked: set[str]) -> dict[str, Any]:
    """What the API says: the study listed page by page, and each acknowledged candidate read
    by id (done, with a report)."""
    listed: dict[str, dict[str, Any]] = {}
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"study": STUDY, "limit": 100, **({"cursor": cursor} if cursor else {})}
        page = client.call("GET", "/v1/candidates", expect=200, params=params)
        listed.update({c["id"]: c for c in page["candidates"]})
        cursor = page["next_cursor"]
        if not cursor:
            break
    read_done = 0
    for public in sorted(acked):
        one = client.call("GET", f"/v1/candidates/{public}", expect=200)
        read_done += one["status"] == "done" and one["report"] is not None
    return {
        "listed": len(listed),
        "listed_done": sum(1 for c in listed.values() if c["status"] == "done"),
        "listed_attempts_above_one": sum(1 for c in listed.values() if c["attempts"] > 1),
        "acknowledged_missing_from_list": len(acked - set(listed)),
        "read_by_id_done_with_report": read_done,
    }


# The run -----------------------------------------------------------------------------------


def _run(args: argparse.Namespace, url: str, logs: Path) -> dict[str, Any]:
    cluster = _Cluster(url, logs, args.skew_seconds)
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 3})
    client: _Client | None = None
    plan = _plan(args.worker_kills, args.api_restarts, args.db_restarts)
    restart = args.pg_restart_command.split() if args.pg_restart_command else None
    if args.db_restarts and restart is None:
        restart = _restart_command()
    try:
        cluster.cli("db", "upgrade")
        token = cluster.cli("token", "create", "fault-run").strip()
        startup = {"api_s": round(cluster.start_api(), 2)}
        for name in ("w1", "w2"):
            startup[f"{name}_s"] = round(cluster.start_worker(name), 2)
        client = _Client(cluster.base, token)
        submitter = _Submitter(client, args.jobs, args.submit_rate)
        started = client.origin
        submitter.start()
        for fault in plan:
            threshold = max(1, int(fault.at_fraction * args.jobs))
            _wait_for(_done_at_least(engine, threshold), args.timeout, f"{threshold} jobs done", every=0.2)
            fault.at_done, fault.at_s = _done_count(engine), round(time.monotonic() - started, 2)
            print(f"  {fault.at_s:7.1f} s  {fault.at_done:4d} done: {fault.kind} {fault.target}", flush=True)
            if fault.kind == "kill-worker":
                _kill_worker(cluster, engine, fault, args.timeout)
            elif fault.kind == "restart-api":
                _restart_api(cluster, fault, args.timeout)
            else:
                assert restart is not None
                _restart_db(cluster, engine, fault, restart, args.timeout)
            print(f"           recovered: {json.dumps(fault.figures)}", flush=True)
        submitter.join(args.timeout)
        if submitter.error is not None or submitter.is_alive():
            raise RuntimeError(f"the submissions did not finish: {submitter.error!r}")

        def all_final() -> bool:
            counts = _rows(engine, "SELECT status, count(*) FROM candidates GROUP BY status")
            return sum(n for status, n in counts if status in FINAL) >= args.jobs

        _wait_for(all_final, args.timeout, "every job to finish", every=0.5)
        wall = time.monotonic() - started
        figures = _count(engine, client, submitter, cluster.worker_logs(), args.jobs)
        figures["api_tracebacks_logged"] = sum(
            p.text().count("Traceback") for p in cluster.started if p.name.startswith("api")
        )
        figures["wall_s"] = round(wall, 1)
        figures["jobs_per_s"] = round(args.jobs / wall, 2)
        return {"startup": startup, "faults": [asdict(f) for f in plan], "figures": figures}
    finally:
        if client is not None:
            client.close()
        cluster.close()
        engine.dispose()


def _postgres_version(postgres_url: str) -> str:
    admin = create_engine(make_url(postgres_url).set(database="postgres"), poolclass=NullPool)
    try:
        with admin.connect() as connection:
            return str(connection.execute(text("SHOW server_version")).scalar_one())
    finally:
        admin.dispose()


def _guarantees(figures: dict[str, Any], faults: list[dict[str, Any]]) -> dict[str, bool]:
    """Each guarantee and whether the run kept it. A 503 (with Retry-After) while the database is
    down is the API's documented answer (it cannot make a submission durable then), so 5xx are
    split: none other than 503, and every 503 within a database restart (from the restart's start
    until the API was ready again, plus a second)."""
    api = figures["api"]
    outages = [(f["at_s"], f["at_s"] + f["figures"]["api_ready_s"] + 1.0) for f in faults if f["kind"] == "restart-db"]
    errors = figures["http_5xx_seen"]
    return {
        "nothing lost": figures["lost"] == 0 and figures["done"] == figures["jobs"],
        "nothing completed twice": figures["completed_more_than_once"] == 0
        and figures["duplicate_rows"] == 0
        and figures["completions_logged"] == figures["done"],
        "every report its own spec's": figures["reports_of_another_spec"] == 0 and figures["done_without_scales"] == 0,
        "no 5xx but 503": all(e["status"] == 503 for e in errors) and figures["api_tracebacks_logged"] == 0,
        "every 503 during a database restart, with Retry-After": all(
            e["retry_after"] and any(start <= e["at_s"] <= end for start, end in outages) for e in errors
        ),
        "the API agrees": api["listed_done"] == figures["jobs"]
        and api["read_by_id_done_with_report"] == figures["jobs"],
    }


def _print_table(result: dict[str, Any]) -> None:
    f = result["figures"]
    config = result["config"]
    rows = [
        ("jobs (distinct specs)", f["jobs"]),
        (
            "worker SIGKILLs / API restarts / DB restarts",
            f"{config['worker_kills']} / {config['api_restarts']} / {config['db_restarts']}",
        ),
        ("clock skew of worker w2", f"{config['skew_seconds']:+g} s"),
        ("done / failed", f"{f['done']} / {f['failed']}"),
        ("lost", f["lost"]),
        ("completed more than once / duplicate rows", f"{f['completed_more_than_once']} / {f['duplicate_rows']}"),
        ("re-executed (attempts > 1)", f["re_executed"]),
        ("results dropped by the lease check", f["results_dropped_by_lease_check"]),
        ("expired leases reaped", f["leases_reaped_logged"]),
        ("HTTP 5xx seen by the client", f["http_5xx"]),
        ("HTTP statuses", f["http_statuses"]),
        ("transport errors (retried)", f["transport_errors"] or 0),
        ("wall time", f"{f['wall_s']} s ({f['jobs_per_s']} jobs/s)"),
    ]
    for error in f["http_5xx_seen"]:
        rows.append(
            (f"  {error['status']} at {error['at_s']} s", f"{error['request']} (Retry-After {error['retry_after']})")
        )
    for fault in result["faults"]:
        rows.append(
            (f"{fault['kind']} {fault['target']} at {fault['at_done']} done, {fault['at_s']} s", fault["figures"])
        )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    for name, held in result["guarantees"].items():
        print(f"  {'ok' if held else 'FAILED':6s} {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.fault_run", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--worker-kills", type=int, default=2)
    parser.add_argument("--api-restarts", type=int, default=1)
    parser.add_argument("--db-restarts", type=int, default=1, help="restarts of the PostgreSQL server (needs root)")
    parser.add_argument("--skew-seconds", type=float, default=60.0, help="worker w2's clock offset (0: none)")
    parser.add_argument("--submit-rate", type=float, default=2.0, help="submissions per second")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound of every wait, in seconds")
    parser.add_argument("--postgres-url", default=os.environ.get("PREFLIGHT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL))
    parser.add_argument(
        "--pg-restart-command", help="default: pg_ctlcluster --skip-systemctl-redirect VERSION main restart"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where the figures go")
    parser.add_argument("--keep-logs", type=Path, help="copy the processes' logs here")
    args = parser.parse_args(argv)

    config = {
        key: getattr(args, key)
        for key in ("jobs", "worker_kills", "api_restarts", "db_restarts", "skew_seconds", "submit_rate")
    }
    machine = {
        "cpus": os.cpu_count(),
        "gpu": "none (workers on --device cpu)",
        "load_average_start": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "postgresql": _postgres_version(args.postgres_url),
    }
    print(
        f"fault run: {args.jobs} jobs, {args.worker_kills} worker kill(s), {args.api_restarts} API restart(s), "
        f"{args.db_restarts} database restart(s), worker w2's clock {args.skew_seconds:+g} s; "
        f"{machine['cpus']} CPU(s), "
        f"load average {machine['load_average_start']}",
        flush=True,
    )
    logs = Path(tempfile.mkdtemp(prefix="preflight-fault-"))
    try:
        with _scratch_database(args.postgres_url) as url:
            result = _run(args, url, logs)
    except BaseException:
        print(f"fault run failed; the processes' logs are in {logs}", file=sys.stderr)
        raise
    else:
        if args.keep_logs:
            shutil.copytree(logs, args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(logs, ignore_errors=True)
    machine["load_average_end"] = round(os.getloadavg()[0], 2)
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python -m bench.perf.fault_run", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "config": config,
        "queue_settings": QUEUE_SETTINGS,
        **result,
    }
    result["guarantees"] = _guarantees(result["figures"], result["faults"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    _print_table(result)
    return 0 if all(result["guarantees"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

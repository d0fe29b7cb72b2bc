"""Workers with the real engine: the embedded worker, timeouts, cancellation and SIGTERM in
a runner, and worker processes that are many, killed, or outlive a PostgreSQL restart."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from nas.examples import EXAMPLE_MLP
from service.settings import Settings
from service.store import jobs
from service.store.db import make_engine, make_sessionmaker, session_scope
from service.store.models import Candidate, ScaleFactor, Status
from service.testing import live_server, queue_candidates
from worker.jobs.runner import Runner

# Conditioning in a few milliseconds: one tuning step, no diagnostics.
TINY = {"steps": 1, "n_vectors": 1, "batch_size": 8, "diagnostics": False, "hessian_iterations": 0}
# Conditioning for many seconds on a 2-core CPU (big batches through the Hessian figures of
# the example MLP: use with make=heavy_spec).
HEAVY = {
    "batch_size": 4096,
    "n_vectors": 64,
    "steps": 1000,
    "tolerance": 1e-6,
    "hessian_iterations": 200,
    "hessian_batch_size": 4096,
}
# A fraction of a second: a few tuning steps and the diagnostics.
MEDIUM = {"steps": 5, "batch_size": 64}
WORKER_ENV = {
    "PREFLIGHT_LEASE_SECONDS": "3",
    "PREFLIGHT_HEARTBEAT_SECONDS": "0.5",
    "PREFLIGHT_POLL_SECONDS": "0.05",
    "OMP_NUM_THREADS": "1",
}


def spec(width: int) -> dict[str, Any]:
    return {
        "input_shape": [4],
        "blocks": [
            {"layers": [{"type": "linear", "out": width}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 2}]},
        ],
    }


def heavy_spec(width: int) -> dict[str, Any]:
    return {**EXAMPLE_MLP, "blocks": [*EXAMPLE_MLP["blocks"][:-1], {"layers": [{"type": "linear", "out": width}]}]}


def submit_many(
    url: str,
    count: int,
    options: dict[str, Any],
    max_attempts: int = 3,
    make: Callable[[int], dict[str, Any]] = spec,
    owner_id: int = 0,
    engine: str | None = None,
    device: str = "any",
) -> list[int]:
    specs = [make(width) for width in range(1, count + 1)]
    return queue_candidates(
        url, specs, options, owner_id=owner_id, max_attempts=max_attempts, engine=engine, device=device
    )


def tuning(**options: Any) -> dict[str, Any]:
    from service.api.tuning import canonical_tuning_options

    return canonical_tuning_options(options)


def rows(url: str, query: Any) -> list[Any]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(query))
    finally:
        engine.dispose()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def statuses(url: str) -> dict[str, int]:
    return {
        status: count for status, count in rows(url, select(Candidate.status, func.count()).group_by(Candidate.status))
    }


class WorkerProcess:
    """A `preflight worker` in a subprocess, its log in a file."""

    def __init__(self, url: str, log: Path, *args: str) -> None:
        self.log = log
        env = {**os.environ, **WORKER_ENV, "PREFLIGHT_DATABASE_URL": url}
        self.handle = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--device", "cpu", *args],
            env=env,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
        )

    def done_ids(self) -> list[int]:
        return [int(m) for m in re.findall(r"job (\d+) done", self.log.read_text())]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.handle.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []
    # Logs outside pytest's basetemp, which concurrent pytest runs on one machine may prune.
    with tempfile.TemporaryDirectory(prefix="preflight-workers-") as folder:

        def start(url: str, *args: str) -> WorkerProcess:
            process = WorkerProcess(url, Path(folder) / f"worker-{len(started)}.log", *args)
            started.append(process)
            return process

        yield start
        for process in started:
            process.stop()


def run_runner(settings: Settings, **kwargs: Any) -> Runner:
    runner = Runner(settings, device="cpu", **kwargs)
    runner.start_thread()
    return runner


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_serve_with_embedded_worker_conditions_a_candidate(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    with live_server(make_settings(sqlite_url), embedded_worker=True) as url, httpx.Client(base_url=url) as client:
        submitted = client.post(
            "/v1/candidates", json={"spec": EXAMPLE_MLP, "options": {**TINY, "study": "e2e"}}
        ).json()
        done = client.get(f"/v1/candidates/{submitted['id']}/wait", params={"timeout": 60}, timeout=90).json()
    assert done["status"] == "done", done
    report = done["report"]
    assert report["verdict"] in ("keep", "prune") and set(report["scales"]) and report["blocks"][0]["index"] == 0
    assert report["environment"]["device"] == "cpu" and done["worker"].endswith(":cpu")
    scale_rows = rows(sqlite_url, select(ScaleFactor.parameter, ScaleFactor.multiplier))
    assert {name for name, _ in scale_rows} == set(report["scales"])


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_an_embedded_worker_whose_engine_cannot_start_makes_the_server_unready(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """`serve --embedded-worker --device cuda:0` without CUDA: the runner retries the engine with
    backoff instead of dying, /readyz answers 503 naming why, /metrics shows the worker down."""
    from service.embedded import EmbeddedService

    with EmbeddedService(make_settings(sqlite_url), device="cuda:0", poll_seconds=0.05) as service:
        with httpx.Client(base_url=service.url) as client:

            def engine_failure_reported() -> bool:
                answer = client.get("/readyz")
                return answer.status_code == 503 and "the engine cannot start" in answer.json()["detail"]

            wait_until(engine_failure_reported, 120, "/readyz to say why the embedded worker cannot take jobs")
            detail = client.get("/readyz").json()["detail"]
            assert detail.startswith("the embedded worker cannot take jobs") and "CUDA is not available" in detail
            assert "preflight_embedded_worker_live 0.0" in client.get("/metrics").text
            assert client.get("/healthz").status_code == 200


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_a_healthy_embedded_worker_is_ready_and_live(sqlite_url: str, make_settings: Callable[..., Settings]) -> None:
    from service.embedded import EmbeddedService

    with EmbeddedService(make_settings(sqlite_url), device="cpu", poll_seconds=0.05) as service:
        with httpx.Client(base_url=service.url) as client:
            wait_until(lambda: client.get("/readyz").status_code == 200, 120, "/readyz with a working worker")
            assert "preflight_embedded_worker_live 1.0" in client.get("/metrics").text


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_a_worker_touches_its_alive_file_only_while_it_can_take_jobs(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    healthy, broken = tmp_path / "healthy", tmp_path / "broken"
    runner = run_runner(make_settings(sqlite_url, worker_alive_file=str(healthy), heartbeat_seconds=0.2))
    try:
        wait_until(healthy.exists, 120, "the alive file of a working runner")
        first = healthy.stat().st_mtime_ns
        wait_until(lambda: healthy.stat().st_mtime_ns > first, 30, "the alive file to be touched again")
    finally:
        runner.stop(hard=True)
        runner.join(60)
    if not __import__("torch").cuda.is_available():  # an engine that cannot start: no file
        runner = Runner(make_settings(sqlite_url, worker_alive_file=str(broken)), device="cuda:0")
        runner.start_thread()
        try:
            wait_until(lambda: (runner.liveness() or "").startswith("the engine cannot start"), 120, "the failure")
            assert not broken.exists()
        finally:
            runner.stop(hard=True)
            runner.join(60)


def test_an_alive_file_that_cannot_be_written_is_named_once_not_every_heartbeat(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    unwritable = tmp_path / "no-such-folder" / "alive"
    settings = make_settings(sqlite_url, worker_alive_file=str(unwritable), heartbeat_seconds=0.1, lease_seconds=1.0)
    with caplog.at_level("WARNING", logger="worker.jobs.runner"):
        runner = run_runner(settings)
        try:
            wait_until(lambda: runner.liveness() is None and runner.name.endswith(":cpu"), 120, "the runner to start")
            time.sleep(1.0)  # ten heartbeats
        finally:
            runner.stop(hard=True)
            runner.join(60)
    warned = [r for r in caplog.records if "cannot touch" in r.getMessage()]
    assert len(warned) == 1 and "healthcheck" in warned[0].getMessage()


@pytest.mark.slow  # a real worker loop
def test_an_idle_worker_polling_less_often_than_its_lease_stays_live_and_ready(
    sqlite_url: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """A poll of 12 s against a lease of 5 s: the idle loop marked progress once a poll, so
    /readyz flapped to 503 ("no progress") and the alive file went stale while nothing was wrong."""
    alive = tmp_path / "alive"
    settings = make_settings(
        sqlite_url, poll_seconds=12.0, lease_seconds=5.0, heartbeat_seconds=0.2, worker_alive_file=str(alive)
    )
    runner = run_runner(settings)
    try:
        # the name is set when the engine is up, the file at the loop's first progress, just after it
        wait_until(
            lambda: runner.liveness() is None and runner.name.endswith(":cpu") and alive.exists(),
            120,
            "the runner to start and touch its alive file",
        )
        seen, touched, until = set(), set(), time.monotonic() + 14.0  # beyond one poll
        while time.monotonic() < until:
            seen.add(runner.liveness())
            touched.add(alive.stat().st_mtime_ns)
            time.sleep(0.1)
    finally:
        runner.stop(hard=True)
        runner.join(60)
    assert seen == {None}
    assert len(touched) > 2  # touched through the poll, not once a poll


@pytest.mark.slow  # a real engine process
def test_a_worker_stopped_while_its_engine_starts_stops_without_waiting_for_the_engine(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """SIGTERM while the engine child started (minutes on a GPU, up to the 300 s start timeout when
    it hangs) waited for the child to be ready before the worker could stop."""
    runner = run_runner(make_settings(sqlite_url))
    wait_until(lambda: runner.engine._process is not None, 120, "the engine process to be spawned")
    child = runner.engine._process
    runner.stop()
    runner.join(120)
    assert runner._thread is not None and not runner._thread.is_alive()
    assert runner.engine.device is None  # the child was stopped before it said it was ready
    assert not child.is_alive()
    assert runner.done == 0


def _burst_stops(settings: Settings) -> bool:
    """Run a burst worker on the CPU: whether it stopped by itself (within a generous bound)."""
    runner = Runner(settings, device="cpu", burst=True, name="burst")
    runner.start_thread()
    runner.join(180)
    stuck = runner._thread is not None and runner._thread.is_alive()
    if stuck:
        runner.stop(hard=True)
        runner.join(60)
    return not stuck


@pytest.mark.slow  # a real worker loop
def test_a_burst_worker_does_its_engines_jobs_and_stops_leaving_another_revisions_queued(
    sqlite_url: str, make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    """A job keyed by another engine revision (a service of another release queued it) is not
    this worker's to compute: a burst worker does its own jobs, names the others in a warning
    and stops instead of waiting on them forever."""
    mine = submit_many(sqlite_url, 2, tuning(**TINY))
    older = submit_many(sqlite_url, 1, tuning(**TINY), engine="0123456789abcdef")
    with caplog.at_level("WARNING", logger="worker.jobs.runner"):
        assert _burst_stops(make_settings(sqlite_url)), "the burst worker waited on a job it cannot claim"
    final = dict(rows(sqlite_url, select(Candidate.id, Candidate.status)))
    assert [final[i] for i in mine] == ["done", "done"] and final[older[0]] == "queued"
    assert any("1 queued job(s) were keyed by another engine revision" in r.getMessage() for r in caplog.records)


def test_a_burst_worker_on_a_cpu_stops_while_a_job_for_a_gpu_waits(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """The backlog counted a job queued for ``cuda`` as claimable by a CPU worker, which can never
    claim it: a burst worker waited on it forever."""
    mine = submit_many(sqlite_url, 1, tuning(**TINY))
    (gpu,) = submit_many(sqlite_url, 1, tuning(**TINY), make=lambda width: spec(width + 1), device="cuda")
    assert _burst_stops(make_settings(sqlite_url)), "the burst worker waited on a job only a GPU worker can claim"
    final = dict(rows(sqlite_url, select(Candidate.id, Candidate.status)))
    assert final[mine[0]] == "done" and final[gpu] == "queued"


@pytest.mark.slow  # a real worker loop
def test_a_long_running_worker_names_another_revisions_queued_jobs_once_per_change(
    sqlite_url: str,
    make_settings: Callable[..., Settings],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker that is not a burst worker waits for work rather than stopping, so jobs that
    only a worker of another release can take would wait unseen: it names them in a warning,
    once per change of their number, not once per poll, and leaves them queued."""
    from worker.jobs import runner as runner_module

    monkeypatch.setattr(runner_module, "_BACKLOG_SECONDS", 0.0)  # look at every poll: the test's many
    older = submit_many(sqlite_url, 1, tuning(**TINY), engine="0123456789abcdef")

    def warnings(count: int) -> list[str]:
        expected = f"{count} queued job(s) were keyed by another engine revision"
        return [r.getMessage() for r in caplog.records if expected in r.getMessage()]

    with caplog.at_level("WARNING", logger="worker.jobs.runner"):
        runner = run_runner(make_settings(sqlite_url, poll_seconds=0.05), name="long")
        try:
            wait_until(lambda: bool(warnings(1)), 180, "the warning about the other revision's job")
            polls = runner._last_backlog
            wait_until(lambda: runner._last_backlog > polls + 0.5, 60, "the idle loop to poll on")
            more = submit_many(sqlite_url, 1, tuning(**TINY), make=lambda w: spec(w + 10), engine="0123456789abcdef")
            wait_until(lambda: bool(warnings(2)), 60, "the warning about both jobs")
        finally:
            runner.stop(hard=True)
            runner.join(60)
    assert len(warnings(1)) == 1 and len(warnings(2)) == 1
    final = dict(rows(sqlite_url, select(Candidate.id, Candidate.status)))
    assert final[older[0]] == final[more[0]] == "queued"


BIG_ACTIVATIONS = {  # 3 M activations per sample: 12 GB at batch 1024, far over a 2 GiB limit
    "input_shape": [4, 512, 512],
    "blocks": [{"layers": [{"type": "conv2d", "out": 4, "kernel": 3}, {"type": "relu"}, {"type": "global_avgpool"}]}],
}


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_a_job_over_the_engine_memory_limit_fails_at_once_and_the_worker_carries_on(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """Submitted past the API's limits (straight into the queue), a job whose batch needs 12 GB
    meets the engine child's 2 GiB address-space limit: an out-of-memory, failed on its first
    attempt with what to change, and the next job is done by the same worker."""
    (poison,) = submit_many(sqlite_url, 1, tuning(batch_size=1024), make=lambda _w: BIG_ACTIVATIONS)
    (fine,) = submit_many(sqlite_url, 1, tuning(**TINY))
    runner = run_runner(make_settings(sqlite_url, engine_memory_bytes=2 * 2**30))
    try:
        wait_until(lambda: status_of(sqlite_url, fine) == "done", 300, "the next job")
    finally:
        runner.stop(hard=True)
        runner.join(60)
    ((status, attempts, error),) = rows(
        sqlite_url, select(Candidate.status, Candidate.attempts, Candidate.error).where(Candidate.id == poison)
    )
    assert str(status) == "failed" and attempts == 1, (status, attempts, error)
    assert "out of memory" in error and "smaller batch_size" in error


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_runner_fails_a_job_past_its_timeout_and_carries_on(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    (slow,) = submit_many(sqlite_url, 1, tuning(**HEAVY), max_attempts=2, make=heavy_spec)
    fast = submit_many(sqlite_url, 2, tuning(**TINY))
    runner = run_runner(make_settings(sqlite_url, job_timeout_seconds=5.0))
    try:
        wait_until(lambda: statuses(sqlite_url).get("done", 0) == 2, 120, "the fast jobs")
        wait_until(lambda: statuses(sqlite_url).get("failed", 0) == 1, 60, "the slow job to time out twice")
    finally:
        runner.stop(hard=True)
        runner.join(60)
    ((error, attempts),) = rows(sqlite_url, select(Candidate.error, Candidate.attempts).where(Candidate.id == slow))
    assert "timed out after 5 s" in error and attempts == 2
    assert [row[0] for row in rows(sqlite_url, select(Candidate.status).where(Candidate.id.in_(fast)))] == ["done"] * 2


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_four_poison_jobs_hold_another_owners_candidate_up_by_one_timeout_at_most(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """The issue's four poison jobs (each runs to its timeout, then once more) on two workers:
    another owner's candidate, queued while both workers are stuck, is taken by the first
    worker to come free, before the two poison jobs still waiting and before any retry the
    other worker has not yet taken, so it waits one job timeout at most. Without fair share
    it would wait for all eight poison attempts (four timeouts of two workers)."""
    poison = submit_many(sqlite_url, 4, tuning(**HEAVY), max_attempts=2, make=heavy_spec, owner_id=1)
    settings = make_settings(sqlite_url, job_timeout_seconds=4.0)
    runners = [run_runner(settings, name=f"worker-{n}") for n in range(2)]
    try:
        wait_until(lambda: statuses(sqlite_url).get("running", 0) == 2, 120, "both workers to take a poison job")
        (normal,) = submit_many(sqlite_url, 1, tuning(**TINY), owner_id=2)
        wait_until(lambda: status_of(sqlite_url, normal) == "done", 120, "the other owner's candidate")
    finally:
        for runner in runners:
            runner.stop(hard=True)
        for runner in runners:
            runner.join(60)
    started = dict(rows(sqlite_url, select(Candidate.id, Candidate.started_at)))
    waiting = sorted(poison, key=lambda job: (started[job] is None, started[job]))[2:]  # behind the first two
    assert all(started[job] is None or started[job] > started[normal] for job in waiting), started


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_a_dead_workers_job_is_reaped_while_every_worker_is_busy(
    sqlite_url: str, make_settings: Callable[..., Settings]
) -> None:
    """A job leased by a worker that died (its lease just left to expire) comes back to the queue
    within about a lease and a heartbeat although the only live worker is busy on a long job: the
    busy worker reaps from its heartbeat, not only when it goes idle."""
    (long_job,) = submit_many(sqlite_url, 1, tuning(**HEAVY), make=heavy_spec)
    settings = make_settings(sqlite_url, lease_seconds=3.0, heartbeat_seconds=0.5, job_timeout_seconds=300.0)
    runner = run_runner(settings)
    try:
        wait_until(lambda: status_of(sqlite_url, long_job) == "running", 120, "the live worker to take the long job")
        (orphan,) = submit_many(sqlite_url, 1, tuning(**TINY), make=lambda w: spec(w + 100))
        engine = make_engine(sqlite_url)
        with session_scope(make_sessionmaker(engine), write=True) as session:
            ghost = jobs.claim(session, worker="ghost", device_kind="cpu", lease_seconds=2.0)  # then it "dies"
        engine.dispose()
        assert ghost is not None and ghost.id == orphan
        wait_until(lambda: status_of(sqlite_url, orphan) != "running", 60, "the orphaned lease to be reaped")
        assert status_of(sqlite_url, long_job) == "running"  # reaped while the only worker was busy
    finally:
        runner.stop(hard=True)
        runner.join(60)


def status_of(url: str, job_id: int) -> str:
    ((status,),) = rows(url, select(Candidate.status).where(Candidate.id == job_id))
    return str(status)


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_cancelling_a_running_job_stops_its_worker(sqlite_url: str, make_settings: Callable[..., Settings]) -> None:
    (job_id,) = submit_many(sqlite_url, 1, tuning(**HEAVY), make=heavy_spec)
    runner = run_runner(make_settings(sqlite_url))
    try:
        wait_until(lambda: statuses(sqlite_url).get("running", 0) == 1, 60, "the job to start")
        engine = make_engine(sqlite_url)
        with session_scope(make_sessionmaker(engine), write=True) as session:
            assert jobs.cancel(session, job_id=job_id) == Status.CANCELLED
        engine.dispose()
        submit_many(sqlite_url, 3, tuning(**TINY))
        wait_until(lambda: statuses(sqlite_url).get("done", 0) == 3, 120, "the next jobs")
    finally:
        runner.stop(hard=True)
        runner.join(60)
    assert statuses(sqlite_url)["cancelled"] == 1


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_sigterm_releases_a_job_that_outlasts_the_grace_period(
    sqlite_url: str, spawn: Callable[..., WorkerProcess]
) -> None:
    (job_id,) = submit_many(sqlite_url, 1, tuning(**HEAVY), make=heavy_spec)
    os.environ["PREFLIGHT_SHUTDOWN_GRACE_SECONDS"] = "1"
    try:
        worker = spawn(sqlite_url)
    finally:
        del os.environ["PREFLIGHT_SHUTDOWN_GRACE_SECONDS"]
    wait_until(lambda: statuses(sqlite_url).get("running", 0) == 1, 60, "the job to start")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(60) == 0
    ((status, attempts),) = rows(sqlite_url, select(Candidate.status, Candidate.attempts).where(Candidate.id == job_id))
    assert (status, attempts) == ("queued", 0)
    assert "released (shutting down)" in worker.log.read_text()


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_sigterm_lets_a_short_job_finish(sqlite_url: str, spawn: Callable[..., WorkerProcess]) -> None:
    submit_many(sqlite_url, 40, tuning(**TINY))
    worker = spawn(sqlite_url)
    wait_until(lambda: statuses(sqlite_url).get("done", 0) >= 1, 60, "the first job")
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(60) == 0
    counts = statuses(sqlite_url)
    assert counts.get("running", 0) == 0 and counts["done"] == len(worker.done_ids())


@pytest.mark.postgres
@pytest.mark.slow
def test_four_worker_processes_do_two_hundred_jobs_exactly_once(
    pg_url: str, spawn: Callable[..., WorkerProcess]
) -> None:
    ids = submit_many(pg_url, 200, tuning(**TINY))
    workers = [spawn(pg_url, "--burst", "--name", f"w{i}") for i in range(4)]
    for worker in workers:
        assert worker.process.wait(240) == 0, worker.log.read_text()[-2000:]
    done = [job for worker in workers for job in worker.done_ids()]
    assert sorted(done) == sorted(ids), "each job reported done by exactly one worker"
    assert sum(1 for worker in workers if worker.done_ids()) >= 2, "the work was shared"
    assert rows(pg_url, select(Candidate.status, Candidate.attempts).distinct()) == [("done", 1)]
    (scale_rows,) = rows(pg_url, text("SELECT count(DISTINCT candidate_id) FROM candidate_scales"))
    assert scale_rows[0] == 200


@pytest.mark.slow
def test_a_job_whose_worker_is_killed_is_leased_again_and_completes(
    db_url: str, spawn: Callable[..., WorkerProcess]
) -> None:
    # jobs of a few seconds (a long trainability probe), so that the victim is still inside
    # its job when the kill lands just after the check: with sub-second jobs it sometimes had
    # finished it in between
    ids = submit_many(db_url, 6, tuning(**MEDIUM, probe_steps=1000))
    victim = spawn(db_url, "--name", "victim")
    running = select(Candidate.id).where(Candidate.status == "running", Candidate.worker.like("victim%"))
    wait_until(lambda: statuses(db_url).get("done", 0) >= 2 and bool(rows(db_url, running)), 90, "the victim mid-job")
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    orphans = [row[0] for row in rows(db_url, running)]
    assert orphans, "the victim held a job when it was killed"
    survivor = spawn(db_url, "--burst", "--name", "survivor")
    assert survivor.process.wait(180) == 0, survivor.log.read_text()[-2000:]
    final = dict(rows(db_url, select(Candidate.id, Candidate.status)))
    assert all(final[i] == "done" for i in ids)
    (attempts,) = rows(db_url, select(Candidate.attempts).where(Candidate.id == orphans[0]))
    assert attempts[0] == 2 and orphans[0] in survivor.done_ids()


def _restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.skipif(not Path("/etc/postgresql").is_dir() or os.geteuid() != 0, reason="needs a local cluster and root")
def test_workers_and_api_survive_a_postgres_restart(
    pg_url: str, spawn: Callable[..., WorkerProcess], make_settings: Callable[..., Settings]
) -> None:
    ids = submit_many(pg_url, 120, tuning(**TINY))
    workers = [spawn(pg_url, "--name", f"w{i}") for i in range(2)]
    with live_server(make_settings(pg_url)) as url, httpx.Client(base_url=url, timeout=30) as client:
        wait_until(lambda: statuses(pg_url).get("done", 0) >= 10, 120, "the first jobs")
        restart = threading.Thread(target=_restart_postgres)
        restart.start()
        restart.join(130)
        late: list[int] = []
        deadline = time.monotonic() + 60
        while len(late) < 5 and time.monotonic() < deadline:  # the API reconnects by itself
            response = client.post("/v1/candidates", json={"spec": spec(1000 + len(late)), "options": TINY})
            if response.status_code == 202:
                late.append(response.json()["id"])
            else:
                assert response.status_code == 503, response.text  # retryable, never a 500
                time.sleep(0.5)
        assert len(late) == 5, "the API accepts submissions again after the restart"
        wait_until(lambda: statuses(pg_url).get("done", 0) == len(ids) + 5, 240, "every job after the restart")
        assert client.get("/readyz").status_code == 200
        listed = client.get("/v1/candidates", params={"status": "done", "limit": 1000}).json()["candidates"]
        assert len(listed) == len(ids) + 5
    for worker in workers:
        assert worker.process.poll() is None, "workers stay up through the restart"
    assert rows(pg_url, select(func.max(Candidate.attempts)))[0][0] <= 2


def _supervisor(
    sqlite_url: str, log_name: str, *args: str, grace: str = "30", start_new_session: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    """``preflight worker --devices all`` in a subprocess, its log in a file beside the database."""
    log = Path(sqlite_url.removeprefix("sqlite:///")).with_name(log_name)
    env = {**os.environ, **WORKER_ENV, "PREFLIGHT_DATABASE_URL": sqlite_url, "PREFLIGHT_SHUTDOWN_GRACE_SECONDS": grace}
    with log.open("w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--devices", "all", *args],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=start_new_session,
        )
    return process, log


@pytest.mark.slow
def test_supervisor_restarts_a_dead_child_and_stops_on_sigterm(sqlite_url: str) -> None:
    process, log = _supervisor(sqlite_url, "supervisor.log")
    try:
        child = re.compile(r"started worker pid (\d+) on cpu")
        wait_until(lambda: len(child.findall(log.read_text())) == 1, 120, "the CPU child (no GPU here)")
        first = int(child.findall(log.read_text())[0])
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: len(child.findall(log.read_text())) == 2, 60, "the restarted child")
        submit_many(sqlite_url, 3, tuning(**TINY))
        wait_until(lambda: statuses(sqlite_url).get("done", 0) == 3, 120, "the restarted child's jobs")
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "exited with -9; restarting" in log.read_text()


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, which nothing may reap in a container, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_a_signal_to_the_supervisors_process_group_reaches_each_runner_once(sqlite_url: str) -> None:
    """A Ctrl-C (or systemd's SIGTERM to the control group) reached the runner child directly and
    again through the supervisor, and the second signal dropped the running job at once."""
    submit_many(sqlite_url, 1, tuning(**HEAVY), make=heavy_spec)
    process, log = _supervisor(
        sqlite_url,
        "group.log",
        "--name",
        "box",
        grace="2",
        start_new_session=True,  # its own process group, as a terminal or a service manager gives it
    )
    try:
        wait_until(lambda: statuses(sqlite_url).get("running", 0) == 1, 120, "the job to start")
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(120) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    text_ = log.read_text()
    assert "worker box:cpu: started" in text_, "the supervisor's children take its --name"
    assert len(re.findall(r"worker \S+: signal 15", text_)) == 1, text_
    assert "releasing the job" not in text_


@pytest.mark.slow
def test_a_killed_supervisor_leaves_no_runner_behind(sqlite_url: str) -> None:
    """SIGKILL on the supervisor (an OOM kill, a restart by a service manager) left its runner
    computing and claiming jobs, beside the runner a restarted supervisor starts."""
    process, log = _supervisor(sqlite_url, "orphan.log")
    child = re.compile(r"started worker pid (\d+) on cpu")
    try:
        wait_until(lambda: len(child.findall(log.read_text())) == 1, 120, "the CPU child")
        runner = int(child.findall(log.read_text())[0])
        process.kill()
        process.wait()
        wait_until(lambda: not _running(runner), 60, "the runner to stop with its supervisor")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_script_that_starts_the_embedded_service_unguarded_is_told_why_its_engine_never_starts(
    tmp_path: Path,
) -> None:
    """The engine's child process (spawn) imports the main script again: unguarded, it started a
    second service there, its engine never came up, and the candidate sat queued with no word until
    the client's timeout. The child now stops at the import, saying what to do."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from service.embedded import EmbeddedService\n"
        "from nas.client import PreflightClient\n"
        "from nas.testing import FAST_OPTIONS, well_conditioned_mlp\n"
        f"with EmbeddedService('sqlite:///{tmp_path / 'p.db'}', device='cpu') as service:\n"
        "    PreflightClient(service.url).condition(well_conditioned_mlp(), FAST_OPTIONS, timeout=600)\n"
    )
    process = subprocess.Popen(
        [sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr or []), daemon=True)
    reader.start()
    told = False
    try:
        deadline = time.monotonic() + 300  # readiness, not speed: the first start of the engine's child
        while not told and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            told = any('start it under `if __name__ == "__main__":`' in line for line in list(lines))
    finally:
        process.kill()
        process.wait()
        reader.join(timeout=30)  # the pipe's end, once the script and its children are gone
        if process.stderr is not None:
            process.stderr.close()  # left open, it was an unclosed-file warning in a later test
    assert told, "".join(lines)[-2000:]

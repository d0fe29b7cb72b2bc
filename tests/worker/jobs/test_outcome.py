"""How a job's attempt ends (Outcome) and whether it is retried (RetryPolicy): the rules of
the queue as a table, and the runner recording each outcome in a real (SQLite) store."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from nas.testing import sample_report
from service.settings import Settings
from service.store import jobs
from service.store.db import make_engine, make_sessionmaker, session_scope
from service.store.migrations import upgrade
from service.store.models import Candidate
from worker.jobs import outcome as outcome_module
from worker.jobs.engine_process import EngineCrashed, EngineError, engine_error
from worker.jobs.outcome import FAILURES, Outcome, RetryPolicy
from worker.jobs.runner import Runner

# (outcome, the attempt that failed (1 = the first), the job's max_attempts) -> queued again?
# Today's rules: an engine error a retry may fix and a crash are retried while attempts remain
# (attempt < max_attempts), a timeout once at most; a deterministic error (ValueError, TypeError,
# KeyError, an out-of-memory, a data batch that is gone) fails the job at once.
RETRY_TABLE: list[tuple[Outcome, int, int, bool]] = [
    (Outcome.ERROR, 1, 3, True),
    (Outcome.ERROR, 2, 3, True),
    (Outcome.ERROR, 3, 3, False),
    (Outcome.ERROR, 1, 1, False),
    (Outcome.TIMEOUT, 1, 2, True),
    (Outcome.TIMEOUT, 2, 2, False),
    (Outcome.TIMEOUT, 1, 1, False),
    # a timeout is retried once at most, whatever max_attempts allows
    (Outcome.TIMEOUT, 1, 3, True),
    (Outcome.TIMEOUT, 2, 3, False),
    (Outcome.CRASHED, 1, 3, True),
    (Outcome.CRASHED, 2, 3, True),
    (Outcome.CRASHED, 3, 3, False),
    # past the limit (the store counts attempts >= max_attempts as used up)
    (Outcome.CRASHED, 4, 3, False),
    (Outcome.DETERMINISTIC_ERROR, 1, 3, False),
    (Outcome.DETERMINISTIC_ERROR, 2, 3, False),
    (Outcome.DETERMINISTIC_ERROR, 3, 3, False),
    (Outcome.DETERMINISTIC_ERROR, 1, 1, False),
]


def _id(row: tuple[Outcome, int, int, bool]) -> str:
    outcome, attempt, max_attempts, retry = row
    return f"{outcome.value}-{attempt}of{max_attempts}-{'retry' if retry else 'fail'}"


@pytest.mark.parametrize(("outcome", "attempt", "max_attempts", "retry"), RETRY_TABLE, ids=map(_id, RETRY_TABLE))
def test_the_default_policy_reproduces_the_queues_rules(
    outcome: Outcome, attempt: int, max_attempts: int, retry: bool
) -> None:
    assert RetryPolicy().retries(outcome, attempt, max_attempts) is retry


def test_the_table_covers_every_failure() -> None:
    assert {row[0] for row in RETRY_TABLE} == FAILURES


@pytest.mark.parametrize("outcome", [Outcome.DONE, Outcome.RELEASED, Outcome.LOST])
def test_only_failures_are_asked_about(outcome: Outcome) -> None:
    assert not outcome.is_failure
    with pytest.raises(ValueError, match="not a failure"):
        RetryPolicy().retries(outcome, 1, 3)


def test_the_failures() -> None:
    assert FAILURES == {
        Outcome.ERROR,
        Outcome.DETERMINISTIC_ERROR,
        Outcome.TIMEOUT,
        Outcome.CRASHED,
    }
    assert all(outcome.is_failure for outcome in FAILURES)


def test_the_policy_is_immutable_and_retries_only_failures() -> None:
    policy = RetryPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.retried = frozenset()  # type: ignore[misc]
    with pytest.raises(ValueError, match="only failures"):
        RetryPolicy(retried=frozenset({Outcome.DONE}))
    never = RetryPolicy(retried=frozenset())
    assert not any(never.retries(outcome, 1, 3) for outcome in FAILURES)
    assert RetryPolicy() == RetryPolicy() and hash(RetryPolicy()) == hash(RetryPolicy())


def test_the_outcomes_keep_their_names_in_logs() -> None:
    assert [o.value for o in Outcome] == [
        "done",
        "error",
        "deterministic_error",
        "timeout",
        "crashed",
        "released",
        "lost",
    ]
    assert f"{Outcome.TIMEOUT}" == "timeout" and Outcome("crashed") is Outcome.CRASHED


def test_every_outcome_is_documented() -> None:
    """Each member has its ``#:`` comment (the style Sphinx's autodoc reads)."""
    lines = inspect.getsource(outcome_module).splitlines()
    (enum,) = [
        node for node in ast.parse("\n".join(lines)).body if isinstance(node, ast.ClassDef) and node.name == "Outcome"
    ]
    documented = {
        node.targets[0].id  # type: ignore[attr-defined]
        for node in enum.body
        if isinstance(node, ast.Assign) and lines[node.lineno - 2].strip().startswith("#:")
    }
    assert documented == {o.name for o in Outcome}


def test_an_engine_error_names_its_outcome() -> None:
    assert EngineError("RuntimeError", "cuDNN error", False).outcome is Outcome.ERROR
    assert EngineError("ValueError", "bad spec", True).outcome is Outcome.DETERMINISTIC_ERROR


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: 17179869184 bytes"
        ),
        RuntimeError("CUDA out of memory. Tried to allocate 16.00 GiB"),
        RuntimeError("std::bad_alloc"),
    ],
    ids=["memory-error", "cpu-allocator", "cuda", "bad-alloc-under-a-memory-limit"],
)
def test_an_out_of_memory_fails_the_job_at_once_saying_what_to_change(exc: BaseException) -> None:
    error = engine_error(exc)
    assert error.outcome is Outcome.DETERMINISTIC_ERROR
    assert "out of memory" in error.message and "smaller batch_size" in error.message


def test_other_runtime_errors_stay_retryable() -> None:
    assert engine_error(RuntimeError("NCCL timeout")).outcome is Outcome.ERROR
    assert engine_error(ValueError("bad")).outcome is Outcome.DETERMINISTIC_ERROR


# The runner records each outcome in a real store -------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    url = f"sqlite:///{tmp_path / 'preflight.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield Settings(database_url=url, job_timeout_seconds=5.0), make_sessionmaker(engine)
    engine.dispose()


def _job_at_attempt(sessions: sessionmaker[Session], attempt: int, max_attempts: int) -> jobs.Job:
    """A job claimed for its ``attempt``-th time."""
    new = jobs.NewCandidate(spec={"input_shape": [4]}, spec_hash="f" * 64, options={})
    with session_scope(sessions, write=True) as session:
        (enqueued,) = jobs.submit(session, candidates=[new], max_attempts=max_attempts)
        session.execute(update(Candidate).where(Candidate.id == enqueued.id).values(attempts=attempt - 1))
    with session_scope(sessions, write=True) as session:
        job = jobs.claim(session, worker="test", device_kind="cpu", lease_seconds=60)
    assert job is not None and job.attempts == attempt
    return job


def _row(sessions: sessionmaker[Session], job: jobs.Job) -> tuple[str, int, str | None]:
    with session_scope(sessions) as session:
        row = session.execute(
            select(Candidate.status, Candidate.attempts, Candidate.error).where(Candidate.id == job.id)
        ).one()
    return row.status, row.attempts, row.error


def _value(outcome: Outcome) -> Any:
    """What the job loop hands ``_record`` with each failure."""
    return {
        Outcome.ERROR: EngineError("RuntimeError", "CUDA out of memory", False),
        Outcome.DETERMINISTIC_ERROR: EngineError("ValueError", "bad spec", True),
        Outcome.TIMEOUT: None,
        Outcome.CRASHED: EngineCrashed("the engine process died (exit code -9)"),
    }[outcome]


@pytest.mark.parametrize(("outcome", "attempt", "max_attempts", "retry"), RETRY_TABLE, ids=map(_id, RETRY_TABLE))
def test_the_runner_queues_or_fails_a_failed_job_as_the_table_says(
    store: tuple[Settings, sessionmaker[Session]],
    outcome: Outcome,
    attempt: int,
    max_attempts: int,
    retry: bool,
) -> None:
    settings, sessions = store
    runner = Runner(settings, device="cpu", sessions=sessions, name="test")
    job = _job_at_attempt(sessions, attempt, max_attempts)
    runner._record(job, outcome, _value(outcome))
    status, attempts, error = _row(sessions, job)
    assert (status, attempts) == ("queued" if retry else "failed", attempt)
    assert (
        error
        == {
            Outcome.ERROR: "RuntimeError: CUDA out of memory",
            Outcome.DETERMINISTIC_ERROR: "ValueError: bad spec",
            Outcome.TIMEOUT: "timed out after 5 s (setting PREFLIGHT_JOB_TIMEOUT_SECONDS)",
            Outcome.CRASHED: "EngineCrashed: the engine process died (exit code -9)",
        }[outcome]
    )
    assert runner.done == 1


@pytest.mark.parametrize(("outcome", "attempt", "max_attempts", "retry"), RETRY_TABLE, ids=map(_id, RETRY_TABLE))
def test_the_store_ends_where_the_table_says(
    store: tuple[Settings, sessionmaker[Session]],
    outcome: Outcome,
    attempt: int,
    max_attempts: int,
    retry: bool,
) -> None:
    """``jobs.fail`` with the policy's decision leaves the job queued or failed as the table says
    (the store also checks the attempt limit itself, in the same statement)."""
    _, sessions = store
    job = _job_at_attempt(sessions, attempt, max_attempts)
    with session_scope(sessions, write=True) as session:
        status = jobs.fail(
            session,
            job_id=job.id,
            token=job.lease_token,
            error="x",
            retry=RetryPolicy().retries(outcome, attempt, max_attempts),
        )
    assert status == ("queued" if retry else "failed")


def test_the_runner_records_the_other_outcomes(
    store: tuple[Settings, sessionmaker[Session]],
) -> None:
    settings, sessions = store
    runner = Runner(settings, device="cpu", sessions=sessions, name="test")

    job = _job_at_attempt(sessions, 1, 3)
    runner._record(job, Outcome.RELEASED, None)  # given back; the attempt not counted
    assert _row(sessions, job) == ("queued", 0, None) and runner.done == 0

    job = _job_at_attempt(sessions, 1, 3)
    runner._record(job, Outcome.LOST, None)  # nothing written: the job is someone else's
    assert _row(sessions, job) == ("running", 1, None) and runner.done == 0

    runner._record(job, Outcome.DONE, sample_report())
    assert _row(sessions, job) == ("done", 1, None) and runner.done == 1


def test_a_runner_takes_another_policy(store: tuple[Settings, sessionmaker[Session]]) -> None:
    settings, sessions = store
    runner = Runner(
        settings,
        device="cpu",
        sessions=sessions,
        name="test",
        retry_policy=RetryPolicy(frozenset()),
    )
    job = _job_at_attempt(sessions, 1, 3)
    runner._record(job, Outcome.CRASHED, _value(Outcome.CRASHED))
    assert _row(sessions, job)[0] == "failed"


def test_the_default_memory_limit_is_for_the_cpu_only() -> None:
    from worker.jobs.engine_process import memory_limit

    assert memory_limit(None, "cuda:0") is None  # the host's memory says nothing about the device's
    assert memory_limit(0, "cpu") is None
    assert memory_limit(2**31, "cuda:0") == 2**31
    default = memory_limit(None, "cpu")
    assert default is not None and default > 2**30

"""The SQL queue on SQLite and PostgreSQL: submit, claim, heartbeat, complete, fail, release,
reap and cancel, called directly (the workers' tests run it through processes)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from nas import parse_spec, spec_hash
from nas.report import ConditioningReport
from service.revision import engine_revision
from service.store import jobs, reports
from service.store.db import session_scope, utcnow
from service.store.models import (
    BlockFigure,
    Candidate,
    LayerFigure,
    OwnedCandidate,
    ScaleFactor,
    Status,
    Submission,
)
from service.store.owners import Caller


def spec(width: int) -> dict[str, Any]:
    return {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": width}]}]}


def new(width: int, **kwargs: Any) -> jobs.NewCandidate:
    parsed = parse_spec(spec(width))
    return jobs.NewCandidate(
        spec=parsed.model_dump(mode="json", exclude_none=True),
        spec_hash=spec_hash(parsed),
        options=kwargs.pop("options", {"steps": 1}),
        **kwargs,
    )


def submit(sessions: Any, *candidates: jobs.NewCandidate, max_attempts: int = 3) -> list[jobs.Enqueued]:
    with session_scope(sessions, write=True) as session:
        return jobs.submit(session, candidates=list(candidates), max_attempts=max_attempts)


def claim(sessions: Any, device_kind: str = "cpu", lease: float = 30.0) -> jobs.Job | None:
    with session_scope(sessions, write=True) as session:
        return jobs.claim(session, worker="w", device_kind=device_kind, lease_seconds=lease)


def claimed_id(sessions: Any) -> int:
    """The id of the job ``claim`` takes (there must be one)."""
    job = claim(sessions)
    assert job is not None
    return job.id


def status_of(sessions: Any, job_id: int) -> Status:
    with session_scope(sessions) as session:
        status = session.scalar(select(Candidate.status).where(Candidate.id == job_id))
        assert status is not None
        return Status(status)


def test_same_spec_and_options_is_one_candidate_and_two_submissions(sessions: Any) -> None:
    first, again, other_options = submit(
        sessions, new(8, study="a", trial=1), new(8, study="b", trial=2), new(8, options={"steps": 2})
    )
    assert first.created and not again.created and other_options.created
    assert again.id == first.id and other_options.id != first.id
    with session_scope(sessions) as session:
        assert session.scalar(select(func.count()).select_from(Submission)) == 3


def test_claim_takes_highest_priority_then_oldest(sessions: Any) -> None:
    low, high, high_later = submit(sessions, new(1), new(2, priority=5), new(3, priority=5))
    assert [claimed_id(sessions), claimed_id(sessions), claimed_id(sessions)] == [high.id, high_later.id, low.id]
    assert claim(sessions) is None


def test_a_shared_job_queued_in_one_call_runs_at_its_owners_highest_priority(sessions: Any) -> None:
    """A group commit submits several owners' requests in one call: the new job took the first's
    priority, so owner 2's -9 held back owner 1's 4."""
    low, high = submit(sessions, new(9, owner_id=2, priority=-9), new(9, owner_id=1, priority=4))
    assert low.id == high.id and job_priority(sessions, low.id) == 4


def test_an_owner_that_cancels_and_queues_again_runs_at_its_new_priority_in_its_new_study(sessions: Any) -> None:
    """The owner's hold kept the priority of its first submission: queued at 1000, cancelled, and
    queued again at 0, the job ran at 1000."""
    from service.store.owners import Caller

    (first,) = submit(sessions, new(9, owner_id=1, priority=1000, study="first", trial=1))
    with session_scope(sessions, write=True) as session:
        reports.cancel_owned(session, public_id=first.public_id, caller=Caller(owner_id=1, admin=False))
    (again,) = submit(sessions, new(9, owner_id=1, priority=0, study="second", trial=2))
    assert again.id == first.id and job_priority(sessions, first.id) == 0
    # and under the study and trial that asked again (docs/service.md): they stayed "first" and 1
    with session_scope(sessions) as session:
        held = session.execute(select(OwnedCandidate.study, OwnedCandidate.trial)).one()
    assert tuple(held) == ("second", 2)


def job_priority(sessions: Any, job_id: int) -> int:
    with session_scope(sessions) as session:
        priority = session.scalar(select(Candidate.priority).where(Candidate.id == job_id))
    assert priority is not None
    return priority


def test_an_owner_with_nothing_running_goes_before_a_busier_owners_urgent_jobs(sessions: Any) -> None:
    """Fair share: owner 1 runs one job and queues more at top priority; owner 2's later,
    low-priority job is taken next, then owner 1's by age."""
    first, urgent, urgent_later = submit(
        sessions, new(1, owner_id=1, priority=10), new(2, owner_id=1, priority=10), new(3, owner_id=1, priority=10)
    )
    assert claimed_id(sessions) == first.id
    (other,) = submit(sessions, new(4, owner_id=2))
    assert [claimed_id(sessions) for _ in range(3)] == [other.id, urgent.id, urgent_later.id]


def test_a_job_several_owners_hold_is_ranked_by_its_least_busy_owner(sessions: Any) -> None:
    busy, busy_queued = submit(sessions, new(1, owner_id=1, priority=5), new(2, owner_id=1, priority=5))
    assert claimed_id(sessions) == busy.id
    shared, same = submit(sessions, new(3, owner_id=2), new(3, owner_id=1))  # owner 2 has nothing running
    (idle_owner_job,) = submit(sessions, new(4, owner_id=3, priority=1))
    assert shared.id == same.id
    assert [claimed_id(sessions) for _ in range(3)] == [idle_owner_job.id, shared.id, busy_queued.id]


def test_an_owner_is_not_charged_for_a_running_job_it_cancelled(sessions: Any) -> None:
    """Owners 1 and 2 share a running job and owner 1 cancels its submission (the job runs on for
    2): owner 1 wants nothing that runs, so its older job goes before owner 3's newer one."""
    from service.store.owners import Caller

    shared, _ = submit(sessions, new(1, owner_id=1), new(1, owner_id=2))
    assert claimed_id(sessions) == shared.id
    with session_scope(sessions, write=True) as session:
        before, _ = reports.cancel_owned(session, public_id=shared.public_id, caller=Caller(owner_id=1, admin=False))
    assert before == Status.RUNNING
    (older,) = submit(sessions, new(2, owner_id=1))
    (newer,) = submit(sessions, new(3, owner_id=3))
    assert [claimed_id(sessions) for _ in range(2)] == [older.id, newer.id]


@pytest.mark.parametrize(
    ("job_device", "worker_kind", "claimed"),
    [
        ("any", "cpu", True),
        ("any", "cuda", True),
        ("cpu", "cpu", True),
        ("cpu", "cuda", False),
        ("cuda", "cuda", True),
        ("cuda", "cpu", False),
    ],
)
def test_claim_respects_the_device_preference(sessions: Any, job_device: str, worker_kind: str, claimed: bool) -> None:
    submit(sessions, new(4, device=job_device))
    assert (claim(sessions, worker_kind) is not None) is claimed


@pytest.mark.parametrize(
    ("first", "again", "device"), [("cuda", "cpu", "any"), ("cuda", "cuda", "cuda"), ("cpu", "any", "any")]
)
def test_a_queued_job_submitted_again_with_another_device_runs_on_either(
    sessions: Any, first: str, again: str, device: str
) -> None:
    """The device is not in the cache key: a "cuda" job on a machine without a GPU worker held the
    second submitter's "cpu" request queued with it."""
    (entry,) = submit(sessions, new(6, device=first))
    (shared,) = submit(sessions, new(6, device=again))
    assert shared.id == entry.id and not shared.created
    with session_scope(sessions) as session:
        assert session.scalar(select(Candidate.device).where(Candidate.id == entry.id)) == device
    assert (claim(sessions, "cpu") is not None) is (device != "cuda")


def test_complete_writes_report_rows_and_status_once(sessions: Any, sample_report: ConditioningReport) -> None:
    (entry,) = submit(sessions, new(8))
    job = claim(sessions)
    assert job is not None and job.attempts == 1
    with session_scope(sessions, write=True) as session:
        assert jobs.complete(session, job_id=job.id, token=job.lease_token, report=sample_report)
    with session_scope(sessions, write=True) as session:
        different = sample_report.model_copy(update={"score": 9.0})
        assert not jobs.complete(session, job_id=job.id, token=job.lease_token, report=different)
    with session_scope(sessions) as session:
        row = session.get(Candidate, entry.id)
        assert row is not None and row.status == Status.DONE and row.score == -0.75 and row.verdict == "keep"
        assert row.report == sample_report.model_dump(mode="json") and row.tuning_seconds == 0.25
        scales = dict(session.execute(select(ScaleFactor.parameter, ScaleFactor.multiplier)).all())
        assert scales == {"blocks.0.0.weight": 1.25, "blocks.1.0.weight": 0.8}
        assert session.scalar(select(func.count()).select_from(BlockFigure)) == 2
        assert session.scalar(select(LayerFigure.kappa_d)) == 1.2


def test_non_finite_figures_are_stored_as_null(sessions: Any, sample_report: ConditioningReport) -> None:
    submit(sessions, new(8))
    job = claim(sessions)
    assert job is not None
    blocks = [sample_report.blocks[0].model_copy(update={"apjn_before": float("inf")}), *sample_report.blocks[1:]]
    report = sample_report.model_copy(update={"score": float("nan"), "blocks": blocks})
    with session_scope(sessions, write=True) as session:
        assert jobs.complete(session, job_id=job.id, token=job.lease_token, report=report)
    with session_scope(sessions) as session:
        row = session.get(Candidate, job.id)
        assert row is not None and row.report is not None and row.score is None and row.report["score"] is None
        assert session.scalar(select(BlockFigure.apjn_before).where(BlockFigure.block_index == 0)) is None


@pytest.mark.parametrize(
    ("max_attempts", "retry", "expected"),
    [(3, True, Status.QUEUED), (1, True, Status.FAILED), (3, False, Status.FAILED)],
)
def test_fail_requeues_while_attempts_remain(sessions: Any, max_attempts: int, retry: bool, expected: Status) -> None:
    submit(sessions, new(8), max_attempts=max_attempts)
    job = claim(sessions)
    assert job is not None
    with session_scope(sessions, write=True) as session:
        assert jobs.fail(session, job_id=job.id, token=job.lease_token, error="boom", retry=retry) == expected
    with session_scope(sessions) as session:
        row = session.get(Candidate, job.id)
        assert row is not None and row.error == "boom" and row.lease_token is None
        assert (row.finished_at is not None) is (expected == Status.FAILED)


def test_a_job_failing_every_time_ends_failed_after_max_attempts(sessions: Any) -> None:
    submit(sessions, new(8), max_attempts=3)
    statuses = []
    for _ in range(3):
        job = claim(sessions)
        assert job is not None
        with session_scope(sessions, write=True) as session:
            statuses.append(jobs.fail(session, job_id=job.id, token=job.lease_token, error="boom"))
    assert statuses == [Status.QUEUED, Status.QUEUED, Status.FAILED]
    assert claim(sessions) is None


def test_release_gives_the_job_back_without_using_an_attempt(sessions: Any) -> None:
    submit(sessions, new(8))
    job = claim(sessions)
    assert job is not None
    with session_scope(sessions, write=True) as session:
        assert jobs.release(session, job_id=job.id, token=job.lease_token)
    again = claim(sessions)
    assert again is not None and again.id == job.id and again.attempts == 1


def test_a_job_started_again_is_timed_from_its_last_start(sessions: Any) -> None:
    """A retried job kept its first attempt's start, so its run_seconds counted the failed attempt
    and the wait between them (the API says: from the last start to the end)."""
    submit(sessions, new(8))
    first = claim(sessions)
    assert first is not None
    with session_scope(sessions, write=True) as session:
        session.execute(
            update(Candidate).where(Candidate.id == first.id).values(started_at=utcnow() - timedelta(hours=1))
        )
        assert jobs.fail(session, job_id=first.id, token=first.lease_token, error="boom") == Status.QUEUED
    second = claim(sessions)
    assert second is not None and second.id == first.id
    with session_scope(sessions) as session:
        started = session.scalar(select(Candidate.started_at).where(Candidate.id == first.id))
    assert started is not None and utcnow() - started.replace(tzinfo=utcnow().tzinfo) < timedelta(minutes=5)


def expire(sessions: Any, job_id: int) -> None:
    with session_scope(sessions, write=True) as session:
        session.execute(
            update(Candidate).where(Candidate.id == job_id).values(leased_until=utcnow() - timedelta(seconds=1))
        )


def test_reap_requeues_expired_leases_and_the_old_holder_loses_them(
    sessions: Any, sample_report: ConditioningReport
) -> None:
    submit(sessions, new(8))
    job = claim(sessions)
    assert job is not None
    with session_scope(sessions, write=True) as session:
        assert jobs.reap(session) == 0
    expire(sessions, job.id)
    with session_scope(sessions, write=True) as session:
        assert jobs.reap(session) == 1
    taken = claim(sessions)
    assert taken is not None and taken.id == job.id and taken.attempts == 2
    with session_scope(sessions, write=True) as session:
        assert not jobs.heartbeat(session, job_id=job.id, token=job.lease_token, lease_seconds=30)
        assert not jobs.complete(session, job_id=job.id, token=job.lease_token, report=sample_report)
        assert jobs.heartbeat(session, job_id=taken.id, token=taken.lease_token, lease_seconds=30)


def test_reap_fails_a_job_whose_last_attempt_expired(sessions: Any) -> None:
    submit(sessions, new(8), max_attempts=1)
    job = claim(sessions)
    assert job is not None
    expire(sessions, job.id)
    with session_scope(sessions, write=True) as session:
        jobs.reap(session)
    assert status_of(sessions, job.id) == Status.FAILED


@pytest.mark.parametrize("claimed", [False, True])
def test_cancel_stops_queued_and_running_jobs(sessions: Any, claimed: bool) -> None:
    (entry,) = submit(sessions, new(8))
    job = claim(sessions) if claimed else None
    with session_scope(sessions, write=True) as session:
        assert jobs.cancel(session, job_id=entry.id) == Status.CANCELLED
    if job is not None:
        with session_scope(sessions, write=True) as session:
            assert not jobs.heartbeat(session, job_id=job.id, token=job.lease_token, lease_seconds=30)
    assert claim(sessions) is None


def test_cancelling_an_owners_work_stops_its_jobs_and_leaves_a_shared_one_to_the_other_owner(
    sessions: Any, sample_report: ConditioningReport
) -> None:
    """A revoked token's work (``preflight token revoke``): its queued and running jobs stop, a
    job another owner holds runs on at that owner's priority, and nothing finished changes."""
    (finished,) = submit(sessions, new(1, owner_id=1))
    job = claim(sessions)
    assert job is not None and job.id == finished.id
    with session_scope(sessions, write=True) as session:
        assert jobs.complete(session, job_id=job.id, token=job.lease_token, report=sample_report)
    running, queued, shared = submit(
        sessions, new(2, owner_id=1, priority=9), new(3, owner_id=1), new(4, owner_id=1, priority=8)
    )
    lease = claim(sessions)
    assert lease is not None and lease.id == running.id
    submit(sessions, new(4, owner_id=2, priority=1))
    (others,) = submit(sessions, new(5, owner_id=2))
    with session_scope(sessions, write=True) as session:
        assert reports.cancel_all_owned(session, owner_ids=[1]) == 3
    with session_scope(sessions, write=True) as session:
        assert reports.cancel_all_owned(session, owner_ids=[1]) == 0  # twice is no error
        assert not jobs.heartbeat(session, job_id=lease.id, token=lease.lease_token, lease_seconds=30)
    assert [status_of(sessions, entry.id) for entry in (finished, running, queued, shared, others)] == [
        Status.DONE,
        Status.CANCELLED,
        Status.CANCELLED,
        Status.QUEUED,
        Status.QUEUED,
    ]
    assert job_priority(sessions, shared.id) == 1  # owner 2's, no longer owner 1's 8
    owner = Caller(owner_id=1, admin=False)
    with session_scope(sessions) as session:
        seen = [
            reports.owned_candidate(session.connection(), public_id=e.public_id, caller=owner)
            for e in (finished, shared)
        ]
    assert [row.status if row else None for row in seen] == [Status.DONE.value, Status.CANCELLED.value]


def test_two_owners_work_is_cancelled_in_one_statement_and_a_job_both_hold_stops(sessions: Any) -> None:
    """A name typed two ways can revoke two tokens at once: one call takes both owners' locks in one
    ordered statement (a call per owner, in one transaction, deadlocked with submissions on PostgreSQL)."""
    shared, _, own, others = submit(
        sessions, new(1, owner_id=1), new(1, owner_id=2), new(2, owner_id=2), new(3, owner_id=3)
    )
    with session_scope(sessions, write=True) as session:
        assert reports.cancel_all_owned(session, owner_ids=[2, 1]) == 3
        assert reports.cancel_all_owned(session, owner_ids=[]) == 0
    assert [status_of(sessions, e.id) for e in (shared, own, others)] == [
        Status.CANCELLED,
        Status.CANCELLED,
        Status.QUEUED,
    ]


def test_a_cancelled_candidate_submitted_again_is_queued_again(sessions: Any) -> None:
    (entry,) = submit(sessions, new(8))
    with session_scope(sessions, write=True) as session:
        jobs.cancel(session, job_id=entry.id)
    (again,) = submit(sessions, new(8))
    assert again.id == entry.id and status_of(sessions, entry.id) == Status.QUEUED
    with session_scope(sessions) as session:
        assert session.scalar(select(Candidate.started_at).where(Candidate.id == entry.id)) is None


def test_cancel_of_unknown_or_finished_jobs(sessions: Any, sample_report: ConditioningReport) -> None:
    submit(sessions, new(8))
    job = claim(sessions)
    assert job is not None
    with session_scope(sessions, write=True) as session:
        jobs.complete(session, job_id=job.id, token=job.lease_token, report=sample_report)
    with session_scope(sessions, write=True) as session:
        assert jobs.cancel(session, job_id=job.id) == Status.DONE
        assert jobs.cancel(session, job_id=10_000) is None


def test_concurrent_claims_never_hand_out_a_job_twice(sessions: Any) -> None:
    submit(sessions, *[new(width) for width in range(1, 61)])
    taken: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        while (job := claim(sessions)) is not None:
            with lock:
                taken.append(job.id)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(taken) == 60 and len(set(taken)) == 60


def test_concurrent_identical_submissions_make_one_candidate(sessions: Any) -> None:
    ids: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(10):
            (entry,) = submit(sessions, new(32))
            with lock:
                ids.append(entry.id)
            time.sleep(0)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(ids)) == 1


def test_cache_key_ignores_option_order_but_not_values_or_the_engine() -> None:
    assert jobs.cache_key("h", {"a": 1, "b": 2}, "e") == jobs.cache_key("h", {"b": 2, "a": 1}, "e")
    assert jobs.cache_key("h", {"a": 1}, "e") != jobs.cache_key("h", {"a": 2}, "e")
    assert jobs.cache_key("h", {"a": 1}, "e") != jobs.cache_key("g", {"a": 1}, "e")
    assert jobs.cache_key("h", {"a": 1}, "e") != jobs.cache_key("h", {"a": 1}, "f")


OLDER_ENGINE = "0123456789abcdef"


def test_a_report_of_another_engine_revision_is_not_a_cache_hit(sessions: Any) -> None:
    """An upgraded engine recomputes: the job an older revision computed stays (nothing stored
    is lost) and the same spec and options submitted now are a new job under this revision."""
    (old,) = submit(sessions, new(8, engine=OLDER_ENGINE))
    with session_scope(sessions, write=True) as session:
        session.execute(update(Candidate).where(Candidate.id == old.id).values(status=Status.DONE))
    (now,) = submit(sessions, new(8))
    (again,) = submit(sessions, new(8))
    assert now.created and now.id != old.id
    assert not again.created and again.id == now.id
    assert status_of(sessions, old.id) is Status.DONE
    with session_scope(sessions) as session:
        engines = {row.id: row.engine for row in session.execute(select(Candidate.id, Candidate.engine))}
    assert engines == {old.id: OLDER_ENGINE, now.id: engine_revision()}


def test_a_worker_claims_only_jobs_of_its_own_engine_revision_and_those_queued_before_revisions(
    sessions: Any,
) -> None:
    older, legacy, mine = submit(sessions, new(1, engine=OLDER_ENGINE), new(2, engine=OLDER_ENGINE), new(3))
    with session_scope(sessions, write=True) as session:  # as migration 0004 leaves a job queued before it
        session.execute(update(Candidate).where(Candidate.id == legacy.id).values(engine=None))
        assert jobs.backlog(session) == jobs.Backlog(claimable=2, running=0, foreign=1)
        assert jobs.backlog(session, OLDER_ENGINE) == jobs.Backlog(claimable=2, running=0, foreign=1)
    assert [claimed_id(sessions), claimed_id(sessions)] == [legacy.id, mine.id]
    assert claim(sessions) is None
    with session_scope(sessions, write=True) as session:
        job = jobs.claim(session, worker="old", device_kind="cpu", lease_seconds=30.0, engine=OLDER_ENGINE)
        assert job is not None and job.id == older.id
        assert jobs.backlog(session) == jobs.Backlog(claimable=0, running=3, foreign=0)


def _skew_python_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """This process's wall clock off by ``seconds``, as a worker on a badly synchronized host."""
    import datetime as real

    from service.store import db as db_module

    class Skewed(real.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return real.datetime.now(tz) + timedelta(seconds=seconds)

    monkeypatch.setattr(db_module, "datetime", Skewed)


def test_a_worker_whose_clock_runs_60s_ahead_reaps_no_healthy_lease(
    sessions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(sessions, new(8), new(9))
    held = claim(sessions, lease=30.0)
    assert held is not None
    _skew_python_clock(monkeypatch, +60.0)
    with session_scope(sessions, write=True) as session:
        assert jobs.reap(session) == 0  # by this worker's own clock the lease expired 30 s ago
    assert status_of(sessions, held.id) == Status.RUNNING
    with session_scope(sessions, write=True) as session:
        assert jobs.heartbeat(session, job_id=held.id, token=held.lease_token, lease_seconds=30)


def test_a_worker_whose_clock_runs_60s_behind_writes_leases_that_hold(
    sessions: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(sessions, new(8))
    _skew_python_clock(monkeypatch, -60.0)
    held = claim(sessions, lease=30.0)
    assert held is not None
    with session_scope(sessions, write=True) as session:
        assert jobs.heartbeat(session, job_id=held.id, token=held.lease_token, lease_seconds=30)
    monkeypatch.undo()  # a healthy worker reaps: the lease must still be 30 s in its future
    with session_scope(sessions, write=True) as session:
        assert jobs.reap(session) == 0
        leased_until = session.scalar(select(Candidate.leased_until).where(Candidate.id == held.id))
        assert leased_until is not None
        assert leased_until > utcnow() + timedelta(seconds=20)

"""Reading candidates, their reports and study figures: the queries behind the API's reads
(and its cancel, which answers with the candidate). Every function takes its session or
connection first and the rest by keyword; what the API reads is scoped to its caller
(``service.store.owners``): an owner's own candidates, or every owner's for an admin."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Select,
    and_,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.orm import Session

from service.store import jobs
from service.store.db import db_now
from service.store.models import Candidate, OwnedCandidate, Status, Submission
from service.store.owners import Caller

__all__ = [
    "StudyFigures",
    "adding_nothing",
    "cancel_all_owned",
    "cancel_owned",
    "list_candidates",
    "owned_candidate",
    "owned_views",
    "study_figures",
    "tuning_histogram",
    "unfinished_count",
]

_OWNED = OwnedCandidate.__table__
_JOB = Candidate.__table__

# What an owner sees of its candidate: the shared job's columns, with the owner's own public id,
# study, trial and priority, and "cancelled" once that owner cancelled it (whatever the job does
# for the owners that still want it). A Row of it has the attribute names of a candidate.
_STATUS = case((_OWNED.c.cancelled_at.is_not(None), Status.CANCELLED.value), else_=_JOB.c.status)
_VIEW = select(
    _OWNED.c.public_id.label("id"),
    _OWNED.c.id.label("owned_id"),
    _OWNED.c.owner_id,
    _STATUS.label("status"),
    _OWNED.c.study,
    _OWNED.c.trial,
    _OWNED.c.priority,
    case((_OWNED.c.cancelled_at.is_not(None), _OWNED.c.cancelled_at), else_=_JOB.c.finished_at).label("finished_at"),
    _OWNED.c.created_at.label("owned_at"),  # this owner's first submission (a tenant's timings start there)
    *(column for column in _JOB.c if column.name not in {"id", "status", "study", "trial", "priority", "finished_at"}),
).select_from(_OWNED.join(_JOB, _JOB.c.id == _OWNED.c.candidate_id))

# Reads by id skip the ORM: the hot path of clients polling for reports, one prebuilt statement
# for an owner and one for an admin.
_BY_PUBLIC_ID = _VIEW.where(_OWNED.c.public_id == bindparam("id"))
_OWN_BY_PUBLIC_ID = _BY_PUBLIC_ID.where(_OWNED.c.owner_id == bindparam("owner"))


# a job still to run or running: what an owner's quota counts and a revoke cancels
_UNFINISHED = _JOB.c.status.in_((Status.QUEUED.value, Status.RUNNING.value))


def _held_by(owner_id: int) -> ColumnElement[bool]:
    """The job (``_JOB``, from the enclosing query) is held by this owner, not cancelled by it."""
    return exists().where(
        _OWNED.c.candidate_id == _JOB.c.id, _OWNED.c.owner_id == owner_id, _OWNED.c.cancelled_at.is_(None)
    )


def _visible(caller: Caller) -> ColumnElement[bool]:
    """The owned rows a caller sees: its own, or every owner's for an admin."""
    return true() if caller.admin else _OWNED.c.owner_id == caller.owner_id


def owned_candidate(connection: Connection, *, public_id: str, caller: Caller) -> Row[Any] | None:
    """The caller's candidate with this public id (as a candidate row), or None when there is
    none that the caller may see: another owner's is as absent as one that never existed."""
    if caller.admin:
        return connection.execute(_BY_PUBLIC_ID, {"id": public_id}).one_or_none()
    return connection.execute(_OWN_BY_PUBLIC_ID, {"id": public_id, "owner": caller.owner_id}).one_or_none()


def unfinished_count(connection: Connection, *, owner_id: int, limit: int) -> int:
    """How many of this owner's submissions are queued or running (its cancelled ones not), counted
    up to ``limit``: what a token's quota compares. It walks the unfinished jobs (``ix_candidates_claim``),
    not the owner's history, which grows without bound (200,000 finished submissions took 125 ms)."""
    held = select(_JOB.c.id).where(_UNFINISHED, _held_by(owner_id)).limit(limit).subquery()
    return int(connection.scalar(select(func.count()).select_from(held)) or 0)


def adding_nothing(connection: Connection, *, owner_id: int, cache_keys: Collection[str]) -> int:
    """How many of these cache keys a submission by this owner would add no unfinished work for: a
    finished job (done or failed: returned as it is), or one the owner holds queued or running."""
    if not cache_keys:
        return 0
    finished = _JOB.c.status.in_((Status.DONE.value, Status.FAILED.value))
    found = select(func.count()).where(
        _JOB.c.cache_key.in_(list(cache_keys)), or_(finished, and_(_UNFINISHED, _held_by(owner_id)))
    )
    return int(connection.scalar(found) or 0)


def owned_views(session: Session, *, owned_ids: Sequence[int]) -> dict[int, Row[Any]]:
    """The candidates of these owned rows, by owned id (what a submission answers with)."""
    rows = session.execute(_VIEW.where(_OWNED.c.id.in_(set(owned_ids))))
    return {row.owned_id: row for row in rows}


def _with_status(query: Select[Any], status: Status) -> Select[Any]:
    """Filter on the status the owner sees: its own cancel, else the shared job's status."""
    if status is Status.CANCELLED:
        return query.where(or_(_OWNED.c.cancelled_at.is_not(None), _JOB.c.status == status.value))
    return query.where(_OWNED.c.cancelled_at.is_(None), _JOB.c.status == status.value)


def _in_study(study: str) -> ColumnElement[bool]:
    """The owned row's owner submitted its candidate in this study (studies are their owners')."""
    return exists().where(
        Submission.candidate_id == _OWNED.c.candidate_id,
        Submission.owner_id == _OWNED.c.owner_id,
        Submission.study == study,
    )


def list_candidates(
    session: Session,
    *,
    caller: Caller,
    limit: int,
    study: str | None = None,
    status: Status | None = None,
    verdict: str | None = None,
    after_id: int | None = None,
) -> Sequence[Row[Any]]:
    """Up to ``limit`` of the caller's candidates (every owner's for an admin), oldest first,
    with owned ids above ``after_id``; ``study`` keeps those its owner submitted in that study."""
    query = _VIEW.where(_visible(caller)).order_by(_OWNED.c.id).limit(limit)
    if study is not None:
        query = query.where(_in_study(study))
    if status is not None:
        query = _with_status(query, status)
    if verdict is not None:
        query = query.where(_JOB.c.verdict == verdict, _OWNED.c.cancelled_at.is_(None))
    if after_id is not None:
        query = query.where(_OWNED.c.id > after_id)
    return list(session.execute(query))


def owned_row_id(session: Session, *, public_id: str, caller: Caller) -> int | None:
    """The store's row id of the caller's candidate with this public id (where a page of the list
    resumes), or None when the caller may see no such candidate."""
    return session.scalar(select(_OWNED.c.id).where(_OWNED.c.public_id == public_id, _visible(caller)))


def cancel_owned(session: Session, *, public_id: str, caller: Caller) -> tuple[Status | None, Row[Any] | None]:
    """Cancel the caller's submission of a queued or running candidate; returns the status it
    had for the caller before (None: no such candidate the caller may see) and the candidate
    as the caller sees it now.

    The owner's submission is marked cancelled; the shared job is cancelled only when no other
    owner still wants it (otherwise it runs on for them). Cancelling twice is no error.
    """
    found = session.execute(
        select(_OWNED.c.id, _OWNED.c.candidate_id, _OWNED.c.owner_id, _OWNED.c.cancelled_at).where(
            _OWNED.c.public_id == public_id, _visible(caller)
        )
    ).one_or_none()
    if found is None:
        return None, None
    job = select(_JOB.c.status).where(_JOB.c.id == found.candidate_id)
    if session.get_bind().dialect.name == "postgresql":
        # a submission of the same job by another owner is either committed before this reads
        # who still wants the job, or sees the job cancelled and queues it again (jobs.submit)
        job = job.with_for_update()
    job_status = Status(session.execute(job).scalar_one())
    before = Status.CANCELLED if found.cancelled_at is not None else job_status
    if found.cancelled_at is None and job_status not in (Status.DONE, Status.FAILED):
        now = db_now(session)
        session.execute(update(OwnedCandidate).where(OwnedCandidate.id == found.id).values(cancelled_at=now))
        wanted = session.scalar(
            select(
                exists().where(
                    OwnedCandidate.candidate_id == found.candidate_id,
                    OwnedCandidate.id != found.id,
                    OwnedCandidate.cancelled_at.is_(None),
                )
            )
        )
        if not wanted:
            jobs.cancel(session, job_id=found.candidate_id)
        else:  # it runs on for the others, at their priority
            jobs.wanted_priority(session, [found.candidate_id])
    return before, session.execute(_VIEW.where(_OWNED.c.id == found.id)).one()


def cancel_all_owned(session: Session, *, owner_ids: Sequence[int]) -> int:
    """Cancel every queued or running submission of these owners (revoked tokens': nobody but an
    admin could read their results); returns how many. As :func:`cancel_owned` does one by one: a
    job another owner still wants runs on for them, at their priority. One statement locks every
    job, in id order, so that two owners' cancels in one transaction cannot deadlock a submission."""
    if not owner_ids:
        return 0
    pending = (
        select(_OWNED.c.id, _OWNED.c.candidate_id)
        .select_from(_OWNED.join(_JOB, _JOB.c.id == _OWNED.c.candidate_id))
        .where(
            _OWNED.c.owner_id.in_(sorted(set(owner_ids))),
            _OWNED.c.cancelled_at.is_(None),
            _UNFINISHED,
        )
        .order_by(_OWNED.c.candidate_id)
    )
    if session.get_bind().dialect.name == "postgresql":
        pending = pending.with_for_update(of=_JOB)  # as cancel_owned: a concurrent submission waits
    rows = session.execute(pending).all()
    now = db_now(session)
    for chunk in _chunks([row.id for row in rows]):
        session.execute(update(OwnedCandidate).where(OwnedCandidate.id.in_(chunk)).values(cancelled_at=now))
    job_ids = sorted({row.candidate_id for row in rows})
    wanted: set[int] = set()
    for chunk in _chunks(job_ids):
        wanted.update(
            session.scalars(
                select(OwnedCandidate.candidate_id)
                .where(OwnedCandidate.candidate_id.in_(chunk), OwnedCandidate.cancelled_at.is_(None))
                .distinct()
            )
        )
    for chunk in _chunks([job for job in job_ids if job not in wanted]):
        jobs.cancel_many(session, job_ids=chunk)
    for chunk in _chunks(sorted(wanted)):
        jobs.wanted_priority(session, chunk)
    return len(rows)


def _chunks(ids: Sequence[int], size: int = 500) -> list[Sequence[int]]:
    """``ids`` in slices short enough for one statement's parameters on either database."""
    return [ids[start : start + size] for start in range(0, len(ids), size)]


@dataclass(frozen=True)
class StudyFigures:
    """Of the candidates a study submitted (each once): how many are in each status, the
    verdicts of the done ones, and their scores in ascending order."""

    counts: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    scores: list[float] = field(default_factory=list)


def study_figures(session: Session, *, study: str, caller: Caller) -> StudyFigures:
    """The figures of the caller's study (for an admin: every owner's study of that name), each
    owner's candidate counted once with the status that owner sees."""
    # from the study's submissions (ix_submissions_study) to their owners' rows and the jobs
    submitted = select(Submission.owner_id, Submission.candidate_id).where(Submission.study == study)
    if not caller.admin:
        submitted = submitted.where(Submission.owner_id == caller.owner_id)
    members = submitted.distinct().subquery()
    joined = members.join(
        _OWNED, and_(_OWNED.c.owner_id == members.c.owner_id, _OWNED.c.candidate_id == members.c.candidate_id)
    ).join(_JOB, _JOB.c.id == _OWNED.c.candidate_id)
    counts = session.execute(select(_STATUS, func.count()).select_from(joined).group_by(_STATUS)).all()
    done = and_(_OWNED.c.cancelled_at.is_(None), _JOB.c.status == Status.DONE.value)
    verdicts = session.execute(
        select(_JOB.c.verdict, func.count())
        .select_from(joined)
        .where(done, _JOB.c.verdict.is_not(None))
        .group_by(_JOB.c.verdict)
    ).all()
    scores = session.scalars(select(_JOB.c.score).select_from(joined).where(done, _JOB.c.score.is_not(None)))
    return StudyFigures(
        counts={str(status): int(count) for status, count in counts},
        verdicts={str(verdict): int(count) for verdict, count in verdicts},
        scores=sorted(float(score) for score in scores if score is not None),
    )


def tuning_histogram(session: Session, *, bounds: Sequence[float]) -> tuple[int, float | None, list[int]]:
    """Of done candidates with a tuning time: how many, the sum of their times, and how many
    took at most each of ``bounds`` seconds (cumulative, as Prometheus buckets are)."""
    columns = [func.count().filter(Candidate.tuning_seconds <= bound) for bound in bounds]
    total, seconds, *cumulative = session.execute(
        select(func.count(Candidate.tuning_seconds), func.sum(Candidate.tuning_seconds), *columns).where(
            Candidate.status == Status.DONE
        )
    ).one()
    return int(total), seconds, [int(count) for count in cumulative]

"""Reading candidates, their reports and study figures: the queries behind the API's reads
(and its cancel, which answers with the candidate). Every function takes its session or
connection first and the rest by keyword."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Row, bindparam, exists, func, select
from sqlalchemy.orm import Session

from service.store import jobs
from service.store.models import Candidate, Status, Submission

__all__ = [
    "StudyFigures",
    "cancel_candidate",
    "candidate_row",
    "list_candidates",
    "study_figures",
    "tuning_histogram",
]

# Reads by id skip the ORM (a Row has the same attribute names): the hot path of clients
# polling for reports, where the ORM's identity map and unit of work buy nothing.
_BY_ID = select(Candidate.__table__).where(Candidate.__table__.c.id == bindparam("id"))


def candidate_row(connection: Connection, *, candidate_id: int) -> Row[Any] | None:
    """The candidate's row (its columns as attributes), or None when there is none."""
    return connection.execute(_BY_ID, {"id": candidate_id}).one_or_none()


def list_candidates(
    session: Session,
    *,
    limit: int,
    study: str | None = None,
    status: Status | None = None,
    verdict: str | None = None,
    after_id: int | None = None,
) -> Sequence[Candidate]:
    """Up to ``limit`` candidates, oldest first, with ids above ``after_id``; ``study`` keeps
    those the study submitted."""
    query = select(Candidate).order_by(Candidate.id).limit(limit)
    if study is not None:
        query = query.where(exists().where(Submission.candidate_id == Candidate.id, Submission.study == study))
    if status is not None:
        query = query.where(Candidate.status == status)
    if verdict is not None:
        query = query.where(Candidate.verdict == verdict)
    if after_id is not None:
        query = query.where(Candidate.id > after_id)
    return list(session.scalars(query))


def cancel_candidate(session: Session, *, candidate_id: int) -> tuple[Status | None, Candidate | None]:
    """Cancel a queued or running candidate (see :func:`jobs.cancel`); returns its status
    before the cancel (None: no such candidate) and the candidate as it is now."""
    status = jobs.cancel(session, job_id=candidate_id)
    return status, session.get(Candidate, candidate_id) if status is not None else None


@dataclass(frozen=True)
class StudyFigures:
    """Of the candidates a study submitted (each once): how many are in each status, the
    verdicts of the done ones, and their scores in ascending order."""

    counts: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    scores: list[float] = field(default_factory=list)


def study_figures(session: Session, *, study: str) -> StudyFigures:
    members = select(Submission.candidate_id).where(Submission.study == study).distinct().subquery()
    in_study = Candidate.id.in_(select(members.c.candidate_id))
    counts = session.execute(select(Candidate.status, func.count()).where(in_study).group_by(Candidate.status)).all()
    verdicts = session.execute(
        select(Candidate.verdict, func.count())
        .where(in_study, Candidate.status == Status.DONE, Candidate.verdict.is_not(None))
        .group_by(Candidate.verdict)
    ).all()
    scores = session.scalars(
        select(Candidate.score).where(in_study, Candidate.status == Status.DONE, Candidate.score.is_not(None))
    )
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

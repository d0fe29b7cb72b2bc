"""The job queue, in SQL: enqueue, claim, heartbeat, complete, fail, release, reap, cancel.

A candidate row is its own job. Its life (see :class:`service.store.models.Status`)::

    queued --claim--> running --complete--> done
      ^                 |  \\--fail (attempts left)--> queued
      |                 |   \\-fail (no attempts left)--> failed
      +--reap (lease expired, attempts left)              (lease expired, none left: failed)
    queued | running --cancel--> cancelled --submitted again--> queued

A candidate is shared by every owner (token) that submitted its cache key; each owner holds
its own ``owned_candidates`` row (``service.store.owners``), which ``submit`` creates and
``service.store.reports.cancel_owned`` cancels. The functions here act on the shared job.

Every transition is one atomic statement. A claim is an ``UPDATE ... WHERE id = (SELECT ...
FOR UPDATE SKIP LOCKED) RETURNING`` on PostgreSQL; on SQLite the same UPDATE runs inside
BEGIN IMMEDIATE, which holds the database's single write lock. Each claim draws a fresh
lease token, and heartbeat, complete, fail and release only act while the row still holds
that token and is running: a worker whose lease expired (and whose job another worker took)
can neither extend it nor write its result, so a job is never done twice.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, Result, and_, case, delete, func, insert, not_, or_, select, update
from sqlalchemy.orm import Session, aliased

from nas.canonical import cache_key
from nas.report import ConditioningReport, finite_or_none
from service.revision import engine_revision
from service.store.db import db_now, insert_ignoring_duplicates
from service.store.models import (
    BlockFigure,
    Candidate,
    LayerFigure,
    OwnedCandidate,
    ScaleFactor,
    Status,
    Submission,
)
from service.store.owners import ANONYMOUS_OWNER, public_id

__all__ = [
    "DEVICE_KINDS",
    "Enqueued",
    "Job",
    "NewCandidate",
    "cache_key",
    "cancel",
    "cancel_many",
    "claim",
    "complete",
    "fail",
    "finite",
    "heartbeat",
    "Backlog",
    "backlog",
    "queue_depth",
    "reap",
    "release",
    "submit",
    "wanted_priority",
]

# Which job device preferences a worker of each kind takes.
DEVICE_KINDS: dict[str, tuple[str, ...]] = {"cpu": ("any", "cpu"), "cuda": ("any", "cuda")}

_LAYER_FIELDS = (
    "fan_in",
    "fan_out",
    "gamma",
    "nu",
    "hessian_top_eigenvalue",
    "hessian_chain_rule",
    "hessian_mean_sq_singular",
    "kappa_d",
)


@dataclass(frozen=True)
class Job:
    """What a worker holds after a claim: the work and the lease that proves it is its own."""

    id: int
    spec: dict[str, Any]
    options: dict[str, Any]
    device: str
    attempts: int
    max_attempts: int
    lease_token: str
    leased_until: datetime


@dataclass(frozen=True)
class NewCandidate:
    """One validated submission: canonical spec, tuning options and how to schedule it."""

    spec: dict[str, Any]
    spec_hash: str
    options: dict[str, Any]
    study: str | None = None
    trial: int | None = None
    device: str = "any"
    priority: int = 0
    owner_id: int = ANONYMOUS_OWNER  # who submits it (service.store.owners)
    engine: str = field(default_factory=engine_revision)  # the revision that will compute it

    @property
    def cache_key(self) -> str:
        return cache_key(self.spec_hash, self.options, self.engine)


@dataclass(frozen=True)
class Enqueued:
    """One submitted candidate: the shared job, and the submitter's own hold on it."""

    id: int  # the job (candidates row)
    created: bool  # this call created the job; False: it existed (a cache hit)
    owned_id: int  # the owner's owned_candidates row
    public_id: str  # its id in the API


def finite(value: Any) -> Any:
    """The value with every non-finite float replaced by None (JSON and JSONB have no NaN)."""
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def submit(session: Session, *, candidates: Sequence[NewCandidate], max_attempts: int) -> list[Enqueued]:
    """Queue each candidate unless its cache key exists; one Enqueued per input, in order.

    A cancelled candidate submitted again is queued again; any other existing one is
    returned as it is (done at once on a cache hit). Each owner gets (or keeps) its own hold on
    the candidate, un-cancelled when it had cancelled it. Every call records its submissions.
    """
    now = db_now(session)
    by_key: dict[str, NewCandidate] = {}
    for candidate in candidates:
        by_key.setdefault(candidate.cache_key, candidate)
    rows = [
        {
            "cache_key": key,
            "spec_hash": c.spec_hash,
            "engine": c.engine,
            "spec": c.spec,
            "options": c.options,
            "study": c.study,
            "trial": c.trial,
            "device": c.device,
            "priority": c.priority,
            "status": Status.QUEUED.value,
            "attempts": 0,
            "max_attempts": max_attempts,
            "created_at": now,
        }
        for key, c in by_key.items()
    ]
    new = insert_ignoring_duplicates(session, Candidate, ["cache_key"]).returning(Candidate.id, Candidate.cache_key)
    created_ids = {key: id_ for id_, key in session.execute(new, rows)}
    existing = set(by_key) - set(created_ids)
    ids = dict(created_ids)
    if existing:
        found = select(Candidate.id, Candidate.cache_key).where(Candidate.cache_key.in_(existing))
        found = found.order_by(Candidate.id)
        if session.get_bind().dialect.name == "postgresql":
            # an owner's cancel of the same job waits for this submission's hold (see reports.cancel_owned)
            found = found.with_for_update()
        for id_, key in session.execute(found):
            ids[key] = id_
        session.execute(
            update(Candidate)
            .where(Candidate.id.in_([ids[key] for key in existing]), Candidate.status == Status.CANCELLED)
            .values(status=Status.QUEUED, attempts=0, error=None, started_at=None, finished_at=None)
        )
        _widen_devices(session, {ids[key]: by_key[key].device for key in existing})
    held = _hold(session, candidates, ids, now)
    wanted_priority(session, sorted(set(ids.values())))  # owners of one job may come in one call (a group commit)
    session.execute(
        insert(Submission),
        [
            {
                "candidate_id": ids[c.cache_key],
                "owner_id": c.owner_id,
                "study": c.study,
                "trial": c.trial,
                "created_at": now,
            }
            for c in candidates
        ],
    )
    out, seen = [], set()
    for c in candidates:  # a key repeated within the call is created once
        owned_id, public = held[c.owner_id, ids[c.cache_key]]
        created = c.cache_key in created_ids and c.cache_key not in seen
        out.append(Enqueued(id=ids[c.cache_key], created=created, owned_id=owned_id, public_id=public))
        seen.add(c.cache_key)
    return out


def wanted_priority(session: Session, job_ids: Sequence[int]) -> None:
    """Queue each unfinished job at the highest (capped) priority of the owners that still want it,
    not at the first submitter's: one owner's low priority must not hold back another's, nor a
    cancelled owner's high one run the job above a tenant's cap."""
    highest = (
        select(func.max(OwnedCandidate.priority))
        .where(OwnedCandidate.candidate_id == Candidate.id, OwnedCandidate.cancelled_at.is_(None))
        .scalar_subquery()
    )
    session.execute(
        update(Candidate)
        .where(Candidate.id.in_(job_ids), Candidate.status.in_((Status.QUEUED, Status.RUNNING)))
        .values(priority=func.coalesce(highest, Candidate.priority))
        .execution_options(synchronize_session=False)
    )


def _widen_devices(session: Session, wanted: dict[int, str]) -> None:
    """A queued job submitted again with another device preference may run on either: its device
    becomes "any". The device is not part of the cache key (the report is the same), so one
    submitter's "cuda" on a machine without a GPU worker held every other submitter's job too."""
    for device in set(wanted.values()):
        session.execute(
            update(Candidate)
            .where(
                Candidate.id.in_([job for job, d in wanted.items() if d == device]),
                Candidate.status == Status.QUEUED,
                Candidate.device.not_in(("any", device)),
            )
            .values(device="any")
        )


def _hold(
    session: Session, candidates: Sequence[NewCandidate], ids: dict[str, int], now: datetime
) -> dict[tuple[int, int], tuple[int, str]]:
    """Each owner's hold on each job it submitted, created with the owner's first study, trial and
    priority, or kept (once cancelled: no longer, and with the new submission's study, trial and
    priority); (owner, job id) -> (owned id, public id)."""
    wanted: dict[tuple[int, int], NewCandidate] = {}
    for c in candidates:
        wanted.setdefault((c.owner_id, ids[c.cache_key]), c)
    session.execute(
        insert_ignoring_duplicates(session, OwnedCandidate, ["owner_id", "candidate_id"]),
        [
            {
                "public_id": public_id(),
                "candidate_id": job,
                "owner_id": owner,
                "study": c.study,
                "trial": c.trial,
                "priority": c.priority,
                "created_at": now,
            }
            for (owner, job), c in wanted.items()
        ],
    )
    rows = session.execute(
        select(
            OwnedCandidate.id,
            OwnedCandidate.public_id,
            OwnedCandidate.owner_id,
            OwnedCandidate.candidate_id,
            OwnedCandidate.cancelled_at,
        ).where(
            OwnedCandidate.candidate_id.in_({job for _, job in wanted}),
            OwnedCandidate.owner_id.in_({owner for owner, _ in wanted}),
        )
    )
    held = {(row.owner_id, row.candidate_id): row for row in rows if (row.owner_id, row.candidate_id) in wanted}
    for key, row in held.items():
        if row.cancelled_at is not None:  # wanted again, at the priority, study and trial asked for now
            again = wanted[key]
            session.execute(
                update(OwnedCandidate)
                .where(OwnedCandidate.id == row.id)
                .values(cancelled_at=None, priority=again.priority, study=again.study, trial=again.trial)
            )
    return {key: (row.id, row.public_id) for key, row in held.items()}


def claim(
    session: Session, *, worker: str, device_kind: str, lease_seconds: float, engine: str | None = None
) -> Job | None:
    """Lease the next queued job this worker's device and engine can run, or None (the lease runs
    on the database's clock, ``db_now``).

    A job is keyed under the engine revision of the service that queued it; a worker claims only
    jobs of its own revision (``engine``, this process's ``engine_revision()`` when None) and the
    jobs queued before revisions were recorded, so a report is always the work of the engine
    its key names, and a worker left at an older release takes none of a newer one's jobs.

    Owners share the workers fairly: the next job is one whose owner has the fewest jobs
    running (for a job several owners submitted, the least busy of them), then the highest
    priority, then the oldest. An owner's priority orders its own jobs and cannot push past
    an owner that is waiting with nothing running, so one token's slow or poison jobs hold
    another's work up by at most the running job that a worker finishes first."""
    now = db_now(session)
    pick = (
        select(Candidate.id)
        .where(
            Candidate.status == Status.QUEUED,
            Candidate.device.in_(DEVICE_KINDS[device_kind]),
            or_(Candidate.engine == (engine or engine_revision()), Candidate.engine.is_(None)),
        )
        .order_by(_owners_running(), Candidate.priority.desc(), Candidate.id)
        .limit(1)
    )
    if session.get_bind().dialect.name == "postgresql":
        pick = pick.with_for_update(skip_locked=True, of=Candidate)
    token = secrets.token_hex(16)
    row = session.execute(
        update(Candidate)
        .where(Candidate.id == pick.scalar_subquery(), Candidate.status == Status.QUEUED)
        .values(
            status=Status.RUNNING,
            lease_token=token,
            leased_until=now + timedelta(seconds=lease_seconds),
            worker=worker,
            attempts=Candidate.attempts + 1,
            started_at=now,  # the last start: queued_seconds and run_seconds are of the attempt that ran
        )
        .returning(
            Candidate.id,
            Candidate.spec,
            Candidate.options,
            Candidate.device,
            Candidate.attempts,
            Candidate.max_attempts,
            Candidate.leased_until,
        )
    ).one_or_none()
    if row is None:
        return None
    return Job(
        id=row.id,
        spec=row.spec,
        options=row.options,
        device=row.device,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        lease_token=token,
        leased_until=row.leased_until,
    )


def _owners_running() -> Any:
    """For the queued job being ranked, the fewest running jobs of any owner still holding it
    (0 when it has no holder, as jobs queued straight into the table do). A running job counts
    for the owners who still want it: one who cancelled it waits for nothing that runs."""
    running = aliased(Candidate)
    holder = aliased(OwnedCandidate)
    per_owner = (
        select(holder.owner_id, func.count().label("jobs"))
        .join(running, running.id == holder.candidate_id)
        .where(running.status == Status.RUNNING, holder.cancelled_at.is_(None))
        .group_by(holder.owner_id)
        .subquery("running_per_owner")
    )
    fewest = (
        select(func.min(func.coalesce(per_owner.c.jobs, 0)))
        .select_from(OwnedCandidate)
        .outerjoin(per_owner, per_owner.c.owner_id == OwnedCandidate.owner_id)
        .where(OwnedCandidate.candidate_id == Candidate.id, OwnedCandidate.cancelled_at.is_(None))
        .scalar_subquery()
    )
    return func.coalesce(fewest, 0)


def _held(job_id: int, token: str) -> Iterable[Any]:
    return (Candidate.id == job_id, Candidate.lease_token == token, Candidate.status == Status.RUNNING)


def heartbeat(session: Session, *, job_id: int, token: str, lease_seconds: float) -> bool:
    """Extend the lease; False when the job is no longer this worker's (cancelled or lost)."""
    result = session.execute(
        update(Candidate)
        .where(*_held(job_id, token))
        .values(leased_until=db_now(session) + timedelta(seconds=lease_seconds))
    )
    return _rowcount(result) == 1


def complete(session: Session, *, job_id: int, token: str, report: ConditioningReport) -> bool:
    """Store the report, its rows and the status ``done``, in the caller's one transaction.

    Returns False (and writes nothing) when the lease is no longer held.
    """
    result = session.execute(
        update(Candidate)
        .where(*_held(job_id, token))
        .values(
            status=Status.DONE,
            report=finite(report.model_dump(mode="json")),
            score=finite_or_none(report.score),
            verdict=report.verdict,
            tuning_seconds=finite_or_none(report.tuning.seconds),
            error=None,
            lease_token=None,
            leased_until=None,
            finished_at=db_now(session),
        )
    )
    if _rowcount(result) != 1:
        return False
    for model in (BlockFigure, LayerFigure, ScaleFactor):
        session.execute(delete(model).where(model.candidate_id == job_id))
    blocks = [
        {
            "candidate_id": job_id,
            "block_index": block.index,
            **{
                key: finite_or_none(getattr(block, key)) for key in ("apjn_before", "apjn_after", "k_before", "k_after")
            },
        }
        for block in report.blocks
    ]
    layers = [
        {"candidate_id": job_id, "name": layer.name, **{key: getattr(layer, key) for key in _LAYER_FIELDS}}
        for layer in report.layers
    ]
    scales = [
        {"candidate_id": job_id, "parameter": name, "multiplier": finite_or_none(value)}
        for name, value in report.scales.items()
        if finite_or_none(value) is not None
    ]
    for model, rows in ((BlockFigure, blocks), (LayerFigure, layers), (ScaleFactor, scales)):
        if rows:
            session.execute(insert(model), rows)
    return True


def fail(session: Session, *, job_id: int, token: str, error: str, retry: bool = True) -> Status | None:
    """Record a failed attempt: back to ``queued`` while attempts remain (and ``retry``), else
    ``failed``. Returns the new status, or None when the lease is no longer held."""
    final = case((Candidate.attempts >= Candidate.max_attempts, Status.FAILED.value), else_=Status.QUEUED.value)
    now = db_now(session)
    row = session.execute(
        update(Candidate)
        .where(*_held(job_id, token))
        .values(
            status=final if retry else Status.FAILED.value,
            error=error[:4000],
            lease_token=None,
            leased_until=None,
            finished_at=case((final == Status.FAILED.value, now), else_=None) if retry else now,
        )
        .returning(Candidate.status)
    ).one_or_none()
    return None if row is None else Status(row.status)


def release(session: Session, *, job_id: int, token: str) -> bool:
    """Give a job back untouched (worker shutting down): queued again, the attempt not counted."""
    result = session.execute(
        update(Candidate)
        .where(*_held(job_id, token))
        .values(status=Status.QUEUED, attempts=Candidate.attempts - 1, lease_token=None, leased_until=None)
    )
    return _rowcount(result) == 1


def reap(session: Session) -> int:
    """Put running jobs whose lease expired back in the queue (or fail them when they have
    used up their attempts), by the database's clock. Returns how many rows it changed."""
    now = db_now(session)
    exhausted = Candidate.attempts >= Candidate.max_attempts
    result = session.execute(
        update(Candidate)
        .where(Candidate.status == Status.RUNNING, Candidate.leased_until < now)
        .values(
            status=case((exhausted, Status.FAILED.value), else_=Status.QUEUED.value),
            error=case(
                (exhausted, "lease expired on the last attempt (worker killed or lost?)"),
                else_=Candidate.error,
            ),
            finished_at=case((exhausted, now), else_=None),
            lease_token=None,
            leased_until=None,
        )
    )
    return _rowcount(result)


def _cancelling(session: Session, *where: ColumnElement[bool]) -> Any:
    """The UPDATE that cancels the queued or running jobs ``where`` picks, dropping their leases."""
    return (
        update(Candidate)
        .where(*where, Candidate.status.in_([Status.QUEUED, Status.RUNNING]))
        .values(status=Status.CANCELLED, lease_token=None, leased_until=None, finished_at=db_now(session))
    )


def cancel(session: Session, *, job_id: int) -> Status | None:
    """Cancel a queued or running job; returns the status it has afterwards (None: no such id)."""
    row = session.execute(_cancelling(session, Candidate.id == job_id).returning(Candidate.status)).one_or_none()
    if row is not None:
        return Status(row.status)
    status = session.scalar(select(Candidate.status).where(Candidate.id == job_id))
    return None if status is None else Status(status)


def cancel_many(session: Session, *, job_ids: Sequence[int]) -> int:
    """Cancel those of these jobs that are queued or running, in one statement; returns how many."""
    result = session.execute(
        _cancelling(session, Candidate.id.in_(job_ids)).execution_options(synchronize_session=False)
    )
    return _rowcount(result)


def queue_depth(session: Session) -> dict[Status, int]:
    """How many candidates are in each status."""
    counts: dict[str, int] = {
        str(status): int(count)
        for status, count in session.execute(select(Candidate.status, func.count()).group_by(Candidate.status))
    }
    return {status: counts.get(status.value, 0) for status in Status}


@dataclass(frozen=True)
class Backlog:
    """The work a worker of one engine revision sees in the queue (``backlog``)."""

    claimable: int  # queued under its own revision (or before revisions were recorded), for its device kind
    running: int  # leased by any worker
    foreign: int  # queued under another revision: never its to claim


def backlog(session: Session, engine: str | None = None, device_kind: str | None = None) -> Backlog:
    """The queue as a worker of revision ``engine`` (this process's when None) and device kind
    ``device_kind`` (any when None) sees it, in one query: what it could still claim, what runs,
    and what waits for a worker of another release. A job that asks for another device kind is
    not claimable: a burst worker on a CPU stops although a ``cuda`` job waits."""
    mine = engine or engine_revision()
    queued = Candidate.status == Status.QUEUED
    foreign = and_(queued, Candidate.engine.is_not(None), Candidate.engine != mine)
    mine_to_run = (
        not_(foreign) if device_kind is None else and_(not_(foreign), Candidate.device.in_(DEVICE_KINDS[device_kind]))
    )

    def _count(condition: ColumnElement[bool]) -> ColumnElement[int]:
        return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

    row = session.execute(
        select(_count(and_(queued, mine_to_run)), _count(Candidate.status == Status.RUNNING), _count(foreign))
    ).one()
    claimable, running, foreign_queued = (int(n) for n in row)
    return Backlog(claimable=claimable, running=running, foreign=foreign_queued)


def _rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched (what every statement here asks of its result)."""
    return cast(CursorResult[Any], result).rowcount

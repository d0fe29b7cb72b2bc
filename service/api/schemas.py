"""Request and response bodies of the REST API, one family per resource (Create, Public)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    field_validator,
)
from sqlalchemy import Row

from nas.spec import storable_text
from service.store.models import STUDY_NAME_LENGTH, Status

__all__ = [
    "CandidateBatchCreate",
    "CandidateBatchPublic",
    "CandidateCreate",
    "CandidateList",
    "CandidateOptions",
    "CandidatePublic",
    "CandidateSubmission",
    "ScoreSummary",
    "StudySummary",
    "Timings",
]


class CandidateOptions(BaseModel):
    """How to tune and schedule. ``study``, ``trial``, ``priority`` and ``device`` schedule
    the job; every other key is a tuning option of the engine (``loss``, ``steps``,
    ``n_vectors``, ``batch_size``, ``seed``, ...) and, with the canonical spec, the cache key.
    """

    model_config = ConfigDict(extra="allow")

    # the length on the string itself: on the optional field pydantic counted "items", not characters
    study: (
        Annotated[str, StringConstraints(min_length=1, max_length=STUDY_NAME_LENGTH), AfterValidator(storable_text)]
        | None
    ) = None
    # strict, as the tuning options' counts are: "11", 11.0 and true are refused, not read as numbers
    trial: int | None = Field(None, ge=0, le=2**62, strict=True)
    priority: int = Field(
        0,
        strict=True,
        ge=-1000,
        le=1000,
        description=(
            "higher runs first among the jobs of owners equally busy (owners share the workers fairly first);"
            " a token that is not admin gets at most PREFLIGHT_MAX_TOKEN_PRIORITY"
        ),
    )
    device: str = Field(
        "auto",
        max_length=9,
        description="auto (any worker), cpu (CPU workers only) or cuda[:N] (GPU workers only)",
        json_schema_extra={"pattern": r"^(auto|cpu|cuda(:[0-9]{1,3})?)$"},
    )

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:[0-9]{1,3})?", device):  # \d took "cuda:١٢" and "cuda:１"
            raise ValueError(f"device must be one of 'auto', 'cpu', 'cuda' or 'cuda:N' (N = 0-999), not {device!r}")
        return device


class CandidateCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: dict[str, Any] = Field(description="an architecture spec, format 1.0 or 1.1 (GET /v1/schema)")
    options: CandidateOptions = Field(default_factory=CandidateOptions)


class CandidateBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    specs: list[dict[str, Any]] = Field(min_length=1, description="architecture specs v1")
    options: CandidateOptions = Field(default_factory=CandidateOptions)


def _submission_kind(value: Any) -> str:
    return "batch" if isinstance(value, dict) and "specs" in value else "one"


# The body of POST /v1/candidates: {"spec": ...} or {"specs": [...]}, told apart by key.
SUBMISSION_TAGS = frozenset({"one", "batch"})
CandidateSubmission = Annotated[
    Annotated[CandidateCreate, Tag("one")] | Annotated[CandidateBatchCreate, Tag("batch")],
    Discriminator(_submission_kind),
]


class Timings(BaseModel):
    """A token that is not admin sees a shared job's times from its own submission on (docs/service.md)."""

    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    queued_seconds: float | None = Field(None, description="from creation to the last start")
    run_seconds: float | None = Field(None, description="from the last start to the end")
    tuning_seconds: float | None = Field(None, description="the engine's own measure")


class CandidatePublic(BaseModel):
    """A candidate as its owner sees it and, once done, its conditioning report. Owners that
    submit the same network share the job and its report, each under its own id."""

    id: str = Field(description="opaque (128 random bits); each owner has its own id for a shared candidate")
    status: Status
    spec_hash: str
    study: str | None = Field(
        None,
        description="the study of this owner's first submission (of its last, once it cancelled and submitted again)",
    )
    trial: int | None = None
    priority: int = Field(
        description=(
            "this owner's first submission's (its last's, once it cancelled and submitted again), capped for a token; "
            "a shared job keeps its first owner's"
        )
    )
    device: str
    options: dict[str, Any]
    engine: str | None = Field(
        None,
        description="the engine revision the job is keyed under and computed by; a new release recomputes "
        "(null: queued before revisions were recorded)",
    )
    attempts: int
    worker: str | None = Field(
        None, description="the worker's host:pid:device, shown to an admin token (and with auth off)"
    )
    error: str | None = None
    score: float | None = None
    verdict: str | None = None
    timings: Timings
    cached: bool | None = Field(None, description="on submission: true when it already existed")
    report: dict[str, Any] | None = None

    @classmethod
    def of(
        cls, row: Row[Any], *, with_report: bool = True, cached: bool | None = None, tenant: bool = False
    ) -> CandidatePublic:
        """From a row of ``service.store.reports``' owner view (a candidate's attribute names).
        The result (score, verdict, report) is shown with ``done`` only: an owner that cancelled
        its submission of a job that ran on for others sees it cancelled, as before tenancy.

        A ``tenant`` (a token that is not admin) sees a shared job as its own submission saw it,
        not when another tenant queued, started or finished it: its timings start at its own
        submission (a result that existed then started and finished at it, for this owner), and
        no ``worker`` (the operator's host and pid). An admin and the anonymous owner see the job's."""
        created, started, finished, worker = row.created_at, row.started_at, row.finished_at, row.worker
        if tenant:
            created, worker = row.owned_at, None
            started = None if started is None else max(started, created)
            finished = None if finished is None else max(finished, created)
            if started is not None and finished is not None and started > finished:
                started = None  # it cancelled before the job started (for the owners that still wanted it)
        end = finished if finished is not None else None
        status = Status(row.status)
        done = status is Status.DONE
        return cls(
            id=row.id,
            status=status,
            spec_hash=row.spec_hash,
            study=row.study,
            trial=row.trial,
            priority=row.priority,
            device=row.device,
            options=row.options,
            engine=row.engine,
            attempts=row.attempts,
            worker=worker,
            error=row.error,
            score=row.score if done else None,
            verdict=row.verdict if done else None,
            timings=Timings(
                created_at=_utc(created),
                started_at=_utc(started),
                finished_at=_utc(finished),
                queued_seconds=_seconds(created, started),
                run_seconds=_seconds(started, end),
                tuning_seconds=row.tuning_seconds if done else None,
            ),
            cached=cached,
            report=row.report if with_report and done else None,
        )


class CandidateBatchPublic(BaseModel):
    candidates: list[CandidatePublic]


class CandidateList(BaseModel):
    candidates: list[CandidatePublic]
    next_cursor: str | None = Field(None, description="pass as ?cursor= for the next page")


class ScoreSummary(BaseModel):
    count: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    quantiles: dict[str, float] = Field(
        default_factory=dict,
        description="quantile (as text, e.g. '0.25') -> score, linear interpolation",
    )


class StudySummary(BaseModel):
    study: str
    total: int
    counts: dict[Status, int]
    verdicts: dict[str, int]
    scores: ScoreSummary


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.replace(tzinfo=UTC)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())

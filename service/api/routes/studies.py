"""/v1/studies/{study}/summary: what a pruner needs for percentile rules.

A study is its owner's (``service.store.owners``): two tokens' studies of one name are two
studies, and a token's summary covers its own submissions only (an admin's, every owner's)."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.convertors import PathConvertor, register_url_convertor

from nas.spec import quote_short, storable_text
from service.api.deps import AuthDep, CallerDep, SessionDep
from service.api.problems import UNAUTHORIZED, Problem, ProblemError
from service.api.route_table import STUDY_NAME_PATTERN
from service.api.schemas import ScoreSummary, StudySummary
from service.api.strict_query import StrictQueryDep
from service.store.models import STUDY_NAME_LENGTH, Status
from service.store.reports import study_figures

__all__ = ["quantile", "router"]

router = APIRouter(
    prefix="/v1/studies",
    tags=["studies"],
    dependencies=[AuthDep, StrictQueryDep],
    responses={
        **UNAUTHORIZED,
        422: {"model": Problem, "description": "invalid request"},
    },
)

DEFAULT_QUANTILES = [0.1, 0.25, 0.5, 0.75, 0.9]


class _StudyNameConvertor(PathConvertor):
    """Any study name Optuna takes: "/" (the router decodes %2F before matching, as ``path``
    does) and line breaks, which ``path``'s ``.*`` does not match: a study named "a\nb" was
    stored but its summary was a 404."""

    regex = STUDY_NAME_PATTERN


register_url_convertor("study", _StudyNameConvertor())


def quantile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); ``ordered`` is sorted,
    non-empty and finite."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@router.get(
    "/{study:study}/summary",
    summary="Counts by status and verdict, score quantiles",
    responses={404: {"model": Problem, "description": "the caller's token submitted nothing in this study"}},
)
def study_summary(
    study: Annotated[str, Path(max_length=STUDY_NAME_LENGTH)],
    session: SessionDep,
    caller: CallerDep,
    q: Annotated[list[float] | None, Query(description="quantiles in [0, 1]; repeat the parameter")] = None,
) -> StudySummary:
    """Candidates a study submitted (each counted once, however often it was submitted).
    Scores are of done candidates. A study in which the caller's token submitted nothing is
    404 (another token's study is not told apart from none); with auth off, zero counts."""
    try:
        storable_text(study)
    except ValueError as error:
        raise ProblemError.at("path.study", f"study name {error}") from None
    quantiles = [value + 0.0 for value in q] if q else DEFAULT_QUANTILES  # -0.0 + 0.0 is 0.0: one key "0.0"
    for i, value in enumerate(quantiles):
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ProblemError.at(f"query.q[{i}]", f"quantile {value} is outside [0, 1]")
    figures = study_figures(session, study=study, caller=caller)
    counts, verdicts, scores = figures.counts, figures.verdicts, figures.scores
    if not counts and not caller.anonymous:
        raise ProblemError(404, f"no study named {quote_short(study)}", kind="not-found")
    summary = ScoreSummary(count=len(scores))
    if scores:
        summary = ScoreSummary(
            count=len(scores),
            min=scores[0],
            max=scores[-1],
            mean=math.fsum(scores) / len(scores),
            quantiles={repr(float(value)): quantile(scores, value) for value in quantiles},
        )
    return StudySummary(
        study=study,
        total=sum(counts.values()),
        counts={status: int(counts.get(status.value, 0)) for status in Status},
        verdicts={str(k): int(v) for k, v in verdicts.items()},
        scores=summary,
    )

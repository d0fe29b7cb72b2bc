"""/v1/candidates: submit (one or a batch), read, long-poll, list, cancel.

Each is scoped to the caller (``service.store.owners``): a token reads, lists and cancels its
own candidates only (another's answer 404, like an id that never existed), an admin token
every owner's. Ids are opaque, one per owner even when owners share a candidate's job."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlalchemy import Engine, Row
from sqlalchemy.orm import Session, sessionmaker

from nas import SpecError, SpecLimits, spec_hash
from nas.canonical import key_options
from nas.report import Verdict
from nas.spec import storable_text
from nas.validate import conditioning_issue, count_layers, job_limit_issue, parse_and_trace, unlabelled_probe_issue
from service.api.auth import auth_required_for, authenticate, bearer_token
from service.api.deps import (
    AuthDep,
    CallerDep,
    CommitterDep,
    EngineDep,
    SessionDep,
    SessionsDep,
    SettingsDep,
    SpecLimitsDep,
    TokensDep,
    WaitsDep,
)
from service.api.json_body import StrictJSONRoute
from service.api.problems import MAX_ISSUES, NOT_JSON, UNAUTHORIZED, Problem, ProblemError, ProblemIssue
from service.api.schemas import (
    CandidateBatchCreate,
    CandidateBatchPublic,
    CandidateList,
    CandidateOptions,
    CandidatePublic,
    CandidateSubmission,
)
from service.api.strict_query import StrictQueryDep
from service.api.tuning import DATA, canonical_tuning_options
from service.store import data_batches, jobs, reports
from service.store.db import read_connection, session_scope
from service.store.models import STUDY_NAME_LENGTH, Status
from service.store.owners import ANONYMOUS_OWNER, Caller, capped_priority, is_public_id

__all__ = ["router"]

router = APIRouter(
    route_class=StrictJSONRoute,  # a body naming a key twice is refused, not read last-wins
    prefix="/v1/candidates",
    tags=["candidates"],
    dependencies=[AuthDep, StrictQueryDep],
    responses={
        **UNAUTHORIZED,
        413: {"model": Problem, "description": "request body too large"},
        422: {"model": Problem, "description": "invalid spec or request"},
    },
)

# Ids are 32 hex characters; anything else is no candidate (404) and is never looked up.
CandidateId = Annotated[str, Path(description="the candidate's id, as the submission answered it")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem, "description": "no candidate with this id"}}
_SUBMIT_EXAMPLES = {
    "one": {
        "summary": "one spec",
        "value": {
            "spec": {"input_shape": [16], "blocks": [{"layers": [{"type": "linear", "out": 8}, {"type": "relu"}]}]},
            "options": {"study": "demo", "trial": 0},
        },
    },
    "batch": {
        "summary": "a batch",
        "value": {
            "specs": [{"input_shape": [16], "blocks": [{"layers": [{"type": "linear", "out": 8}]}]}],
            "options": {"study": "demo"},
        },
    },
}


# A long-poll checks its token again this often (a cache hit until token_cache_seconds pass).
_RECHECK_SECONDS = 1.0

# Batches up to this size are validated on the event loop, larger ones in the thread pool.
_INLINE_VALIDATION = 4
_INLINE_LAYERS = 256


def _device_class(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu" if device == "cpu" else "any"


def _new_candidates(
    specs: list[dict[str, Any]],
    tuning: dict[str, Any],
    options: CandidateOptions,
    *,
    batch: bool,
    limits: SpecLimits | None = None,
    data_shape: data_batches.BatchShape | None = None,
    owner_id: int = ANONYMOUS_OWNER,
    priority: int | None = None,
) -> list[jobs.NewCandidate]:
    """Validate every spec (all or nothing) against the canonical tuning options and the
    data batch they name, before anything is queued; ``priority`` (the capped one) replaces
    the options'."""
    out, refusals = [], []
    for index, data in enumerate(specs):
        field = f"specs[{index}]" if batch else "spec"
        try:
            out.append(_new_candidate(data, field, tuning, options, batch, limits, data_shape, owner_id, priority))
        except ProblemError as refusal:
            if not batch:
                raise
            refusals.append(refusal)
    if refusals:
        raise _batch_refusal(refusals, len(specs))
    return out


def _new_candidate(
    data: dict[str, Any],
    field: str,
    tuning: dict[str, Any],
    options: CandidateOptions,
    batch: bool,
    limits: SpecLimits | None,
    data_shape: data_batches.BatchShape | None,
    owner_id: int,
    priority: int | None,
) -> jobs.NewCandidate:
    """One spec validated and keyed, or a :class:`ProblemError` naming it at ``field``."""
    try:
        spec, trace = parse_and_trace(data, limits)
    except SpecError as exc:
        raise ProblemError.from_spec_error(exc, field=field) from None
    if reason := conditioning_issue(trace):
        raise ProblemError.from_spec_error(SpecError.at("blocks", reason), field=field)
    unlabelled = data_shape is None or data_shape.get("labels") is None
    if unlabelled and tuning["probe_steps"] and (reason := unlabelled_probe_issue(trace)):
        raise ProblemError.from_spec_error(SpecError.at(f"blocks[{len(spec.blocks) - 1}]", reason), field=field)
    if issue := job_limit_issue(trace, tuning, limits or SpecLimits()):
        path, message = issue
        if path == "spec":
            path = field
        elif batch:  # this spec's job at these options: the spec is at fault, so a client can drop it
            path, message = field, f"at {path}: {message}"
        raise ProblemError(
            422, f"{path}: {message}", kind="too-large", errors=[ProblemIssue(path=path, message=message)]
        )
    if data_shape is not None:
        try:
            data_batches.check_fits(data_shape, spec, field)
        except data_batches.InvalidBatch as exc:
            raise ProblemError.from_invalid_batch(exc) from None
    return jobs.NewCandidate(
        spec=spec.model_dump(mode="json", exclude_none=True, by_alias=True),  # "from", as documented
        spec_hash=spec_hash(spec),
        options=key_options(spec, tuning),
        study=options.study,
        trial=options.trial,
        device=_device_class(options.device),
        priority=options.priority if priority is None else priority,
        owner_id=owner_id,
    )


def _batch_refusal(refusals: list[ProblemError], count: int) -> ProblemError:
    """Every refused spec of a batch in one problem, so a client drops them all in one go (the
    gate's prescreen sent a batch again per refused spec). Each listed spec's issues are whole:
    a spec whose issues would pass ``MAX_ISSUES`` is left for the next request, which names it."""
    if len(refusals) == 1:
        return refusals[0]
    issues: list[ProblemIssue] = []
    listed = 0
    for refusal in refusals:
        errors = refusal.errors or []
        if listed and len(issues) + len(errors) > MAX_ISSUES:
            break
        issues += errors  # bounded already, the first spec's too
        listed += 1
    kinds = {refusal.kind for refusal in refusals}
    more = f"; {len(refusals) - listed} more not listed" if listed < len(refusals) else ""
    detail = f"{len(refusals)} of {count} specs refused{more}: {refusals[0].detail}"
    return ProblemError(422, detail, kind=kinds.pop() if len(kinds) == 1 else "invalid-spec", errors=issues)


def _batch_shape(engine: Engine, key: str, caller: Caller) -> data_batches.BatchShape | None:
    with read_connection(engine) as connection:
        return data_batches.shape_of(connection, key, caller)


def _json(model: BaseModel, status_code: int = 200) -> Response:
    """The model's JSON, sent as is: it was built from the row, so FastAPI's second
    validation of the response model (which walks the whole report) is skipped."""
    return Response(model.model_dump_json(), status_code=status_code, media_type="application/json")


@router.post(
    "",
    status_code=202,
    response_model=CandidatePublic | CandidateBatchPublic,
    summary="Submit one candidate ({spec, options}) or a batch ({specs, options})",
    responses=NOT_JSON,
)
async def submit_candidates(
    settings: SettingsDep,
    engine: EngineDep,
    committer: CommitterDep,
    limits: SpecLimitsDep,
    caller: CallerDep,
    body: Annotated[CandidateSubmission, Body(openapi_examples=_SUBMIT_EXAMPLES)],
) -> Response:
    """Queue candidates for conditioning. The same canonical spec with the same tuning
    options is never tuned twice: its existing job is shared (``cached: true``), with its
    report when it is done, under the caller's own id. A token that is not admin gets at
    most priority ``PREFLIGHT_MAX_TOKEN_PRIORITY``, and holds at most
    ``PREFLIGHT_MAX_QUEUED_PER_OWNER`` queued or running submissions (a 429 beyond, nothing stored)."""
    batch = isinstance(body, CandidateBatchCreate)
    specs = body.specs if isinstance(body, CandidateBatchCreate) else [body.spec]
    if len(specs) > settings.max_batch:
        raise ProblemError(
            413,
            f"{len(specs)} specs in one batch exceed the limit of {settings.max_batch} (setting PREFLIGHT_MAX_BATCH)",
            kind="too-large",
        )
    # Validation is pure CPU, tens of microseconds for a small spec: a few specs are checked
    # on the event loop, a larger batch in the thread pool. The write goes to the process's
    # group commit, which answers once the rows are durable.
    tuning = canonical_tuning_options(dict(body.options.model_extra or {}))
    data_shape = None
    if DATA in tuning:  # a data batch: it must exist, and fit every spec's input shape
        data_shape = await run_in_threadpool(_batch_shape, engine, tuning[DATA], caller)
        if data_shape is None:
            raise ProblemError(
                422,
                f"options.{DATA}: no data batch with id {tuning[DATA]} (upload it with POST /v1/batches)",
                kind="invalid-request",
                errors=[ProblemIssue(path=f"options.{DATA}", message="no such data batch")],
            )
        try:
            data_batches.check_batch_size(data_shape, tuning["batch_size"])
        except data_batches.InvalidBatch as exc:
            raise ProblemError.from_invalid_batch(exc) from None
    priority = capped_priority(body.options.priority, caller, settings.max_token_priority)

    def validate() -> list[jobs.NewCandidate]:
        return _new_candidates(
            specs,
            tuning,
            body.options,
            batch=batch,
            limits=limits,
            data_shape=data_shape,
            owner_id=caller.owner_id,
            priority=priority,
        )

    # inline only when small: a few specs of a few hundred layers; anything larger is validated in
    # the thread pool, so a 4 MB spec never holds the event loop (and /healthz) for seconds
    if len(specs) <= _INLINE_VALIDATION and all(count_layers(s, _INLINE_LAYERS) <= _INLINE_LAYERS for s in specs):
        new = validate()
    else:
        new = await run_in_threadpool(validate)
    quota = 0 if caller.admin else settings.max_queued_per_owner
    if quota:
        _check_quota(*await run_in_threadpool(_work_held_and_added, engine, caller, new, quota), quota)
    submitted = await committer.submit(new)
    public = [CandidatePublic.of(s.row, cached=not s.created, tenant=not caller.admin) for s in submitted]
    return _json(CandidateBatchPublic(candidates=public) if batch else public[0], 202)


def _work_held_and_added(engine: Engine, caller: Caller, new: list[jobs.NewCandidate], quota: int) -> tuple[int, int]:
    """The caller's queued or running submissions (counted up to ``quota``), and how many of them
    ``new`` would add: a spec it already holds unfinished, or a finished result, adds none."""
    with read_connection(engine) as connection:
        held = reports.unfinished_count(connection, owner_id=caller.owner_id, limit=quota)
        keys = {candidate.cache_key for candidate in new}
        return held, len(keys) - reports.adding_nothing(connection, owner_id=caller.owner_id, cache_keys=keys)


def _check_quota(held: int, added: int, quota: int) -> None:
    """A 413 for a submission that could never fit the token's quota, a 429 for one that fits once
    its queued work drains (``condition`` and the gate ride that out)."""
    if added > quota:
        raise ProblemError(
            413,
            f"{added} new candidates in one submission exceed this token's quota of {quota} queued or running "
            "(setting PREFLIGHT_MAX_QUEUED_PER_OWNER): submit fewer at a time",
            kind="too-large",
        )
    if held + added > quota:
        raise ProblemError(
            429,
            f"this token holds {_at_least(held, quota)} queued or running candidates, and {added} more would pass its "
            f"quota of {quota} (setting PREFLIGHT_MAX_QUEUED_PER_OWNER): submit again as they finish",
            kind="too-many-requests",
            headers={"Retry-After": "10"},
        )


def _at_least(held: int, quota: int) -> str:
    """The count stops at the quota; concurrent submissions can pass it, so that is a lower bound."""
    return f"at least {held}" if held >= quota else str(held)


def _read_once(engine: Engine, candidate_id: str, caller: Caller) -> Row[Any] | None:
    """The hot path of clients polling for reports: one plain connection, no ORM session. An id
    that cannot be one is no candidate, without a query."""
    if not is_public_id(candidate_id):
        return None
    with read_connection(engine) as connection:
        return reports.owned_candidate(connection, public_id=candidate_id, caller=caller)


@router.get(
    "/{candidate_id}",
    response_model=CandidatePublic,
    responses=_NOT_FOUND,
    summary="A candidate and its report",
)
async def get_candidate(engine: EngineDep, caller: CallerDep, candidate_id: CandidateId) -> Response:
    # async, with the one blocking read in the thread pool: one hop per request, not three
    row = await run_in_threadpool(_read_once, engine, candidate_id, caller)
    if row is None:
        raise ProblemError.not_found("candidate", candidate_id)
    return _json(CandidatePublic.of(row, tenant=not caller.admin))


@router.get(
    "/{candidate_id}/wait",
    response_model=CandidatePublic,
    responses=_NOT_FOUND,
    summary="Long-poll until final or timeout",
)
async def wait_for_candidate(
    request: Request,
    candidate_id: CandidateId,
    settings: SettingsDep,
    engine: EngineDep,
    caller: CallerDep,
    tokens: TokensDep,
    waits: WaitsDep,
    timeout: Annotated[
        float, Query(ge=0, le=3600, allow_inf_nan=False, description="seconds; capped by the server")
    ] = 30.0,
) -> Response:
    """Answer when the candidate is done, failed or cancelled, or when ``timeout`` seconds
    have passed (then with its current status). Polls the store; costs no worker time. An owner
    holds at most ``PREFLIGHT_MAX_WAITS_PER_OWNER`` open in this process (429 beyond)."""
    if waits[caller.owner_id] >= settings.max_waits_per_owner:
        raise ProblemError(
            429,
            f"{waits[caller.owner_id]} long-polls of this token are open, its most (setting "
            "PREFLIGHT_MAX_WAITS_PER_OWNER): retry when one has answered",
            kind="too-many-requests",
            headers={"Retry-After": "1"},
        )
    waits[caller.owner_id] += 1
    try:
        return await _wait(request, candidate_id, settings, engine, caller, tokens, timeout)
    finally:
        waits[caller.owner_id] -= 1
        if not waits[caller.owner_id]:
            del waits[caller.owner_id]


async def _wait(
    request: Request, candidate_id: str, settings: Any, engine: Any, caller: Caller, tokens: Any, timeout: float
) -> Response:
    deadline = time.monotonic() + min(timeout, settings.max_wait_seconds)
    interval = 0.05
    checked = time.monotonic()
    while True:
        if auth_required_for(settings, request.scope) and time.monotonic() - checked >= _RECHECK_SECONDS:
            # a token revoked while its wait runs is refused within token_cache_seconds, as documented
            await authenticate(tokens, bearer_token(request.headers.getlist("authorization")))
            checked = time.monotonic()
        row = await run_in_threadpool(_read_once, engine, candidate_id, caller)
        if row is None:
            raise ProblemError.not_found("candidate", candidate_id)
        left = deadline - time.monotonic()
        if Status(row.status).is_final or left <= 0 or await request.is_disconnected():
            return _json(CandidatePublic.of(row, tenant=not caller.admin))
        await asyncio.sleep(min(interval, left))
        interval = min(interval * 1.5, 0.5)


def _resume_after(session: Session, cursor: str, caller: Caller) -> int:
    """The row a page resumes after. A cursor is the last listed candidate's public id, which says
    nothing the caller has not seen: the store's sequential row ids (the cursor was one) told a
    tenant how many candidates others had submitted between two pages."""
    row_id = reports.owned_row_id(session, public_id=cursor, caller=caller) if is_public_id(cursor) else None
    if row_id is None:
        raise ProblemError.at("query.cursor", "invalid cursor; pass next_cursor from the previous page")
    return row_id


@router.get("", summary="List candidates, oldest first, with cursor pagination")
def list_candidates(
    session: SessionDep,
    settings: SettingsDep,
    caller: CallerDep,
    study: Annotated[str | None, Query(min_length=1, max_length=STUDY_NAME_LENGTH)] = None,
    status: Status | None = None,
    verdict: Verdict | None = None,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    cursor: Annotated[str | None, Query(max_length=100)] = None,
    include_report: bool = False,
) -> CandidateList:
    page = limit or settings.page_size
    if study is not None:
        try:
            storable_text(study)
        except ValueError as error:  # a NUL or a lone surrogate: no database can be asked for it
            raise ProblemError.at("query.study", f"study {error}") from None
    after_id = _resume_after(session, cursor, caller) if cursor is not None else None
    rows = list(
        reports.list_candidates(
            session, caller=caller, limit=page + 1, study=study, status=status, verdict=verdict, after_id=after_id
        )
    )
    more = len(rows) > page
    rows = rows[:page]
    return CandidateList(
        candidates=[CandidatePublic.of(row, with_report=include_report, tenant=not caller.admin) for row in rows],
        next_cursor=rows[-1].id if more and rows else None,
    )


@router.delete(
    "/{candidate_id}",
    response_model=CandidatePublic,
    responses={**_NOT_FOUND, 409: {"model": Problem, "description": "already done or failed"}},
    summary="Cancel a queued or running candidate",
)
async def cancel_candidate(sessions: SessionsDep, caller: CallerDep, candidate_id: CandidateId) -> Response:
    """Cancel the caller's submission. The job stops when no other owner that submitted the
    same candidate still wants it (a running job's worker notices at its next heartbeat and
    drops its work); otherwise it runs on for them."""
    # The whole write transaction runs in one thread-pool hop: on SQLite it holds the
    # process's write lock, and a lock held across hops (dependency, then endpoint) lets a
    # few concurrent cancels take every thread while the holder waits for one.
    status, row = (
        (None, None)
        if not is_public_id(candidate_id)
        else await run_in_threadpool(_cancel, sessions, candidate_id, caller)
    )
    if status is None:
        raise ProblemError.not_found("candidate", candidate_id)
    if status in (Status.DONE, Status.FAILED):
        raise ProblemError(
            409,
            f"candidate {candidate_id} is already {status.value}; nothing to cancel",
            kind="conflict",
        )
    assert row is not None
    return _json(CandidatePublic.of(row, tenant=not caller.admin))


def _cancel(
    sessions: sessionmaker[Session], candidate_id: str, caller: Caller
) -> tuple[Status | None, Row[Any] | None]:
    with session_scope(sessions, write=True) as session:
        return reports.cancel_owned(session, public_id=candidate_id, caller=caller)

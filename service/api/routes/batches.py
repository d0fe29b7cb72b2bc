"""/v1/batches: upload a data batch (inputs and optional labels) to condition candidates on, list
the batches held, and let one go.

A batch is its uploaders' (``service.store.owners``): another token reads it as absent (404)
and cannot name it in a submission; an admin token reads, lists and deletes every batch."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from service.api.deps import AuthDep, CallerDep, EngineDep, SessionsDep, SettingsDep
from service.api.json_body import StrictJSONRoute
from service.api.problems import NOT_JSON, UNAUTHORIZED, Problem, ProblemError
from service.api.strict_query import StrictQueryDep
from service.store import data_batches
from service.store.db import read_connection, session_scope
from service.store.owners import Caller

__all__ = ["DataBatchList", "DataBatchPublic", "router"]

router = APIRouter(
    route_class=StrictJSONRoute,
    prefix="/v1/batches",
    tags=["batches"],
    dependencies=[AuthDep, StrictQueryDep],
    responses={
        **UNAUTHORIZED,
        422: {"model": Problem, "description": "invalid batch or request"},
    },
)


class DataBatchPublic(BaseModel):
    id: str  # name it in a submission's options: {"data": id}
    shape: list[int]  # [N, *input_shape]
    labels: str | None  # "class" (integer targets), "float", or null (no labels)
    balance: float | None = None  # class labels: their entropy over ln(classes), 1 = balanced
    warnings: list[str] = []  # what the batch will make the report read wrong; it is stored all the same


class DataBatchList(BaseModel):
    batches: list[DataBatchPublic]  # in the order of their ids
    next_cursor: str | None  # pass as ?cursor= for the next page; null on the last


def _public(shape: data_batches.BatchShape, key: str) -> DataBatchPublic:
    return DataBatchPublic(
        id=key,
        shape=list(shape["x"]),
        labels=shape["labels"],
        balance=shape.get("balance"),
        warnings=data_batches.label_warnings(shape),
    )


def _store(sessions: sessionmaker[Session], body: Any, caller: Caller, quota: int) -> tuple[DataBatchPublic, bool]:
    try:
        x, y, shape = data_batches.parse(body)
    except data_batches.InvalidBatch as exc:
        raise ProblemError.from_invalid_batch(exc) from None
    try:
        with session_scope(sessions, write=True) as session:
            key, created = data_batches.store(session, x, y, shape, owner_id=caller.owner_id, quota=quota)
            return _public(shape, key), created
    except data_batches.BatchQuotaReached:
        raise ProblemError(
            409,
            f"this token holds at least {quota} data batches, its quota (setting PREFLIGHT_MAX_BATCHES_PER_OWNER), and "
            "this content is not one of them: name one it holds in the option data (uploading one of them "
            "again is free), delete one it no longer needs (DELETE /v1/batches/{id}, or the client's "
            "delete_batch; GET /v1/batches, or list_batches, lists them), or ask an admin for more",
            kind="conflict",
        ) from None


@router.post(
    "",
    status_code=201,
    response_model=DataBatchPublic,
    summary="Upload a data batch",
    responses={
        **NOT_JSON,
        409: {"model": Problem, "description": "the token holds PREFLIGHT_MAX_BATCHES_PER_OWNER batches already"},
        413: {"model": Problem, "description": "request body over PREFLIGHT_MAX_BATCH_BODY_BYTES"},
    },
)
async def upload_batch(
    sessions: SessionsDep, settings: SettingsDep, caller: CallerDep, body: Annotated[Any, Body()]
) -> Response:
    """Store ``{"x": [N, *input_shape], "y": [N]?}`` under the SHA-256 of its content as the
    engine reads it, in float32 (201; 200 when the caller had already uploaded that content:
    whether another token did is never told).
    Submissions name it with the option ``data``: the worker then conditions on these inputs
    and probes trainability on these labels, not on a Gaussian batch with random labels.
    A token that is not admin stores at most ``PREFLIGHT_MAX_BATCHES_PER_OWNER`` batches (409)."""
    quota = 0 if caller.admin else settings.max_batches_per_owner
    public, created = await run_in_threadpool(_store, sessions, body, caller, quota)
    return Response(public.model_dump_json(), status_code=201 if created else 200, media_type="application/json")


def _held(engine: Engine, caller: Caller, limit: int, after: str | None) -> list[tuple[str, data_batches.BatchShape]]:
    with read_connection(engine) as connection:
        return data_batches.held(connection, caller, limit=limit, after=after)


@router.get("", response_model=DataBatchList, summary="List the data batches the caller holds, by id")
async def list_batches(
    engine: EngineDep,
    settings: SettingsDep,
    caller: CallerDep,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    cursor: Annotated[str | None, Query(max_length=100)] = None,
) -> DataBatchList:
    """The batches the caller uploaded and still holds (an admin: every stored batch), in the order
    of their ids; a page resumes after ``cursor``, the last id of the page before."""
    if cursor is not None and not data_batches.is_batch_id(cursor):
        raise ProblemError.at("query.cursor", "invalid cursor; pass next_cursor from the previous page")
    page = limit or settings.page_size
    rows = await run_in_threadpool(_held, engine, caller, page + 1, cursor)
    more = len(rows) > page
    rows = rows[:page]
    return DataBatchList(
        batches=[_public(shape, key) for key, shape in rows], next_cursor=rows[-1][0] if more and rows else None
    )


def _shape(engine: Engine, key: str, caller: Caller) -> data_batches.BatchShape | None:
    with read_connection(engine) as connection:
        return data_batches.shape_of(connection, key, caller)


@router.get(
    "/{batch_id}",
    response_model=DataBatchPublic,
    responses={404: {"model": Problem, "description": "no data batch with this id that the caller uploaded"}},
    summary="A data batch's shape",
)
async def get_batch(engine: EngineDep, caller: CallerDep, batch_id: str) -> DataBatchPublic:
    shape = await run_in_threadpool(_shape, engine, batch_id, caller) if data_batches.is_batch_id(batch_id) else None
    if shape is None:
        raise ProblemError.not_found("data batch", batch_id)
    return _public(shape, batch_id)


def _release(sessions: sessionmaker[Session], key: str, caller: Caller) -> None:
    try:
        with session_scope(sessions, write=True) as session:
            released = data_batches.release(session, key, caller)
    except data_batches.BatchInUse as exc:
        one = exc.count == 1
        # an admin's count is of jobs (anyone's, each once), a token's of its own submissions
        what = (
            ("job" if one else "jobs") if caller.admin else ("submission" if one else "submissions") + " of this token"
        )
        raise ProblemError(
            409,
            f"{exc.count} queued or running {what} name{'s' if one else ''} data "
            f"batch {key} in the option data, and {'its job needs' if one else 'their jobs need'} it: wait for "
            f"{'it' if one else 'them'} to finish, or cancel {'it' if one else 'them'} (DELETE /v1/candidates/{{id}}), "
            "then delete the batch",
            kind="conflict",
        ) from None
    if not released:
        raise ProblemError.not_found("data batch", key)


@router.delete(
    "/{batch_id}",
    status_code=204,
    responses={
        404: {"model": Problem, "description": "no data batch with this id that the caller holds"},
        409: {
            "model": Problem,
            "description": "queued or running submissions of the caller (an admin: any queued or running job) name it",
        },
    },
    summary="Let go of a data batch",
)
async def delete_batch(sessions: SessionsDep, caller: CallerDep, batch_id: str) -> Response:
    """Remove the caller's hold on the batch, which frees a place in its quota: the batch no longer
    exists for this token (another token that uploaded it keeps it). The content is deleted with the
    last hold, unless a queued or running job (an admin's, which needs no hold) still names it. An
    admin token deletes the batch for every owner. Finished reports conditioned on it stay, and
    uploading the same content again gives the same id (a 201) and the same cached jobs."""
    if not data_batches.is_batch_id(batch_id):
        raise ProblemError.not_found("data batch", batch_id)
    await run_in_threadpool(_release, sessions, batch_id, caller)
    return Response(status_code=204)

"""Liveness, readiness, the spec JSON Schema and Prometheus metrics."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nas import spec_json_schema
from service.api.deps import AuthDep, EngineDep, MetricsDep, WorkerLivenessDep
from service.api.problems import RETRY_SOON, UNAUTHORIZED, Problem, ProblemError
from service.api.strict_query import StrictQueryDep
from service.store.db import ping
from service.store.migrations import MigrationsPending, check_current

__all__ = ["router"]

router = APIRouter(tags=["health"])

# The readiness probe's database check runs on a thread of its own: in the pool the routes share
# (PREFLIGHT_API_THREADS), one tenant's large batch validations held /readyz back for 26 s, and
# a container's healthcheck failed a service that was working. A daemon thread, one check at a
# time (probes that arrive meanwhile share it), answered within _PROBE_SECONDS: a database that
# hangs a connect makes /readyz a 503, and neither piles up threads nor holds the process at exit.
_PROBE_SECONDS = 10.0
_in_flight: dict[int, asyncio.Future[None]] = {}  # by id of the engine checked


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    """Answered on the event loop: no thread of the shared pool is needed to say the process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="The database is reachable, its schema at the latest migration, and an embedded worker able to take jobs",
    responses={503: {"model": Problem}},
)
async def readyz(engine: EngineDep, worker_liveness: WorkerLivenessDep) -> dict[str, str]:
    try:
        await asyncio.wait_for(asyncio.shield(_database_check(engine)), _PROBE_SECONDS)
    except TimeoutError:
        raise ProblemError(
            503, f"the database did not answer within {_PROBE_SECONDS:g} s", kind="not-ready", headers=RETRY_SOON
        ) from None
    except MigrationsPending as exc:
        raise ProblemError(503, str(exc), kind="not-ready", headers=RETRY_SOON) from None
    except Exception as exc:  # any driver error means: not ready
        raise ProblemError(
            503, f"database unreachable: {type(exc).__name__}", kind="not-ready", headers=RETRY_SOON
        ) from None
    if worker_liveness is not None and (reason := worker_liveness()):  # an embedded worker, when there is one
        raise ProblemError(503, f"the embedded worker cannot take jobs: {reason}", kind="not-ready", headers=RETRY_SOON)
    return {"status": "ready"}


def _database_check(engine: Any) -> asyncio.Future[None]:
    """The check in flight for this engine, or a new one on a daemon thread."""
    running = _in_flight.get(id(engine))
    if running is not None and not running.done():
        return running
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    future.add_done_callback(lambda done: done.cancelled() or done.exception())  # read, if a waiter timed out
    _in_flight[id(engine)] = future

    def settle(error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(None)

    def check() -> None:
        error: BaseException | None = None
        try:
            ping(engine)
            check_current(engine)
        except BaseException as exc:  # noqa: BLE001 - any failure is the probe's answer
            error = exc
        try:
            loop.call_soon_threadsafe(settle, error)
        except RuntimeError:  # the loop has closed meanwhile: nobody waits for the answer
            pass

    threading.Thread(target=check, name="preflight-readyz", daemon=True).start()
    return future


@router.get(
    "/v1/schema",
    summary="JSON Schema of the architecture spec (format 1.1)",
    tags=["spec"],
    dependencies=[AuthDep, StrictQueryDep],
    responses={
        **UNAUTHORIZED,
        422: {"model": Problem, "description": "a query parameter (it takes none)"},
    },
)
def schema() -> dict[str, Any]:
    """Behind the token like every ``/v1`` route (docs/service.md, Security)."""
    return spec_json_schema()


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    dependencies=[AuthDep],
    response_class=Response,
    responses=UNAUTHORIZED,
)
def metrics(metrics: MetricsDep) -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

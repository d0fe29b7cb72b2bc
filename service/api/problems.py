"""RFC 9457 problem details (``application/problem+json``) for every error the API returns.

Each error is ``{"type", "title", "status", "detail", "instance"}``; validation errors add
``errors: [{"path", "message"}]`` where ``path`` locates the fault in the request (for a
spec: ``spec.blocks[1].layers[0] (linear).out``, the spec validator's own path after the
field that holds the spec). No handler ever sends a stack trace.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from nas import SpecError
from nas.spec import error_path, readable_message
from nas.strict_json import StrictJSONError
from service.api.route_table import documented_route, route_path, with_head
from service.api.schemas import SUBMISSION_TAGS
from service.store.errors import InvalidBatch

__all__ = [
    "DATABASE_DOWN",
    "NOT_JSON",
    "RETRY_SOON",
    "PROBLEM_TYPES",
    "Problem",
    "ProblemError",
    "ProblemIssue",
    "install_problem_handlers",
    "on_database_down",
    "problem_response",
    "under",
]

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
_BASE = "https://preflight.dev/problems/"
PROBLEM_TYPES = {
    "invalid-spec": _BASE + "invalid-spec",
    "invalid-request": _BASE + "invalid-request",
    "unauthorized": _BASE + "unauthorized",
    "not-found": _BASE + "not-found",
    "conflict": _BASE + "conflict",
    "too-large": _BASE + "too-large",
    "too-many-requests": _BASE + "too-many-requests",
    "not-ready": _BASE + "not-ready",
    "unavailable": _BASE + "unavailable",
    "internal": _BASE + "internal",
}


class ProblemIssue(BaseModel):
    path: str
    message: str


class Problem(BaseModel):
    """The body of every error response (RFC 9457)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[ProblemIssue] | None = None


class ProblemError(Exception):
    """An error the API reports as a problem; raise it from routes and dependencies."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        kind: str | None = None,
        errors: list[ProblemIssue] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind
        self.errors = errors
        self.headers = headers

    @classmethod
    def from_spec_error(cls, exc: SpecError, *, field: str) -> ProblemError:
        issues = [ProblemIssue(path=under(field, issue.path), message=issue.message) for issue in exc.issues]
        detail, issues = bounded(issues, "invalid spec", where=field)
        return cls(422, detail, kind="invalid-spec", errors=issues)

    @classmethod
    def from_invalid_batch(cls, exc: InvalidBatch) -> ProblemError:
        """The store's :class:`InvalidBatch` as a 422 naming the JSON path at fault."""
        return cls.at(exc.path, exc.message)

    @classmethod
    def not_found(cls, what: str, key: str) -> ProblemError:
        """A 404 for an id that names nothing the caller may see: any text at all (an id of another
        length or alphabet is no id, not a malformed request), quoted up to 64 characters."""
        shown = key if len(key) <= 64 else f"{key[:64]}... ({len(key)} characters)"
        return cls(404, f"no {what} with id {shown}", kind="not-found")

    @classmethod
    def at(cls, path: str, message: str) -> ProblemError:
        """A 422 for one fault of the request at ``path`` (``query.cursor``, ``path.study``, ``x[0][1]``)."""
        return cls(422, f"{path}: {message}", kind="invalid-request", errors=[ProblemIssue(path=path, message=message)])


def under(field: str, path: str) -> str:
    """A validator's path under the body field that holds what it validated: ``spec.blocks[0]``,
    ``options.thresholds["a.b"]`` (a quoted key), ``spec`` (the root)."""
    if path == "$":
        return field
    return f"{field}{path}" if path.startswith("[") else f"{field}.{path}"


# what every route behind the token may answer (service.api.auth)
UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": Problem, "description": "missing or invalid bearer token"}
}

# what a POST route answers when service.api.middleware.RequestFormatMiddleware refuses the body's media type
NOT_JSON: dict[int | str, dict[str, Any]] = {
    415: {"model": Problem, "description": "the body is sent as another media type than application/json"}
}

MAX_ISSUES = 50  # listed in errors; the detail names the first few
DETAIL_ISSUES = 3


def bounded(issues: list[ProblemIssue], empty: str, where: str = "$") -> tuple[str, list[ProblemIssue]]:
    """The detail (the first few issues) and the issues list, both bounded: a body with thousands of
    faults gets a problem of a few kilobytes, not an echo of the body; the count of those not listed
    is an issue at ``where`` (a batch's spec: ``specs[i]``, so a client knows whose they are)."""
    detail = "; ".join(f"{issue.path}: {issue.message}" for issue in issues[:DETAIL_ISSUES]) or empty
    if len(issues) > DETAIL_ISSUES:
        detail += f"; and {len(issues) - DETAIL_ISSUES} more (see errors)"
    if len(issues) > MAX_ISSUES:
        more = ProblemIssue(path=where, message=f"{len(issues) - MAX_ISSUES} more issues not listed")
        issues = [*issues[:MAX_ISSUES], more]
    return detail, issues


def problem_response(
    request: Request | None,
    status: int,
    detail: str | None,
    *,
    kind: str | None = None,
    errors: list[ProblemIssue] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    title = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    if kind == "invalid-spec":
        title = "Invalid architecture spec"
    problem = Problem(
        type=PROBLEM_TYPES.get(kind or "", "about:blank"),
        title=title,
        status=status,
        detail=None if detail is None else _encodable(detail),
        instance=request.url.path if request is not None else None,
        errors=None
        if errors is None
        else [ProblemIssue(path=_encodable(e.path), message=_encodable(e.message)) for e in errors],
    )
    return JSONResponse(
        problem.model_dump(exclude_none=True), status_code=status, headers=headers, media_type=MEDIA_TYPE
    )


def _encodable(text: str) -> str:
    """``text`` with each lone surrogate (a JSON string may hold ``\\ud800``, UTF-8 cannot) written
    as its escape, so a problem that quotes the client's key is still a response, not a 500."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _location(loc: tuple[Any, ...], kind: str) -> str:
    source, *rest = loc if loc else ("body",)
    if source == "body" and rest and rest[0] in SUBMISSION_TAGS:
        rest = rest[1:]  # the union member pydantic tried, not a place in the body
    path = error_path(tuple(rest), kind)
    return path if source == "body" else under(str(source), path)


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(request, exc.status, exc.detail, kind=exc.kind, errors=exc.errors, headers=exc.headers)


def _unparsable_body(cause: BaseException | None) -> str | None:
    """Why FastAPI could not parse a body that is not a JSON syntax error (it answers those with a
    bare 400 "There was an error parsing the body"): the reason, or None for another 400."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not UTF-8 (byte {cause.object[cause.start : cause.start + 1]!r} at offset {cause.start})"
    if isinstance(cause, RecursionError):
        return "invalid JSON: nested too deeply for this server to parse (arrays or objects within each other)"
    if isinstance(cause, ValueError):  # e.g. an integer literal of more digits than Python converts
        return f"invalid JSON: {(str(cause).splitlines() or [type(cause).__name__])[0][:200]}"
    return None


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and isinstance(repeated := exc.__cause__, StrictJSONError):
        return await _on_problem(request, ProblemError.at(_encodable(repeated.path), _encodable(repeated.reason)))
    if exc.status_code == 400 and (reason := _unparsable_body(exc.__cause__)) is not None:
        return await _on_problem(request, ProblemError.at("$", reason))
    kind = {401: "unauthorized", 404: "not-found", 409: "conflict", 413: "too-large"}.get(exc.status_code)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = dict(exc.headers or {})
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no resource at {request.url.path}"
    if exc.status_code == 405 and (route := documented_route(request.app, route_path(request.scope))):
        headers["Allow"] = ", ".join(route.methods)  # the router named only the first route's method
        detail = f"{request.method} is not a method of {route.template}: it allows {headers['Allow']}"
    elif exc.status_code == 405 and "Allow" in headers:  # a route out of the document (/docs)
        headers["Allow"] = ", ".join(with_head(tuple(m.strip() for m in headers["Allow"].split(","))))
    return problem_response(request, exc.status_code, detail, kind=kind, headers=headers)


def _json_syntax(error: dict[str, Any], body: Any) -> ProblemIssue:
    """A JSON syntax error with its line and column (a client's editor counts that way, not in bytes)."""
    position = error.get("loc", ("body", 0))[-1]
    reason = (error.get("ctx") or {}).get("error", "invalid JSON")
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not isinstance(position, int):
        return ProblemIssue(path="$", message=f"invalid JSON: {reason}")
    line = body.count("\n", 0, position) + 1
    column = position - (body.rfind("\n", 0, position) + 1) + 1
    return ProblemIssue(path="$", message=f"invalid JSON at line {line}, column {column}: {reason}")


def _bare_spec_hint(errors: list[dict[str, Any]], body: Any) -> ProblemIssue | None:
    """A spec posted as the whole body, not wrapped in {"spec": ...}: say so, once."""
    if not isinstance(body, dict) or "spec" in body or "specs" in body or not {"blocks", "input_shape"} & set(body):
        return None
    if not any(e.get("type") == "missing" and tuple(e.get("loc", ()))[-1:] == ("spec",) for e in errors):
        return None
    return ProblemIssue(
        path="$", message='the body looks like a bare spec: send {"spec": <your spec>, "options": {...}} instead'
    )


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    issues = [
        _json_syntax(error, exc.body)
        if error.get("type") == "json_invalid"
        else ProblemIssue(
            path=_location(tuple(error.get("loc", ())), str(error.get("type", ""))),
            message=readable_message(error) if "type" in error else str(error.get("msg", "invalid")),
        )
        for error in errors
    ]
    if hint := _bare_spec_hint(errors, exc.body):
        issues.insert(0, hint)
    if exc.body in (None, b"") and [tuple(e.get("loc", ())) for e in errors] == [("body",)]:  # "$: Field required"
        issues = [
            ProblemIssue(path="$", message="the request has no body: send a JSON object (GET /docs shows each route's)")
        ]
    detail, issues = bounded(issues, "invalid request")
    return problem_response(request, 422, detail, kind="invalid-request", errors=issues)


async def _on_spec_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SpecError)
    return await _on_problem(request, ProblemError.from_spec_error(exc, field="spec"))


async def _on_invalid_batch(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidBatch)
    return await _on_problem(request, ProblemError.from_invalid_batch(exc))


DATABASE_DOWN = (OperationalError, InterfaceError, PoolTimeoutError)  # answered 503, to retry
RETRY_SOON = {"Retry-After": "1"}  # every 503 says when to ask again (docs/service.md, Errors)


async def on_database_down(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, str(exc).splitlines()[0])
    return problem_response(
        request,
        503,
        "the database is unavailable; retry shortly",
        kind="unavailable",
        headers=RETRY_SOON,
    )


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(request, 500, "internal error; the server log has the details", kind="internal")


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(SpecError, _on_spec_error)
    app.add_exception_handler(InvalidBatch, _on_invalid_batch)
    for down in DATABASE_DOWN:  # PoolTimeoutError: every connection busy
        app.add_exception_handler(down, on_database_down)
    app.add_exception_handler(Exception, _on_unexpected)

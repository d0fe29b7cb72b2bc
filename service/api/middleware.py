"""Checks on the request's envelope before any route reads it: the bearer token of a request with a
body (401), the body's size (413), its media type (415) and the URL's percent-escapes (422), each
answered as problem+json; and HEAD answered as GET without the body, on every route."""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.auth import auth_required_for, authenticate, bearer_token
from service.api.problems import DATABASE_DOWN, ProblemError, ProblemIssue, on_database_down, problem_response
from service.api.route_table import route_path

__all__ = ["BodyLimitMiddleware", "HeadAsGetMiddleware", "RequestFormatMiddleware", "TokenFirstMiddleware"]

_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_FILE_SENDS = frozenset({"http.response.pathsend", "http.response.zerocopysend"})


class HeadAsGetMiddleware:
    """HEAD wherever GET is answered (RFC 9110 9.3.2: the same status and headers, no body): FastAPI's
    routes answer only the methods they name, so a HEAD, as monitors and link checkers send, was a
    405. The request runs as a GET (auth, status and Content-Length as for a GET) and its body is
    dropped; a 405 names HEAD beside GET (``route_table``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            await send({**message, "body": b""} if message["type"] == "http.response.body" else message)

        # a file response offered the server's pathsend would send the file past the body this drops
        extensions = {k: v for k, v in scope.get("extensions", {}).items() if k not in _FILE_SENDS}
        await self.app({**scope, "method": "GET", "extensions": extensions}, receive, without_body)


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes``: at once when Content-Length says so, else as soon as
    the streamed body passes the limit. ``by_path``: another limit, and the setting that sets it,
    for the path named (a data batch is larger than any spec submission)."""

    def __init__(self, app: ASGIApp, max_bytes: int, by_path: dict[str, tuple[int, str]] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.by_path = by_path or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, setting = self.by_path.get(route_path(scope), (self.max_bytes, "PREFLIGHT_MAX_BODY_BYTES"))
        detail = f"request body over the limit of {max_bytes} bytes (setting {setting})"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            await problem_response(Request(scope), 413, detail, kind="too-large")(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise HTTPException(413, detail)
            return message

        await self.app(scope, limited_receive, send)


class TokenFirstMiddleware:
    """Check the bearer token of a request with a body before anything reads the body: FastAPI
    parses the body before it runs the route's dependencies, so without this a caller with no
    token had a 4 MiB body decoded (and a malformed one answered 422) before its 401."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in _WITH_BODY and route_path(scope).startswith("/v1/"):
            state = scope["app"].state
            if auth_required_for(state.settings, scope):
                headers = [value.decode("latin-1") for value in _values(scope, b"authorization")]
                try:  # the route's dependency reads the caller from the request's state: one check, not two
                    scope.setdefault("state", {})["caller"] = await authenticate(state.tokens, bearer_token(headers))
                except ProblemError as refusal:
                    response = problem_response(
                        Request(scope),
                        refusal.status,
                        refusal.detail,
                        kind=refusal.kind,
                        errors=refusal.errors,
                        headers=refusal.headers,
                    )
                    await response(scope, receive, send)
                    return
                except DATABASE_DOWN as down:  # outside the app's handlers: answered as they would, 503
                    await (await on_database_down(Request(scope), down))(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class RequestFormatMiddleware:
    """Refuse what a route would misread: a body sent as another media type than JSON (a form or
    text body would be reported as "not an object", 415 names the header instead), and a path or
    query whose percent-escapes are not UTF-8 (decoded leniently, ``%ff`` and ``%fe`` would both
    become U+FFFD and name the same study)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if (refusal := _refusal(scope)) is None and scope["method"] in _WITH_BODY and not _media_type(scope):
                # read as JSON, as documented (FastAPI from 0.122 reads a body without the header as bytes);
                # in place: the router records the route in this scope, which the metrics read
                others = [(key, value) for key, value in scope["headers"] if key != b"content-type"]
                scope["headers"] = [*others, (b"content-type", b"application/json")]
            if refusal is not None:
                status, where, message = refusal
                issues = [ProblemIssue(path=where, message=message)]
                response = problem_response(
                    Request(scope), status, f"{where}: {message}", kind="invalid-request", errors=issues
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refusal(scope: Scope) -> tuple[int, str, str] | None:
    """(status, where, why) for a request to refuse, else None."""
    for where, raw in _path_and_query_parts(scope.get("raw_path") or b"", scope.get("query_string") or b""):
        try:
            unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError as error:
            return 422, where, f"percent-escapes that are not UTF-8 text (byte {error.object[error.start]:#04x})"
    if scope["method"] in _WITH_BODY:
        given = _values(scope, b"content-type")
        if len(given) > 1:  # this check would read one and FastAPI the other
            return 400, "header.content-type", f"given {len(given)} times; send it once"
        media_type = _media_type(scope)
        if media_type and media_type != b"application/json" and not media_type.endswith(b"+json"):
            shown = media_type.decode("latin-1")[:100]
            return 415, "header.content-type", f"the body must be JSON (application/json), not {shown}"
    return None


def _path_and_query_parts(path: bytes, query: bytes) -> list[tuple[str, bytes]]:
    """The raw path, then each query parameter's name and value, with where a fault in each is:
    ``query.<name>`` when the name itself is text (``?study=%ff`` is at ``query.study``)."""
    parts = [("path", path)]
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        if not name:
            parts.append(("query", value))
            continue
        try:
            shown = unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            parts.append(("query", name))
            continue
        parts.append((f"query.{shown[:64]}", value))
    return parts


def _values(scope: Scope, name: bytes) -> list[bytes]:
    """Every value of the header ``name`` (lower case, as ASGI gives names)."""
    return [value for key, value in scope["headers"] if key == name]


def _media_type(scope: Scope) -> bytes:
    """The body's media type, lower case, without parameters; empty when none is named."""
    return (_values(scope, b"content-type") or [b""])[0].split(b";")[0].strip().lower()

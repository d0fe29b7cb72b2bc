"""Request-size limit, enforced before the body is parsed (413 problem+json)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.problems import problem_response

__all__ = ["BodyLimitMiddleware"]


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes``: at once when Content-Length says so, else as soon as
    the streamed body passes the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = f"request body over the limit of {self.max_bytes} bytes (setting PREFLIGHT_MAX_BODY_BYTES)"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            from starlette.requests import Request

            await problem_response(Request(scope), 413, detail, kind="too-large")(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, detail)
            return message

        await self.app(scope, limited_receive, send)

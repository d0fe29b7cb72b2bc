"""HeadAsGetMiddleware at the ASGI level: what a server that offers more than uvicorn would see."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Route

from service.api.middleware import HeadAsGetMiddleware


def test_a_head_never_reaches_a_file_response_as_a_pathsend(tmp_path: Any) -> None:
    """A file response offered ``http.response.pathsend`` (uvicorn does not offer it; other servers
    do) sends the file itself: run as a GET, a HEAD would have sent the file past the body dropped."""
    css = tmp_path / "style.css"
    css.write_text("body {}" * 100)
    app = HeadAsGetMiddleware(Starlette(routes=[Route("/style.css", lambda request: FileResponse(css))]))
    sent: list[MutableMapping[str, Any]] = []
    scope = {
        "type": "http",
        "method": "HEAD",
        "path": "/style.css",
        "raw_path": b"/style.css",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "extensions": {"http.response.pathsend": {}},
    }

    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await asyncio.Event().wait()  # no disconnect: the response ends first (Starlette then stops listening)
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    assert [m["type"] for m in sent if m["type"] != "http.response.start"] == ["http.response.body"]
    assert sent[0]["status"] == 200 and all(m.get("body", b"") == b"" for m in sent)
    headers = dict(sent[0]["headers"])
    assert headers[b"content-length"] == str(css.stat().st_size).encode()

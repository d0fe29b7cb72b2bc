"""The request body's JSON, read strictly (``nas.strict_json``): an object that names a key twice
is refused at its JSON path, where FastAPI's reader kept the last value.

FastAPI reads the body through ``Request.json``; the routers take :class:`StrictJSONRoute`, whose
handler hands the endpoint a :class:`StrictJSONRequest` (FastAPI's documented way to customise
the request a route reads)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from nas.strict_json import loads_strict

__all__ = ["StrictJSONRequest", "StrictJSONRoute"]


class StrictJSONRequest(Request):
    """A request whose ``json()`` refuses repeated keys."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose endpoint reads its body as a :class:`StrictJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler

"""The app's documented routes, from its OpenAPI document (the public list of its route
templates and methods): what a request's path names when the router has not run or found no
method for it. The metrics label a request answered before routing with its template; a 405
names every method its path allows (RFC 9110, section 15.5.6), where Starlette's router named
only the first route's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DocumentedRoute", "documented_route", "documented_routes"]

_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class DocumentedRoute:
    template: str  # /v1/candidates/{candidate_id}
    methods: tuple[str, ...]  # GET, DELETE: upper case, in the document's order
    pattern: re.Pattern[str]


def documented_routes(app: Any) -> list[DocumentedRoute]:
    """Every path of ``app``'s OpenAPI document (none for an app without one)."""
    paths = app.openapi()["paths"] if app is not None and hasattr(app, "openapi") else {}
    return [
        DocumentedRoute(
            template=template,
            methods=tuple(m.upper() for m in operations if m in _OPERATIONS),
            pattern=re.compile("/".join(map(_segment_pattern, template.split("/")))),
        )
        for template, operations in paths.items()
    ]


def documented_route(path: str, routes: list[DocumentedRoute]) -> DocumentedRoute | None:
    """The documented route ``path`` names, if any."""
    return next((route for route in routes if route.pattern.fullmatch(path)), None)


def _segment_pattern(segment: str) -> str:
    return "[^/]+" if segment.startswith("{") and segment.endswith("}") else re.escape(segment)

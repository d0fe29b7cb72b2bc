"""The app's documented routes, from its OpenAPI document (the public list of its route
templates and methods): what a request's path names when the router has not run or found no
method for it. The metrics label a request answered before routing with its template; a 405
names every method its path allows (RFC 9110, section 15.5.6), where Starlette's router named
only the first route's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["STUDY_NAME_PATTERN", "DocumentedRoute", "documented_route", "route_path", "with_head"]

_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class DocumentedRoute:
    template: str  # /v1/candidates/{candidate_id}
    methods: tuple[str, ...]  # GET, HEAD, DELETE: upper case, in the document's order, HEAD after GET
    pattern: re.Pattern[str]


def documented_route(app: Any, path: str) -> DocumentedRoute | None:
    """The route of ``app``'s OpenAPI document that ``path`` (a :func:`route_path`) names, if any."""
    return next((route for route in _documented_routes(app) if route.pattern.fullmatch(path)), None)


def route_path(scope: Any) -> str:
    """The path as the app's routes name it: without the ``root_path`` the app is served under
    (``PREFLIGHT_ROOT_PATH``, or a mount), which uvicorn and Starlette keep in ``path``, and
    without a trailing slash (which the router redirects)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and (path == root or path.startswith(root + "/")):  # a whole segment: /pre is no prefix of /prefix
        path = path[len(root) :]
    return path.rstrip("/") or "/"


def _documented_routes(app: Any) -> list[DocumentedRoute]:
    """Every path of ``app``'s OpenAPI document (none for an app without one), read once per app
    and kept in its state."""
    state = getattr(app, "state", None)
    cached: list[DocumentedRoute] | None = getattr(state, "documented_routes", None)
    if cached is not None:
        return cached
    paths = app.openapi()["paths"] if hasattr(app, "openapi") else {}
    routes = [
        DocumentedRoute(
            template=template,
            methods=with_head(tuple(m.upper() for m in operations if m in _OPERATIONS)),
            pattern=re.compile("/".join(map(_segment_pattern, template.split("/")))),
        )
        for template, operations in paths.items()
    ]
    if state is not None:
        state.documented_routes = routes
    return routes


def with_head(methods: tuple[str, ...]) -> tuple[str, ...]:
    """HEAD after GET: the app answers it wherever it answers GET (``HeadAsGetMiddleware``), though
    the document, as FastAPI writes it, names only the GET."""
    if "GET" not in methods or "HEAD" in methods:
        return methods
    at = methods.index("GET") + 1
    return (*methods[:at], "HEAD", *methods[at:])


# a study's name in a path: any text, "/" and line breaks too (routes/studies.py routes by it)
STUDY_NAME_PATTERN = r"[\s\S]+"


def _segment_pattern(segment: str) -> str:
    if not (segment.startswith("{") and segment.endswith("}")):
        return re.escape(segment)
    return STUDY_NAME_PATTERN if segment == "{study}" else "[^/]+"

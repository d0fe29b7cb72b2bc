"""Prometheus metrics. Queue figures come from the database at scrape time, so they are
true across every API and worker process; request latency is measured in this process.

- ``preflight_queue_depth``: candidates waiting (status queued).
- ``preflight_jobs{status}``: candidates in each status.
- ``preflight_tuning_seconds``: histogram of the engine's tuning time of done candidates.
- ``preflight_request_seconds{method,route,status}``: histogram of API request latency.
- ``preflight_embedded_worker_live``: 1 while the worker embedded in this process can take jobs,
  0 while it cannot (its engine failing to start, its thread ended); absent without one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.route_table import documented_route, route_path
from service.store.jobs import queue_depth
from service.store.models import Status
from service.store.reports import tuning_histogram

__all__ = ["TUNING_BUCKETS", "Metrics", "RequestLatencyMiddleware"]

TUNING_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class _QueueCollector(Collector):
    def __init__(self, sessions: sessionmaker[Session], liveness: Callable[[], str | None] | None = None) -> None:
        self._sessions = sessions
        self._liveness = liveness

    def collect(self) -> Iterator[Any]:
        with self._sessions() as session:
            counts = queue_depth(session)
            row = tuning_histogram(session, bounds=TUNING_BUCKETS)
        depth = GaugeMetricFamily("preflight_queue_depth", "Candidates waiting for a worker.")
        depth.add_metric([], counts[Status.QUEUED])
        yield depth
        jobs = GaugeMetricFamily("preflight_jobs", "Candidates by status.", labels=["status"])
        for status, count in counts.items():
            jobs.add_metric([status.value], count)
        yield jobs
        total, seconds, cumulative = row
        buckets = [(str(bound), int(count)) for bound, count in zip(TUNING_BUCKETS, cumulative, strict=True)]
        buckets.append(("+Inf", int(total)))
        tuning = HistogramMetricFamily("preflight_tuning_seconds", "Engine tuning time of done candidates (seconds).")
        tuning.add_metric([], buckets, float(seconds or 0.0))
        yield tuning
        if self._liveness is not None:
            live = GaugeMetricFamily("preflight_embedded_worker_live", "1 while the embedded worker can take jobs.")
            live.add_metric([], 0.0 if self._liveness() else 1.0)
            yield live


class Metrics:
    """One registry per app (tests run several apps in one process)."""

    def __init__(self, sessions: sessionmaker[Session], liveness: Callable[[], str | None] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_QueueCollector(sessions, liveness))
        self.request_seconds = Histogram(
            "preflight_request_seconds",
            "API request latency (seconds).",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0),
        )


class RequestLatencyMiddleware:
    """Times every HTTP request, labelled by its route template (never the raw path)."""

    def __init__(self, app: ASGIApp, get_metrics: Any) -> None:
        self.app = app
        self.get_metrics = get_metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            metrics = self.get_metrics()
            if metrics is not None:
                route = _route_template(scope)
                metrics.request_seconds.labels(scope["method"], route, str(status)).observe(time.perf_counter() - start)


def _route_template(scope: Scope) -> str:
    """The template of the route that served the request; for one a middleware answered before
    routing (a 401 before the body is read, a 413, a 415), the documented route its path names;
    "unmatched" when none does (never the raw path: one label per path would grow without bound)."""
    if (route := scope.get("route")) is not None:
        # the template as documented ("{study}"), not as routed ("{study:study}"): one label a route
        return str(getattr(route, "path_format", None) or getattr(route, "path", "unmatched"))
    documented = documented_route(scope.get("app"), route_path(scope))
    return documented.template if documented is not None else "unmatched"

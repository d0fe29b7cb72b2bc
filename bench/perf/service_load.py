"""``python -m bench.perf.service_load``: throughput and latency of the REST API under load.

For SQLite and PostgreSQL in turn, the API runs as ``preflight serve`` in its own process(es)
and 16 concurrent keep-alive clients (a minimal asyncio HTTP/1.1 client, so that the load
generator costs little CPU) drive, for a fixed time each:

1. ``GET /healthz``: the trivial endpoint of the same app, the baseline of the framework;
2. ``POST /v1/candidates``: one new spec per request (each creates a candidate);
3. ``POST /v1/candidates`` with batches of 32 specs;
4. ``GET /v1/candidates/{id}`` of queued candidates (no report yet);
5. ``GET /v1/candidates/{id}`` of done candidates, each with a full conditioning report (the
   engine's real report of a 6-block MLP, written through the queue's ``complete``): what a
   NAS controller polling for results reads.

Reported: requests/s (and candidates/s for submissions), latency p50 / p99, and the API
processes' CPU time per request (user + system, from /proc: the figure that load on other
processes disturbs least). Targets on a 2-core machine: at least 500 submissions/s on
PostgreSQL, GET p99 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from service.store.migrations import upgrade
from service.testing import free_port, scratch_database

if TYPE_CHECKING:
    from nas.report import ConditioningReport

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CLIENTS = 16


@dataclass
class Result:
    backend: str
    phase: str
    requests: int
    items: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float
    server_cpu_ms: float  # API processes' CPU time per request

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds

    @property
    def items_per_second(self) -> float:
        return self.items / self.seconds


class Connection:
    """One keep-alive HTTP/1.1 connection; just enough protocol for this benchmark."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        if body:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        return int(status_line.split()[1]), payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def spec(width: int) -> dict[str, object]:
    return {
        "input_shape": [16],
        "blocks": [
            {"layers": [{"type": "linear", "out": width}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 10}]},
        ],
    }


async def drive(
    port: int, seconds: float, make: Callable[[], tuple[str, str, bytes, int]], expect: int
) -> tuple[list[float], int, int, int, float]:
    latencies: list[float] = []
    errors = items = 0
    stop_at = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal errors, items
        connection = Connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop_at:
                method, path, body, count = make()
                started = time.perf_counter()
                status, _ = await connection.request(method, path, body)
                latencies.append(time.perf_counter() - started)
                if status == expect:
                    items += count
                else:
                    errors += 1
        finally:
            connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    elapsed = time.perf_counter() - started
    return latencies, len(latencies), items, errors, elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def _tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its living descendants (uvicorn's workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        stack.extend(children.get(current, []))
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _report_of_a_real_run() -> ConditioningReport:
    """The engine's report of a 6-block MLP: the size and shape of what clients read."""
    from worker.engine.pipeline import condition

    blocks = [{"layers": [{"type": "linear", "out": 64}, {"type": "relu"}]} for _ in range(5)]
    mlp = {"input_shape": [16], "blocks": [*blocks, {"layers": [{"type": "linear", "out": 10}]}]}
    return condition(mlp)


def _complete_queued(url: str, count: int, report: ConditioningReport) -> list[str]:
    """Claim and complete ``count`` queued candidates with ``report``, as a worker would; their
    public ids (what the API answers to)."""
    from service.store import jobs
    from service.store.db import make_engine, make_sessionmaker, session_scope

    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    done = []
    try:
        for _ in range(count):
            with session_scope(sessions, write=True) as session:
                job = jobs.claim(session, worker="bench", device_kind="cpu", lease_seconds=60)
                if job is None:
                    break
                jobs.complete(session, job_id=job.id, token=job.lease_token, report=report)
                done.append(job.id)
    finally:
        engine.dispose()
    return _public_ids(url, done)


def _public_ids(url: str, job_ids: list[int]) -> list[str]:
    """The public ids of jobs (``owned_candidates``: one per owner of a deduplicated job)."""
    if not job_ids:
        return []
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            listed = ",".join(str(int(i)) for i in job_ids)  # integers from the queue itself
            rows = connection.execute(text(f"SELECT public_id FROM owned_candidates WHERE candidate_id IN ({listed})"))
            return [str(row[0]) for row in rows]
    finally:
        engine.dispose()


def _queued_ids(url: str, count: int) -> list[str]:
    """Public ids of candidates still queued (the submission phases made them)."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT o.public_id FROM owned_candidates o JOIN candidates c ON c.id = o.candidate_id "
                    "WHERE c.status = 'queued' ORDER BY o.id LIMIT :n"
                ),
                {"n": count},
            )
            return [str(row[0]) for row in rows]
    finally:
        engine.dispose()


def run_phases(
    backend: str,
    url: str,
    port: int,
    pid: int,
    seconds: float,
    warmup: float,
    report: ConditioningReport,
) -> list[Result]:
    counter = itertools.count(100)
    ids: list[str] = []
    done: list[str] = []
    results = []

    def health() -> tuple[str, str, bytes, int]:
        return "GET", "/healthz", b"", 1

    def submit_one() -> tuple[str, str, bytes, int]:
        body = json.dumps({"spec": spec(next(counter)), "options": {"study": "bench"}}).encode()
        return "POST", "/v1/candidates", body, 1

    def submit_batch() -> tuple[str, str, bytes, int]:
        specs = [spec(next(counter)) for _ in range(32)]
        return (
            "POST",
            "/v1/candidates",
            json.dumps({"specs": specs, "options": {"study": "bench"}}).encode(),
            32,
        )

    def read() -> tuple[str, str, bytes, int]:
        return "GET", f"/v1/candidates/{random.choice(ids)}", b"", 1

    def read_done() -> tuple[str, str, bytes, int]:
        return "GET", f"/v1/candidates/{random.choice(done)}", b"", 1

    size = len(json.dumps(report.model_dump(mode="json"))) // 1024
    phases = [
        ("GET /healthz (trivial)", health, 200),
        ("POST /v1/candidates (1 spec)", submit_one, 202),
        ("POST /v1/candidates (32 specs)", submit_batch, 202),
        ("GET /v1/candidates/{id} (queued)", read, 200),
        (f"GET /v1/candidates/{{id}} (done, {size} KB report)", read_done, 200),
    ]
    for name, make, expect in phases:
        if make is read:
            done.extend(_complete_queued(url, 500, report))
            ids.extend(_queued_ids(url, 500))
        asyncio.run(drive(port, warmup, make, expect))
        cpu = _tree_cpu_seconds(pid)
        latencies, requests, items, errors, elapsed = asyncio.run(drive(port, seconds, make, expect))
        cpu = _tree_cpu_seconds(pid) - cpu
        result = Result(
            backend,
            name,
            requests,
            items,
            elapsed,
            errors,
            percentile(latencies, 0.5),
            percentile(latencies, 0.99),
            1000 * cpu / max(requests, 1),
        )
        results.append(result)
        print(
            f"  {backend:10s} {name:40s} {result.per_second:8.0f} req/s {result.items_per_second:8.0f} items/s "
            f"p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  API CPU {result.server_cpu_ms:5.2f} ms/req  "
            f"errors {errors}",
            flush=True,
        )
    return results


def serve(url: str, port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PREFLIGHT_DATABASE_URL": url}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            status, _ = asyncio.run(_once(port))
            if status == 200:
                return process
        except OSError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("the API did not start")
        time.sleep(0.2)


async def _once(port: int) -> tuple[int, bytes]:
    connection = Connection("127.0.0.1", port)
    try:
        return await connection.request("GET", "/readyz")
    finally:
        connection.close()


def bench_backend(
    backend: str, url: str, seconds: float, warmup: float, workers: int, report: ConditioningReport
) -> list[Result]:
    upgrade(url)
    port = free_port()
    process = serve(url, port, workers)
    try:
        return run_phases(backend, url, port, process.pid, seconds, warmup, report)
    finally:
        process.terminate()
        process.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.service_load", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--api-workers", type=int, default=1, help="uvicorn processes on PostgreSQL (default 1)")
    parser.add_argument("--sqlite-api-workers", type=int, default=1, help="uvicorn processes on SQLite (default 1)")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("PREFLIGHT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    load = os.getloadavg()[0]
    print(
        f"service load: {CLIENTS} clients, {args.seconds:g} s per phase, API processes: SQLite "
        f"{args.sqlite_api_workers}, PostgreSQL {args.api_workers}; {os.cpu_count()} CPU(s), load average "
        f"{load:.1f} at start, Python {platform.python_version()}",
        flush=True,
    )
    results: list[Result] = []
    report = _report_of_a_real_run()
    with tempfile.TemporaryDirectory() as folder:
        results += bench_backend(
            "sqlite",
            f"sqlite:///{folder}/bench.db",
            args.seconds,
            args.warmup,
            args.sqlite_api_workers,
            report,
        )
    if not args.skip_postgres:
        admin_url = make_url(args.postgres_url).set(database="postgres").render_as_string(hide_password=False)
        with scratch_database(admin_url, "preflight_bench") as url:
            results += bench_backend("postgresql", url, args.seconds, args.warmup, args.api_workers, report)
    print("\n| backend | phase | requests/s | candidates/s | p50 ms | p99 ms | API CPU ms / request | errors |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        items = f"{r.items_per_second:.0f}" if r.phase.startswith("POST") else ""
        print(
            f"| {r.backend} | `{r.phase}` | {r.per_second:.0f} | {items} | {r.p50_ms:.1f} | {r.p99_ms:.1f} "
            f"| {r.server_cpu_ms:.2f} | {r.errors} |"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"per_second": r.per_second} for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

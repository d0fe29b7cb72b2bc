"""The docker-compose topology started natively: PostgreSQL, the one-shot migration, the
API and two `preflight worker` processes, each run with the command and environment that
docker-compose.yml gives it (host and port adapted to this machine); then a short Optuna
search through REST, as a controller on another machine would run it.

PostgreSQL is found at PREFLIGHT_TEST_POSTGRES_URL (default
postgresql+psycopg://postgres@127.0.0.1:5432/test); a fresh database is created for the
test and dropped after. When the server cannot be reached the test is skipped, or fails if
PREFLIGHT_TEST_REQUIRE_POSTGRES=1.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from nas.client import PreflightClient
from nas.errors import AuthenticationError
from nas.gate import ATTR_VERDICT, ConditioningGate
from nas.testing import FAST_OPTIONS, ill_conditioned_mlp, mlp

ROOT = Path(__file__).resolve().parents[2]
SERVICES = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PREFLIGHT = [sys.executable, "-m", "service.cli"]

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
RUNNER_STARTED = re.compile(r"worker\.jobs\.runner: worker \S+: started")


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    given = make_url(os.environ.get("PREFLIGHT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL))
    admin_url = given.set(database="postgres").render_as_string(hide_password=False)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        message = (
            f"PostgreSQL not reachable at {given.render_as_string()} ({type(exc).__name__}); "
            "set PREFLIGHT_TEST_POSTGRES_URL, or PREFLIGHT_TEST_REQUIRE_POSTGRES=1 to fail here"
        )
        if os.environ.get("PREFLIGHT_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    finally:
        admin.dispose()
    from service.testing import scratch_database

    with scratch_database(admin_url, "preflight_topology") as url:
        yield url


def compose_command(service: str, **replace: str) -> list[str]:
    """The service's compose command, run by this interpreter, with flag values replaced."""
    command = list(SERVICES[service]["command"])
    assert command[0] == "preflight"
    for flag, value in replace.items():
        command[command.index(flag) + 1] = value
    return PREFLIGHT + command[1:]


def compose_environment(service: str, database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in (SERVICES[service].get("environment") or {}).items():
        env[key] = re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", str(value))
    env["PREFLIGHT_DATABASE_URL"] = database_url  # this machine's PostgreSQL, not the compose host
    env["PREFLIGHT_POLL_SECONDS"] = "0.1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def topology(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    logs = tmp_path_factory.mktemp("topology")
    run = subprocess.run(
        compose_command("migrate"),
        env=compose_environment("migrate", database),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    token = subprocess.run(
        PREFLIGHT + ["token", "create", "topology-test", "--admin"],  # an operator's: it sees which worker ran a job
        env=compose_environment("api", database),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    port = free_port()
    processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, service: str, command: list[str]) -> None:
        with (logs / f"{name}.log").open("wb") as log:  # the child keeps its own handle
            processes[name] = subprocess.Popen(
                command, env=compose_environment(service, database), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )

    start("api", "api", compose_command("api", **{"--host": "127.0.0.1", "--port": str(port)}))
    start("worker-1", "worker", compose_command("worker"))
    start("worker-2", "worker", compose_command("worker"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            # The supervisor's child (not the supervisor) says it is polling the queue.
            started = sum(bool(RUNNER_STARTED.search((logs / f"worker-{i}.log").read_text())) for i in (1, 2))
            try:
                import httpx

                ready = httpx.get(url + "/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                ready = False
            if ready and started == 2:
                break
            for name, process in processes.items():
                assert process.poll() is None, f"{name} exited: {(logs / f'{name}.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the topology did not come up within 120 s"
            time.sleep(0.25)
        yield {"url": url, "token": token, "logs": logs}
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


def test_the_api_refuses_requests_without_the_token(topology: dict[str, Any]) -> None:
    with PreflightClient(topology["url"], token="") as client, pytest.raises(AuthenticationError):
        client.get("1")


def test_a_short_search_runs_through_rest_on_two_workers(topology: dict[str, Any]) -> None:
    specs = {f"relu-{w}": mlp(2, "relu", w) for w in (16, 20, 24, 28, 32, 40)} | {"sigmoid-30": ill_conditioned_mlp()}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with PreflightClient(topology["url"], token=topology["token"]) as client:
        gate = ConditioningGate(client, options=FAST_OPTIONS | {"study": "topology"}, timeout=300)
        study = optuna.create_study(direction="maximize")
        for name in specs:
            study.enqueue_trial({"arch": name})
        kept = gate.prescreen(study, lambda t: specs[t.suggest_categorical("arch", list(specs))], n_trials=len(specs))
        for screened in kept:
            study.tell(screened.trial, 1.0)
        candidates = [client.get(t.user_attrs["preflight_candidate_id"]) for t in study.trials]
        summary = client.study_summary("topology")
    verdicts = {t.params["arch"]: t.user_attrs[ATTR_VERDICT] for t in study.trials}
    assert verdicts["sigmoid-30"] == "prune"
    assert all(verdicts[name] == "keep" for name in specs if name.startswith("relu"))
    assert summary["total"] == len(specs) and summary["counts"]["done"] == len(specs)
    workers = {c.data["worker"] for c in candidates}
    assert len(workers) == 2, f"both worker processes took jobs: {workers}"

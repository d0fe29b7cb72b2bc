"""docker-compose.yml and the Dockerfile, proven without a Docker engine: every command a
container runs is a real `preflight` command, every environment variable a real setting,
and the topology (healthcheck, one-shot migration, GPU reservation, separate Optuna
database) is what the README promises."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nas.validate import SpecLimits
from service.cli import build_parser
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
PREFLIGHT_SERVICES = sorted(name for name, s in SERVICES.items() if s.get("image") == "preflight:latest")


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with the variable unset: the default; a required
    ``${POSTGRES_PASSWORD:?...}``: the password a deployment would export (here "secret")."""
    value = re.sub(r"\$\{POSTGRES_PASSWORD:\?[^}]*\}", "secret", str(value))
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def test_compose_refuses_to_start_without_a_database_password() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    uses = re.findall(r"\$\{POSTGRES_PASSWORD([^}]*)\}", text)
    assert len(uses) == 3 and all(use.startswith(":?") for use in uses), uses  # required, never a default


def real_setting_names() -> dict[str, tuple[type, str]]:
    names: dict[str, tuple[type, str]] = {
        f"PREFLIGHT_{field.upper()}": (Settings, field) for field in Settings.model_fields
    }
    names |= {f"PREFLIGHT_SPEC_{field.upper()}": (SpecLimits, field) for field in SpecLimits.model_fields}
    return names


def test_the_preflight_roles_are_all_there() -> None:
    assert PREFLIGHT_SERVICES == ["api", "migrate", "worker"]


@pytest.mark.parametrize("name", PREFLIGHT_SERVICES)
def test_every_service_command_is_a_real_preflight_command(name: str) -> None:
    command = SERVICES[name]["command"]
    assert command[0] == "preflight"
    args = build_parser().parse_args(command[1:])  # argparse exits on anything unknown
    assert callable(args.handler)


def test_the_dockerfile_default_command_is_a_real_preflight_command() -> None:
    cmd = next(line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD "))
    command = json.loads(cmd[len("CMD ") :])
    assert command[0] == "preflight"
    assert callable(build_parser().parse_args(command[1:]).handler)


@pytest.mark.parametrize("name", PREFLIGHT_SERVICES)
def test_every_environment_variable_is_a_real_setting_with_a_valid_value(name: str) -> None:
    known = real_setting_names()
    environment = SERVICES[name].get("environment") or {}
    assert environment, f"{name} has no environment"
    for key, value in environment.items():
        assert key in known, f"{name}: {key} is not a setting (known: {sorted(known)})"
        model, field = known[key]
        model(**{field: interpolate(value)})  # pydantic refuses an invalid value


def test_migrations_wait_for_a_healthy_database_and_the_rest_for_migrations() -> None:
    postgres = SERVICES["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert any(v.startswith("pgdata:") for v in postgres["volumes"]) and "pgdata" in COMPOSE["volumes"]
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["migrate"]["restart"] == "no"
    for name in ("api", "worker"):
        assert SERVICES[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


def test_the_worker_reserves_every_gpu_and_supervises_one_child_per_gpu() -> None:
    worker = SERVICES["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert build_parser().parse_args(worker["command"][1:]).devices == "all"
    assert "replicas" not in worker.get("deploy", {})


def test_everything_uses_one_database_and_optuna_keeps_its_own() -> None:
    urls = {interpolate(SERVICES[n]["environment"]["PREFLIGHT_DATABASE_URL"]) for n in PREFLIGHT_SERVICES}
    assert urls == {"postgresql+psycopg://preflight:secret@postgres:5432/preflight"}
    dashboard_url = interpolate(SERVICES["dashboard"]["command"][0])
    assert dashboard_url.endswith("@postgres:5432/optuna")
    assert SERVICES["dashboard"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    init = "".join(p.read_text() for p in (ROOT / "deploy" / "postgres-init").glob("*.sql"))
    assert "CREATE DATABASE optuna" in init


def test_the_api_listens_beyond_localhost_only_with_tokens() -> None:
    api = SERVICES["api"]
    settings = Settings(
        host=build_parser().parse_args(api["command"][1:]).host,
        require_auth=interpolate(api["environment"]["PREFLIGHT_REQUIRE_AUTH"]),
    )
    assert settings.auth_required


def test_the_api_healthcheck_asks_a_real_endpoint() -> None:
    from service.api.app import create_app

    test = " ".join(SERVICES["api"]["healthcheck"]["test"])
    match = re.search(r"http://127\.0\.0\.1:8000(/[a-z]+)", test)
    assert match is not None
    path = match.group(1)
    assert path in create_app(Settings()).openapi()["paths"]


def test_the_worker_healthcheck_reads_the_file_its_workers_touch() -> None:
    worker = SERVICES["worker"]
    path = worker["environment"]["PREFLIGHT_WORKER_ALIVE_FILE"]
    test = " ".join(worker["healthcheck"]["test"])
    assert f"getmtime('{path}')" in test
    match = re.search(r"> (\d+)\)", test)
    assert match is not None
    limit = float(match.group(1))
    assert limit > Settings().heartbeat_seconds * 3  # the file is touched at most once a heartbeat

"""A controller installs only what it needs: the package without extras, in a fresh virtual
environment, builds specs and talks to a real server, and has neither FastAPI nor uvicorn (Optuna
brings SQLAlchemy and Alembic for its own storages)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # the CPU build where no GPU is present (the project's setup does the same)

CONTROLLER = r"""
import importlib.util, sys
import nas
from nas.client import PreflightClient
from nas.examples import EXAMPLE_MLP
from nas.testing import FAST_OPTIONS

# (SQLAlchemy and Alembic come with Optuna itself, for its own storages)
missing = [m for m in ("fastapi", "uvicorn", "prometheus_client") if importlib.util.find_spec(m) is not None]
assert not missing, f"the core install pulled server packages: {missing}"
model = nas.build_model(EXAMPLE_MLP, seed=0)
with PreflightClient(sys.argv[1]) as client:
    candidate = client.condition(EXAMPLE_MLP, FAST_OPTIONS, timeout=300)
report = candidate.require_report()
model = nas.build_model(EXAMPLE_MLP, scales=report.scales, seed=report.environment.seed)
print("ok", report.verdict)
"""


@pytest.mark.slow
def test_the_core_install_alone_runs_a_controller_against_a_server(tmp_path: Path, live_service: Any) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"

    def pip(*args: str) -> None:
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]

    pip(TORCH)
    pip(str(ROOT))  # no extras
    run = subprocess.run(
        [str(python), "-c", CONTROLLER, live_service.url], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().startswith("ok")

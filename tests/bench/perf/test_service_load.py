"""The service load benchmark runs end to end (briefly, on SQLite) and reports every phase
with no failed request, so `python -m bench.perf.service_load` cannot rot unnoticed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.perf import service_load


@pytest.mark.slow
def test_every_phase_runs_without_errors_and_reports_cpu_per_request(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    assert service_load.main(["--seconds", "0.5", "--warmup", "0.2", "--skip-postgres", "--json", str(out)]) == 0
    results = json.loads(out.read_text())

    phases = [r["phase"] for r in results]
    assert phases[0] == "GET /healthz (trivial)" and len(phases) == 5
    assert any(p.startswith("GET /v1/candidates/{id} (done") for p in phases)
    for r in results:
        assert r["errors"] == 0, r
        assert r["requests"] > 0 and r["server_cpu_ms"] > 0, r

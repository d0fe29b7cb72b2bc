"""A small fault run (20 jobs, one worker SIGKILL, one API restart, the skewed worker; no database
restart, which would disturb everything else on the server) keeps the queue's guarantees, so
`python -m bench.perf.fault_run` and the figures in docs/service.md cannot rot unnoticed.

It needs the PostgreSQL server named by PREFLIGHT_TEST_POSTGRES_URL (it creates and drops its own
scratch database there): skipped when that is unset or unreachable, failed instead when
PREFLIGHT_TEST_REQUIRE_POSTGRES=1, as the service's PostgreSQL tests do (tests/service/conftest.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from bench.perf import fault_run


def _postgres_url() -> str:
    """The server to run against, or skip (fail when PostgreSQL is required) with the reason."""
    url = os.environ.get("PREFLIGHT_TEST_POSTGRES_URL")
    problem = None
    if not url:
        problem = "PREFLIGHT_TEST_POSTGRES_URL is not set; the fault run needs a PostgreSQL server"
    else:
        admin = create_engine(
            make_url(url).set(database="postgres"), poolclass=NullPool, connect_args={"connect_timeout": 3}
        )
        try:
            with admin.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            problem = f"PostgreSQL not reachable at {make_url(url).render_as_string()} ({type(exc).__name__})"
        finally:
            admin.dispose()
    if problem is not None:
        if os.environ.get("PREFLIGHT_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    assert url is not None
    return url


@pytest.mark.slow
@pytest.mark.postgres
def test_a_small_fault_run_loses_nothing_doubles_nothing_and_answers_no_5xx(tmp_path: Path) -> None:
    url = _postgres_url()
    out = tmp_path / "fault_run.json"
    argv = ["--jobs", "20", "--worker-kills", "1", "--api-restarts", "1", "--db-restarts", "0"]
    argv += ["--submit-rate", "1.5", "--timeout", "240", "--postgres-url", url, "--json", str(out)]

    status = fault_run.main(argv)

    result = json.loads(out.read_text())
    figures = result["figures"]
    assert [f["kind"] for f in result["faults"]] == ["kill-worker", "restart-api"]
    assert figures["done"] == figures["acknowledged"] == 20 and figures["lost"] == 0, figures
    assert figures["completed_more_than_once"] == figures["duplicate_rows"] == 0, figures
    assert figures["completions_logged"] == 20, figures
    assert figures["http_5xx"] == 0 and figures["api_tracebacks_logged"] == 0, figures["http_statuses"]
    # at least once: a job re-runs only because its worker was killed (the skewed worker reaps no healthy lease)
    assert figures["re_executed"] <= 1 and figures["leases_reaped_logged"] <= 1, figures
    assert figures["api"]["read_by_id_done_with_report"] == 20, figures["api"]
    assert all(result["guarantees"].values()) and status == 0, result["guarantees"]

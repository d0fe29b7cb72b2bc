"""/docs rendered by a real browser, offline: headless Chromium (Debian's ``chromium``) loads the page
from a live server and the rendered page has the Authorize button and the candidates routes.

Skips when Chromium is absent, or fails when ``PREFLIGHT_REQUIRE_CHROMIUM=1`` (as in CI, which
installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from service.settings import Settings
from service.testing import live_server

pytestmark = pytest.mark.slow

# flags for a closed network (no background connections) and a throwaway profile
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=20000",  # let Swagger UI fetch /openapi.json and render before the dump
)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "Chromium is not installed: apt-get install chromium"
    if os.environ.get("PREFLIGHT_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"PREFLIGHT_REQUIRE_CHROMIUM=1 but: {message}")
    pytest.skip(message)


def test_the_docs_page_renders_offline_with_the_authorize_button_and_the_candidates_routes(tmp_path: Path) -> None:
    browser = _chromium()
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'preflight.db'}")
    with live_server(settings) as url:
        rendered = subprocess.run(
            [browser, *_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", f"{url}/docs"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    dom = rendered.stdout
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert "swagger-ui" in dom, dom[:2000]
    assert "authorize" in dom.lower() and ">Authorize<" in dom.replace(" ", ""), dom[:2000]  # the bearer scheme
    assert "/v1/candidates" in dom  # the routes, rendered from the app's own OpenAPI

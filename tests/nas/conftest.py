"""A real Preflight service for the nas tests: migrations, the API on a free port and an
embedded worker, on SQLite in a temporary folder (one per test session)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def live_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from service.embedded import EmbeddedService

    folder = tmp_path_factory.mktemp("preflight-service")
    with EmbeddedService(f"sqlite:///{folder / 'preflight.db'}", device="cpu", poll_seconds=0.02) as service:
        yield service


@pytest.fixture
def client(live_service: Any) -> Iterator[Any]:
    from nas.client import PreflightClient

    with PreflightClient(live_service.url, timeout=30.0) as client:
        yield client

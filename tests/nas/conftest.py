"""A real Preflight service for the nas tests: migrations, the API on a free port and an
embedded worker, on SQLite in a temporary folder (one per test session)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# Small tuning options (and no GR balancing, the engine's costliest stage) keep each
# conditioning around a second on a busy 2-core CPU; these tests are about the integration.
TINY_OPTIONS: dict[str, Any] = {
    "steps": 2, "batch_size": 8, "hessian_iterations": 2, "hessian_batch_size": 4, "balance": False,
}  # fmt: skip


def mlp(depth: int, activation: str, width: int = 32, name: str | None = None) -> dict[str, Any]:
    hidden = [{"layers": [{"type": "linear", "out": width}, {"type": activation}]} for _ in range(depth)]
    return {"name": name or f"mlp-{depth}-{activation}", "input_shape": [64],
            "blocks": [*hidden, {"layers": [{"type": "linear", "out": 10}]}]}  # fmt: skip


# A clearly ill-conditioned candidate (30 sigmoid layers: the gradient vanishes) and a
# well-conditioned one (a shallow ReLU MLP under Kaiming fan-in).
ILL = mlp(30, "sigmoid", width=16, name="ill-30-sigmoid")
WELL = mlp(2, "relu", name="well-2-relu")


@pytest.fixture(scope="session")
def live_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from service.cli._embedded import EmbeddedService

    folder = tmp_path_factory.mktemp("preflight-service")
    with EmbeddedService(f"sqlite:///{folder / 'preflight.db'}", device="cpu", poll_seconds=0.02) as service:
        yield service


@pytest.fixture
def client(live_service: Any) -> Iterator[Any]:
    from nas.client import PreflightClient

    with PreflightClient(live_service.url, timeout=30.0) as client:
        yield client

"""Shared pieces of the Fashion-MNIST search's tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def residual_params() -> dict[str, Any]:
    """A small residual network of the search space, as Optuna parameters (the rate added per test)."""
    return {
        "family": "residual",
        "res_depth": 2,
        "res_width": 8,
        "res_body_layers": 1,
        "res_beta": 0.5,
        "res_activation": "relu",
        "res_norm": "none",
        "res_init_scheme": "fan_in",
        "res_init_gain": 1.0,
    }

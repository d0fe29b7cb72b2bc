"""The score's calibration, shipped with the engine: ``worker/score_weights.json``.

Written by ``python -m bench.calibrate`` from the trainability benchmark's cache (never by
hand); read once at import by ``worker.score`` (weights, fills) and ``worker.options``
(the default prune cut ``Thresholds.score``). The file's form and provenance are described
in ``worker/score.py`` and ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["COMPONENTS", "FILE", "NON_FINITE_PENALTY", "load"]

FILE = "score_weights.json"
NON_FINITE_PENALTY = 100.0  # a hard failure: ranks below every finite candidate in practice
COMPONENTS = (
    "gamma_log_spread",
    "hessian_log_spread",
    "jacobian_log",
    "kappa_d_log",
    "kernel_log_range",
    "output_log_ratio",
)


@cache
def load(text: str | None = None) -> dict[str, Any]:
    """The calibration (``text``: the file's content; None: the shipped file), validated: one
    finite, non-negative weight and fill per name of ``COMPONENTS`` and a finite cut."""
    data = json.loads(text if text is not None else resources.files("worker").joinpath(FILE).read_text())
    for key in ("weights", "fill"):
        values = data.get(key) or {}
        if set(values) != set(COMPONENTS):
            raise ValueError(f"{FILE}: {key!r} must name {list(COMPONENTS)}, but got {sorted(values)}; regenerate it with python -m bench.calibrate")
        bad = {k: v for k, v in values.items() if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0)}
        if bad:
            raise ValueError(f"{FILE}: {key!r} must be finite and >= 0, but got {bad}")
    cut = data.get("prune_below")
    if not (isinstance(cut, int | float) and math.isfinite(cut)):
        raise ValueError(f"{FILE}: 'prune_below' must be a finite number, but got {cut!r}")
    return data

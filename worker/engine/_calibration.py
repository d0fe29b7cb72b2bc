"""The score's calibration, shipped with the engine: ``worker/engine/score_weights.json``.

Written by ``python -m bench.pipeline.calibrate`` from the trainability benchmark's cache (never by
hand); read once at import by ``worker.engine.score``. The file holds two fits of the same form: the
top level is the fit with the trainability probe (``probe_loss``, the default), and
``without_probe`` the fit of the other components alone, which scores a candidate whose probe
did not run (``probe_steps: 0``, or a forward pass already non-finite). The form and the
provenance are described in ``worker/engine/score.py`` and ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["COMPONENTS", "FILE", "FITS", "NON_FINITE_PENALTY", "PROBE", "fit", "load"]

FILE = "score_weights.json"
NON_FINITE_PENALTY = 100.0  # a hard failure: ranks below every finite candidate in practice
PROBE = "probe_loss"
COMPONENTS = (
    "gamma_log_spread",
    "hessian_log_spread",
    "jacobian_log",
    "kappa_d_log",
    "kernel_log_range",
    "output_log_ratio",
    PROBE,
)
FITS = ("with_probe", "without_probe")


@cache
def load(text: str | None = None) -> dict[str, Any]:
    """The calibration (``text``: the file's content; None: the shipped file), validated: per
    fit, one finite, non-negative weight and fill per name of ``COMPONENTS`` and a finite cut;
    the fit without the probe gives ``probe_loss`` no weight."""
    data = json.loads(text if text is not None else resources.files("worker.engine").joinpath(FILE).read_text())
    _check_fit(data, "")
    alone = data.get("without_probe")
    if not isinstance(alone, dict):
        raise ValueError(
            f"{FILE}: 'without_probe' must hold the fit without the probe; regenerate it with python -m "
            "bench.pipeline.calibrate"
        )
    _check_fit(alone, "without_probe.")
    if alone["weights"][PROBE] != 0:
        raise ValueError(f"{FILE}: 'without_probe.weights.{PROBE}' must be 0, but got {alone['weights'][PROBE]!r}")
    return data


def fit(name: str) -> dict[str, Any]:
    """One fit of the shipped file: ``"with_probe"`` (the top level) or ``"without_probe"``."""
    data = load()
    return data if name == "with_probe" else data["without_probe"]


def _check_fit(data: dict[str, Any], where: str) -> None:
    for key in ("weights", "fill"):
        values = data.get(key) or {}
        if set(values) != set(COMPONENTS):
            raise ValueError(
                f"{FILE}: '{where}{key}' must name {list(COMPONENTS)}, but got {sorted(values)}; regenerate it with "
                "python -m bench.pipeline.calibrate"
            )
        bad = {k: v for k, v in values.items() if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0)}
        if bad:
            raise ValueError(f"{FILE}: '{where}{key}' must be finite and >= 0, but got {bad}")
    cut = data.get("prune_below")
    if not (isinstance(cut, int | float) and math.isfinite(cut)):
        raise ValueError(f"{FILE}: '{where}prune_below' must be a finite number, but got {cut!r}")

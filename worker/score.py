"""One conditioning score (higher is better, 0 is perfect) and a keep / prune verdict.

Every component is a non-negative number in log space (a factor of e is 1), computed in
float64 from what the engine measured *after* conditioning:

=====================  ============================================================
jacobian_log           max over tuning units of |log J_u - log rho_u| (AutoInit eq. 12)
kernel_log_range       max over inner boundaries of |log K^l / K^0 - sum log rho| (eq. 24)
output_log_ratio       |log(output std / target)| (scaling paper, section 10)
gamma_log_spread       std of log gamma_l across hidden weighted layers (scaling paper, eq. 2)
hessian_log_spread     std of log top Hessian eigenvalue across hidden layers (Hessian paper)
kappa_d_log            log of the largest kappa(D) (BNP paper, section 5.1)
non_finite             1 when a forward value or the tuning was non-finite, else 0
=====================  ============================================================

The penalty of a component is ``WEIGHTS[c] * (value / threshold_c)^2``: 1 at its threshold,
growing quadratically; the score is minus the sum. A missing component (its diagnostic did
not run) has no penalty. The verdict is ``prune`` when the score is below
``thresholds.score`` or ``non_finite`` is set. ``WEIGHTS`` and ``options.Thresholds`` are
the only knobs, so the trainability benchmark can calibrate them (fit weights to observed
trainability) without touching the measurement code. NaN policy: a NaN component counts as
a hard failure (``non_finite``), never as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from worker.options import Thresholds

__all__ = ["WEIGHTS", "ScoreResult", "score"]

WEIGHTS: dict[str, float] = {
    "jacobian_log": 1.0,
    "kernel_log_range": 0.5,
    "output_log_ratio": 1.0,
    "gamma_log_spread": 0.25,
    "hessian_log_spread": 0.25,
    "kappa_d_log": 0.25,
    "non_finite": 100.0,
}

_THRESHOLD_FIELD = {
    "jacobian_log": "jacobian_log",
    "kernel_log_range": "kernel_log_ratio",
    "output_log_ratio": "output_log_ratio",
    "gamma_log_spread": "gamma_log_spread",
    "hessian_log_spread": "hessian_log_spread",
    "kappa_d_log": "kappa_d_log",
}


@dataclass(frozen=True)
class ScoreResult:
    score: float
    verdict: str
    components: dict[str, float | None]
    penalties: dict[str, float | None]
    over: list[str]  # components at or above their threshold, worst first


def score(components: dict[str, float | None], thresholds: Thresholds) -> ScoreResult:
    """Combine components (names as in ``WEIGHTS``; None = not measured) into the score.

    >>> score({"jacobian_log": 0.0, "non_finite": 0.0}, Thresholds()).verdict
    'keep'
    """
    unknown = sorted(set(components) - set(WEIGHTS))
    if unknown:
        raise ValueError(f"unknown score components {unknown}; expected names from {sorted(WEIGHTS)}")
    values = dict(components)
    if any(v is not None and not math.isfinite(v) for v in values.values()):
        values = {k: (None if v is not None and not math.isfinite(v) else v) for k, v in values.items()}
        values["non_finite"] = 1.0
    penalties: dict[str, float | None] = {}
    for name, value in values.items():
        if value is None:
            penalties[name] = None
            continue
        scale = getattr(thresholds, _THRESHOLD_FIELD[name]) if name in _THRESHOLD_FIELD else 1.0
        penalties[name] = WEIGHTS[name] * (abs(value) / scale) ** 2
    total = -math.fsum(p for p in penalties.values() if p is not None)
    over = sorted((k for k, p in penalties.items() if p is not None and p >= WEIGHTS[k]), key=lambda k: -(penalties[k] or 0.0))
    hard = (values.get("non_finite") or 0.0) > 0
    verdict = "prune" if hard or total < thresholds.score else "keep"
    return ScoreResult(score=total, verdict=verdict, components=values, penalties=penalties, over=over)

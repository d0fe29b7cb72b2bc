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
probe_loss             batch loss after a few SGD steps from the tuned init, over the uniform
                       (or mean) prediction's (``worker.engine.probe``; 1 = nothing learned)
non_finite             1 when a forward value or the tuning was non-finite, else 0
=====================  ============================================================

The score is calibrated on the trainability benchmark (``docs/benchmarks.md``)::

    score = -sum_c w_c * f_c,   f_c = log1p(|c| / t_c)   if c was measured
                                f_c = fill_c             if not (None)

with t_c the component's threshold (``options.Thresholds``; the ratio |c| / t_c capped at the
largest float, so that a subnormal t_c cannot make the score NaN), and the weights w_c >= 0, the
fills and the prune cut loaded from ``score_weights.json`` beside this module. That file holds
two fits: with the trainability probe (``probe_loss``, measured by default) and without it; a
report whose probe did not run is scored by the second, the best the other components can do
alone, and its own cut (``ScoreResult.fit`` says which; ``thresholds.score`` overrides both
cuts). That file is written by ``python -m bench.pipeline.calibrate`` (a non-negative
least-squares fit, on the benchmark's training half, of the trained loss from Preflight's
tuned initialization: what a gated search trains its survivors from); never edit it by hand.
A component at its threshold costs ``w_c ln 2`` and is named in the reasons; one with weight 0
does not move the score but is still named when over its threshold (the diagnosis is true).

Missing components: a diagnostic skipped under the cost budget (``tuning.hessian_measured``
empty) or not applicable leaves its component None, and it costs ``w_c * fill_c``, the mean
penalty of that component where the benchmark measured it: a skipped diagnostic is neither a
reward nor a punishment. NaN policy: a NaN or infinite component counts as not measured and
sets ``non_finite``, a hard failure: ``NON_FINITE_PENALTY`` more and the verdict ``prune``
whatever the score. The verdict is ``prune`` when the score is below the cut.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from nas.options import Thresholds
from worker.engine._calibration import FITS, NON_FINITE_PENALTY, PROBE, fit

__all__ = ["CUTS", "FILLS", "FIT_FILLS", "FIT_WEIGHTS", "NON_FINITE_PENALTY", "WEIGHTS", "ScoreResult", "score"]

_THRESHOLD_FIELD = {
    "jacobian_log": "jacobian_log",
    "kernel_log_range": "kernel_log_ratio",
    "output_log_ratio": "output_log_ratio",
    "gamma_log_spread": "gamma_log_spread",
    "hessian_log_spread": "hessian_log_spread",
    "kappa_d_log": "kappa_d_log",
    "probe_loss": "probe_loss",
}

FIT_WEIGHTS: dict[str, dict[str, float]] = {f: {k: float(v) for k, v in fit(f)["weights"].items()} for f in FITS}
FIT_FILLS: dict[str, dict[str, float]] = {f: {k: float(v) for k, v in fit(f)["fill"].items()} for f in FITS}
CUTS: dict[str, float] = {f: float(fit(f)["prune_below"]) for f in FITS}
WEIGHTS, FILLS = FIT_WEIGHTS["with_probe"], FIT_FILLS["with_probe"]  # the default fit
_NAMES = {*WEIGHTS, "non_finite"}


@dataclass(frozen=True)
class ScoreResult:
    score: float
    verdict: str
    components: dict[str, float | None]
    penalties: dict[str, float | None]  # what each component cost; a missing one its fill's
    over: list[str]  # measured components at or above their threshold, worst first
    fit: str = "with_probe"  # which calibration scored it: "with_probe" | "without_probe"
    cut: float = 0.0  # the verdict's cut: thresholds.score, else the fit's calibrated one


_LARGEST_RATIO = sys.float_info.max  # |c| / t_c past it (a subnormal threshold) costs log1p of it, 709.8


def _penalty(name: str, value: float | None, thresholds: Thresholds, which: str) -> float:
    """``w_c log1p(|c| / t_c)``, or ``w_c fill_c`` for a missing component. The ratio is capped at
    the largest float: a tiny threshold overflows it to infinity, and a zero weight times an infinite
    log would make the score NaN, which no cut compares below (the verdict would be keep)."""
    weight = FIT_WEIGHTS[which][name]
    if value is None:
        return weight * FIT_FILLS[which][name]
    return weight * math.log1p(min(abs(value) / getattr(thresholds, _THRESHOLD_FIELD[name]), _LARGEST_RATIO))


def score(components: dict[str, float | None], thresholds: Thresholds) -> ScoreResult:
    """Combine components (names as in ``WEIGHTS`` plus ``non_finite``; None = not measured,
    a name left out likewise) into the score.

    >>> score({"jacobian_log": 0.0, "non_finite": 0.0}, Thresholds()).verdict
    'keep'
    """
    unknown = sorted(set(components) - _NAMES)
    if unknown:
        raise ValueError(f"unknown score components {unknown}; expected names from {sorted(_NAMES)}")
    values = dict(components)
    if any(v is not None and not math.isfinite(v) for v in values.values()):
        values = {k: (None if v is not None and not math.isfinite(v) else v) for k, v in values.items()}
        values["non_finite"] = 1.0
    hard = (values.get("non_finite") or 0.0) > 0
    which = "with_probe" if values.get(PROBE) is not None else "without_probe"
    weights = FIT_WEIGHTS[which]
    penalties: dict[str, float | None] = {name: _penalty(name, values.get(name), thresholds, which) for name in weights}
    penalties["non_finite"] = NON_FINITE_PENALTY if hard else 0.0
    total = -math.fsum(p for p in penalties.values() if p is not None)
    ratio = {
        name: abs(values[name] or 0.0) / getattr(thresholds, _THRESHOLD_FIELD[name])
        for name in weights
        if values.get(name) is not None
    }
    # weighted components by penalty, then the zero-weight ones (still a true diagnosis) by ratio
    over = sorted((k for k, r in ratio.items() if r >= 1.0), key=lambda k: (-(penalties[k] or 0.0), -ratio[k]))
    if hard:
        over.insert(0, "non_finite")
    cut = CUTS[which] if thresholds.score is None else thresholds.score
    verdict = "prune" if hard or total < cut else "keep"
    return ScoreResult(
        score=total, verdict=verdict, components=values, penalties=penalties, over=over, fit=which, cut=cut
    )

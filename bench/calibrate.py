"""Calibrate Preflight's score components on the benchmark: a reproducible fit.

The engine's score (``worker.score``) combines non-negative log-space components c with
thresholds t_c. This module fits, on a *training split* of the candidates, non-negative
weights for the form

    calibrated = -sum_c w_c * log1p(c / t_c)

by non-negative least squares (``scipy.optimize.nnls``, with an intercept column) against
the trained loss of the spec initialization normalized by the chance loss and capped at 1
(every loss at or above chance is equally untrainable). ``log1p`` keeps a single huge
component from dominating the fit; non-negativity keeps every component's direction
(larger = worse) as the engine defines it. The prune threshold is the cut on the training
split with the best precision among those reaching recall >= ``RECALL_TARGET``.

The split is deterministic: within each family, candidates in id order alternate
train / held-out, so both halves cover every family. Figures are reported on the held-out
half only. The fit writes JSON; it never edits ``worker/`` (the engine owns ``WEIGHTS``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import nnls

from bench.metrics import precision_recall_curve

__all__ = ["RECALL_TARGET", "apply", "features", "fit", "split"]

RECALL_TARGET = 0.8


def split(ids_by_family: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """(train ids, held-out ids): alternate within each family in sorted id order."""
    train, held = [], []
    for ids in ids_by_family.values():
        for i, cid in enumerate(sorted(ids)):
            (train if i % 2 == 0 else held).append(cid)
    return train, held


def features(
    components: dict[str, float | None], thresholds: dict[str, float], names: Sequence[str]
) -> np.ndarray:
    """``log1p(c / t_c)`` per component name; a component not measured counts as 0 (no
    penalty, the engine's policy); a non-finite one as the largest value, 50."""
    row = []
    for name in names:
        value = components.get(name)
        if value is None:
            row.append(0.0)
            continue
        value = abs(float(value))
        scaled = math.log1p(value / thresholds.get(name, 1.0)) if math.isfinite(value) else 50.0
        row.append(min(scaled, 50.0))
    return np.asarray(row, dtype=np.float64)


def fit(
    rows: list[np.ndarray],
    targets: Sequence[float],
    untrainable: Sequence[bool],
    names: Sequence[str],
) -> dict[str, Any]:
    """NNLS fit of ``targets`` (capped normalized loss) on the features, plus the threshold."""
    x = np.vstack(rows)
    y = np.minimum(np.asarray(targets, dtype=np.float64), 1.0)
    design = np.hstack([np.ones((len(x), 1)), x])
    coef, residual = nnls(design, y)
    weights = {name: float(w) for name, w in zip(names, coef[1:], strict=True)}
    scores = -(x @ coef[1:])
    model = {
        "form": "calibrated = -sum_c w_c * log1p(c / t_c)",
        "weights": weights,
        "intercept": float(coef[0]),
        "train_rmse": float(residual / math.sqrt(len(y))),
        "prune_below": _threshold(scores, untrainable),
        "recall_target": RECALL_TARGET,
    }
    return model


def _threshold(scores: np.ndarray, untrainable: Sequence[bool]) -> float:
    """The score cut with the best training-split precision at recall >= RECALL_TARGET:
    prune when ``calibrated < prune_below`` (midpoint between neighbouring scores)."""
    order = np.sort(scores)
    precision, recall = precision_recall_curve(scores, untrainable)
    ok = np.nonzero(recall >= RECALL_TARGET)[0]
    if len(ok) == 0:
        return float(order[-1]) + 1.0
    k = int(ok[np.argmax(precision[ok])])  # prune the k + 1 lowest scores
    upper = order[k + 1] if k + 1 < len(order) else order[k] + 1.0
    return float((order[k] + upper) / 2.0)


def apply(model: dict[str, Any], row: np.ndarray, names: Sequence[str]) -> float:
    """The calibrated score of one candidate's feature row."""
    return -float(sum(model["weights"][n] * v for n, v in zip(names, row, strict=True)))

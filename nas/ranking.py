"""Rank candidates that all train, by a fit on the candidates a search has already trained.

The score and the verdict say whether a network can train; among networks that all train they rank
little (docs/nasbench201.md: 0.36 on NAS-Bench-201). What ranks trainable networks depends
on the space and on the training budget: the network's size ranks NAS-Bench-201's 200-epoch
accuracies well and benchmark v2's two-epoch losses backwards. So no weights are shipped: a search
fits them on the candidates it has trained, from what their reports measured (``FEATURES``), and
ranks the next ones by the fit (:class:`Ranker`; :class:`nas.gate.ConditioningGate`'s ``rank``).

The fit is a ridge regression of the objective's normal scores (its ranks mapped through the
normal quantile) on the standardized features, each oriented so that higher predicts better; a
value the report lacks gets the trained candidates' worst in that orientation (where the fit turns a
feature's weight negative, as the size's can be, that fill reads as the best: the size is missing
only when the client could not read the spec). The shipped score (calibrated on
benchmark v2's development set) is not shrunk, so a fit on a few candidates starts from it; every
other feature is, by the penalty of a small grid with the lowest leave-one-out error (closed form),
so that a fit on 20 candidates leans on the score and one on 200 on whatever ranks the space.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from nas.report import ConditioningReport

__all__ = [
    "FEATURES",
    "RIDGES",
    "RankDecision",
    "Ranker",
    "normal_scores",
    "quantile_among",
    "rank_among_trained",
    "ranking_features",
    "ridge_weights",
]

# name -> +1 when higher predicts a better network, -1 when lower does. The score is higher for a
# network predicted to train; its components are penalties (higher is worse); the expressivity terms
# are measured with options.expressivity; the size is the spec's parameter count (nas.summarize).
FEATURES: dict[str, float] = {
    "score": 1.0,
    "probe_loss": -1.0,
    "kernel_log_range": -1.0,
    "jacobian_log": -1.0,
    "non_finite": -1.0,
    "output_log_ratio": -1.0,
    "naswot": 1.0,
    "meco": 1.0,
    "log_params": 1.0,
}
RIDGES = (1e-2, 1e-1, 1.0, 10.0, 100.0)  # the penalties leave-one-out chooses among
# not shrunk: the shipped score, calibrated on benchmark v2's development set, is where a fit on a
# few candidates starts from; the ridge shrinks every other feature towards nothing
UNPENALIZED = frozenset({"score"})


def ranking_features(report: ConditioningReport, parameters: int | None = None) -> dict[str, float | None]:
    """What ``report`` measured that :class:`Ranker` reads (None where it did not measure it):
    its score and components, its expressivity terms, and ``log10`` of ``parameters`` (the spec's
    count, ``nas.summarize(spec).parameters``) when given."""
    out: dict[str, float | None] = {name: _finite(report.components.get(name)) for name in FEATURES}
    out["score"] = _finite(report.score)
    expressivity = report.expressivity
    out["naswot"] = _finite(expressivity.naswot) if expressivity else None
    out["meco"] = _finite(expressivity.meco) if expressivity else None
    out["log_params"] = math.log10(parameters) if parameters else None
    return out


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


@dataclass(frozen=True)
class Ranker:
    """A fitted ranking: :meth:`predict` is higher for the candidates predicted to do better."""

    names: tuple[str, ...]
    worst: np.ndarray  # per feature, the fill for a missing value (oriented: higher is better)
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    ridge: float

    @classmethod
    def fit(
        cls,
        rows: Sequence[Mapping[str, float | None]],
        values: Sequence[float],
        *,
        higher_is_better: bool = True,
        ridge: float | None = None,
    ) -> Ranker:
        """Fit on trained candidates: ``rows`` their :func:`ranking_features`, ``values`` their
        objective (``higher_is_better``: its direction). ``ridge`` None chooses the penalty among
        ``RIDGES`` by leave-one-out error. A feature measured on fewer than two of the rows, or
        constant over them, is left out."""
        if len(rows) != len(values):
            raise ValueError(f"rows and values differ in length: {len(rows)} and {len(values)}.")
        y = np.asarray(values, dtype=np.float64)
        if len(y) < 3 or not np.isfinite(y).all():
            raise ValueError(f"a ranking needs at least 3 trained candidates with finite values, got {len(y)}.")
        x = _oriented(rows, tuple(FEATURES))
        kept = [j for j in range(x.shape[1]) if np.isfinite(x[:, j]).sum() >= 2]
        x = x[:, kept]
        names = tuple(np.array(list(FEATURES))[kept])
        worst = np.array([np.nanmin(col) for col in x.T])
        filled = np.where(np.isnan(x), worst, x)
        mean, std = filled.mean(axis=0), filled.std(axis=0)
        varies = std > 1e-9 * np.maximum(1.0, np.abs(mean))  # rounding noise is not a feature
        names, worst, mean, std = tuple(np.array(names)[varies]), worst[varies], mean[varies], std[varies]
        z = (filled[:, varies] - mean) / std
        target = normal_scores(y if higher_is_better else -y)
        shrunk = np.array([name not in UNPENALIZED for name in names], dtype=np.float64)
        penalty = ridge if ridge is not None else min(RIDGES, key=lambda r: _loo_error(z, target, r * shrunk))
        weights = ridge_weights(z, target, penalty * shrunk)
        return cls(names, worst, mean, std, weights, penalty)

    def predict(self, rows: Sequence[Mapping[str, float | None]]) -> np.ndarray:
        """Higher predicts a better candidate (a normal score of the objective's rank)."""
        x = _oriented(rows, self.names)
        z = (np.where(np.isnan(x), self.worst, x) - self.mean) / self.std
        return np.asarray(z @ self.weights, dtype=np.float64)

    def describe(self) -> str:
        terms = ", ".join(f"{n} {w:+.2f}" for n, w in zip(self.names, self.weights, strict=True))
        return f"{terms} (ridge {self.ridge:g})"


def _oriented(rows: Sequence[Mapping[str, float | None]], names: Sequence[str]) -> np.ndarray:
    """``[rows, names]``, each oriented higher-is-better; nan where a row lacks the value."""
    out = np.full((len(rows), len(names)), np.nan)
    for i, row in enumerate(rows):
        for j, name in enumerate(names):
            value = row.get(name)
            if value is not None and math.isfinite(value):
                out[i, j] = FEATURES[name] * value
    return out


def normal_scores(y: np.ndarray) -> np.ndarray:
    """The ranks of ``y`` (ties averaged) mapped through the normal quantile: a target that no
    outlier dominates."""
    order = np.argsort(y, kind="stable")
    ranks = np.empty(len(y))
    ranks[order] = np.arange(1, len(y) + 1)
    for value in np.unique(y):  # ties share their mean rank
        tied = y == value
        ranks[tied] = ranks[tied].mean()
    quantile = NormalDist().inv_cdf
    return np.array([quantile((r - 0.5) / len(y)) for r in ranks])


def ridge_weights(z: np.ndarray, target: np.ndarray, ridge: np.ndarray | float) -> np.ndarray:
    """The weights minimizing ``|target - z w|^2 / n + w' diag(ridge) w``; ``ridge`` per feature
    (0: not shrunk) or one for all."""
    n = len(z)
    return np.linalg.solve(z.T @ z / n + _penalty(ridge, z.shape[1]), z.T @ target / n)


def _penalty(ridge: np.ndarray | float, features: int) -> np.ndarray:
    """``diag(ridge)``, with a 1e-9 floor so that an unshrunk feature never makes it singular."""
    return np.diag(np.broadcast_to(np.asarray(ridge, dtype=np.float64), (features,))) + 1e-9 * np.eye(features)


def _loo_error(z: np.ndarray, target: np.ndarray, ridge: np.ndarray | float) -> float:
    """Mean squared leave-one-out error of the ridge fit with an unpenalized intercept, from its
    hat matrix (no refits). ``z``'s columns are centred, so the intercept's hat matrix (1/n
    everywhere) adds to the features' and the intercept is the target's mean; tied objective
    values leave the normal scores' mean off zero."""
    n = len(z)
    hat = z @ np.linalg.solve(z.T @ z + n * _penalty(ridge, z.shape[1]), z.T)
    centred = target - target.mean()
    leverage = np.diag(hat) + 1.0 / n
    residual = (centred - hat @ centred) / np.maximum(1.0 - leverage, 1e-12)
    return float(np.mean(residual**2))


@dataclass(frozen=True)
class RankDecision:
    """Where a candidate's prediction falls among the trained candidates' (in-sample) ones."""

    quantile: float  # the share of trained candidates predicted below it (ties half)
    keep: bool
    ranker: Ranker


def quantile_among(theirs: np.ndarray, mine: float) -> float:
    """The share of ``theirs`` below ``mine``, ties (within float noise: a copy of a trained row
    ties it) counting half."""
    tied = np.isclose(theirs, mine, rtol=1e-9, atol=1e-12)
    return float((np.sum((theirs < mine) & ~tied) + 0.5 * np.sum(tied)) / len(theirs))


def rank_among_trained(
    trained: Sequence[Mapping[str, float | None]],
    values: Sequence[float],
    candidate: Mapping[str, float | None],
    *,
    below: float,
    higher_is_better: bool = True,
) -> RankDecision:
    """Fit a :class:`Ranker` on the trained candidates (``trained`` their features, ``values``
    their objective) and keep ``candidate`` unless its prediction falls below the ``below``
    quantile of theirs: ``below`` 0.5 skips a candidate predicted worse than half of what the
    search has trained. A fit that cannot tell the trained candidates apart (no feature varies, or
    every objective value is the same) keeps every candidate: it knows nothing to skip by."""
    if not 0.0 < below < 1.0:
        raise ValueError(f"below must be a quantile in (0, 1), but got {below=}.")
    ranker = Ranker.fit(trained, values, higher_is_better=higher_is_better)
    theirs = ranker.predict(trained)
    quantile = quantile_among(theirs, float(ranker.predict([candidate])[0]))
    informed = bool(np.ptp(theirs) > 1e-9)
    return RankDecision(quantile, quantile >= below or not informed, ranker)

"""Rank correlations, pruning precision and recall, the tuning comparison, and how a ranking fitted
on a few trained candidates ranks the others.

NaN policy: a score that is ``nan`` (the method could not score the candidate) ranks as the
worst score, ``-inf``; a trained loss that is ``inf`` (diverged) ranks as the worst loss.
Every score follows higher = better, so a good method has a *positive* correlation with
``-loss`` and with accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy import stats

__all__ = [
    "PruneFigures",
    "kendall",
    "nan_as_worst",
    "precision_at_recall",
    "precision_recall_curve",
    "prune_fraction",
    "ranking_curve",
    "ranking_curve_cells",
    "spearman",
    "tuning_comparison",
]


# what the functions below take: a list or an array, of scores (or losses) and of untrainable flags
Values = Sequence[float] | np.ndarray
Flags = Sequence[bool] | np.ndarray


def nan_as_worst(values: Values) -> np.ndarray:
    """Scores as float64 with a NaN at -inf: a score that could not be computed ranks worst."""
    array = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(array), -np.inf, array)


def _finite_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with +-inf allowed (scipy's rankdata orders infinities correctly)."""
    return stats.rankdata(values)


def spearman(scores: Values, targets: Values) -> float:
    """Spearman's rho between scores and targets (nan policy above); nan if constant.

    >>> spearman([1, 2, 3], [10, 20, 30])
    1.0
    """
    a, b = _finite_ranks(nan_as_worst(scores)), _finite_ranks(nan_as_worst(targets))
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def kendall(scores: Values, targets: Values) -> float:
    """Kendall's tau-b between scores and targets (nan policy above); nan if constant."""
    a, b = _finite_ranks(nan_as_worst(scores)), _finite_ranks(nan_as_worst(targets))
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(stats.kendalltau(a, b).statistic)


@dataclass(frozen=True)
class PruneFigures:
    flagged: int
    precision: float  # nan when nothing is flagged
    recall: float  # nan when nothing is untrainable


def _figures(flag: np.ndarray, bad: np.ndarray) -> PruneFigures:
    hits = int((flag & bad).sum())
    precision = hits / flag.sum() if flag.sum() else math.nan
    recall = hits / bad.sum() if bad.sum() else math.nan
    return PruneFigures(int(flag.sum()), float(precision), float(recall))


def prune_fraction(scores: Values, untrainable: Flags, fraction: float = 0.25) -> PruneFigures:
    """Flag the worst ``fraction`` of candidates by score (ties broken by position)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], but got {fraction=}.")
    s = nan_as_worst(scores)
    k = int(round(fraction * len(s)))
    flag = np.zeros(len(s), dtype=bool)
    flag[np.argsort(s, kind="stable")[:k]] = True
    return _figures(flag, np.asarray(untrainable, dtype=bool))


def flags_figures(flags: Flags, untrainable: Flags) -> PruneFigures:
    """Precision and recall of an explicit set of flags (e.g. Preflight's ``prune`` verdict)."""
    return _figures(np.asarray(flags, dtype=bool), np.asarray(untrainable, dtype=bool))


def precision_recall_curve(scores: Values, untrainable: Flags) -> tuple[np.ndarray, np.ndarray]:
    """Precision and recall when pruning the worst k candidates, k = 1..n; nan at a k that splits
    candidates of one score, which no threshold on the score can prune apart (the split followed
    the input's order: the NAS-Bench-201 cells came lowest accuracy first, so a proxy with ties
    flagged the bad ones of a tie first)."""
    s = nan_as_worst(scores)
    order = np.argsort(s, kind="stable")
    bad = np.asarray(untrainable, dtype=bool)[order]
    hits = np.cumsum(bad)
    k = np.arange(1, len(s) + 1)
    recall = hits / bad.sum() if bad.sum() else np.full(len(s), np.nan)
    precision = hits / k
    inside_a_tie = np.append(s[order][1:] == s[order][:-1], False)
    precision[inside_a_tie] = np.nan
    recall = np.where(inside_a_tie, np.nan, recall)
    return precision, recall


def precision_at_recall(scores: Values, untrainable: Flags, recall: float = 0.8) -> float:
    """The best precision any pruning threshold reaches with at least ``recall``."""
    p, r = precision_recall_curve(scores, untrainable)
    ok = r >= recall
    return float(p[ok].max()) if ok.any() else math.nan


def tuning_comparison(tuned: Values, other: Values) -> dict[str, float]:
    """Per candidate, tuned vs another initialization's trained loss (lower is better).

    ``better``: fraction where tuned is strictly lower; ``median_improvement``: median of
    ``other - tuned``; ``median_log_ratio``: median of ``ln(other / tuned)`` (positive when
    tuned is better). Pairs where both diverged are excluded; one-sided divergence counts
    fully for the side that trained.
    """
    t, o = np.asarray(tuned, dtype=np.float64), np.asarray(other, dtype=np.float64)
    keep = ~(np.isinf(t) & np.isinf(o)) & ~np.isnan(t) & ~np.isnan(o)
    t, o = t[keep], o[keep]
    if len(t) == 0:
        return {
            "n": 0,
            "better": math.nan,
            "median_improvement": math.nan,
            "median_log_ratio": math.nan,
        }
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(np.maximum(o, 1e-12) / np.maximum(t, 1e-12))
    return {
        "n": int(len(t)),
        "better": float((t < o).mean()),
        "median_improvement": float(np.median(o - t)),
        "median_log_ratio": float(np.median(ratio)),
    }


def ranking_curve(
    features: Sequence[dict[str, float | None]],
    values: Values,
    trained: int,
    draws: int,
    rng: np.random.Generator,
    baselines: Mapping[str, Values] | None = None,
) -> dict[str, list[float]]:
    """``nas.ranking.Ranker`` fitted on ``trained`` candidates drawn at random, ``draws`` times: its
    Spearman with ``values`` on the other candidates (``"fit"``), and each baseline score's on the
    same others (higher is better). How many trained candidates a search needs before its fit ranks
    the rest as well as a fixed score."""
    from nas.ranking import Ranker

    target = np.asarray(values, dtype=np.float64)
    columns = {name: np.asarray(v, dtype=np.float64) for name, v in (baselines or {}).items()}
    out: dict[str, list[float]] = {"fit": [], **{name: [] for name in columns}}
    for _ in range(draws):
        chosen = rng.choice(len(target), trained, replace=False)
        rest = np.setdiff1d(np.arange(len(target)), chosen)
        ranker = Ranker.fit([features[i] for i in chosen], cast(Sequence[float], target[chosen]))
        out["fit"].append(spearman(ranker.predict([features[i] for i in rest]), target[rest]))
        for name, column in columns.items():
            out[name].append(spearman(column[rest], target[rest]))
    return out


def ranking_curve_cells(curve: dict[str, list[float]]) -> list[str]:
    """A table row's cells for :func:`ranking_curve`: the fit's mean and 10th percentile, then
    each baseline's mean, in their order."""
    fit = curve["fit"]
    means = [float(np.mean(v)) for name, v in curve.items() if name != "fit"]
    return [f"{value:.3f}" for value in (float(np.mean(fit)), float(np.percentile(fit, 10)), *means)]

"""Bootstrap intervals over candidates: every headline figure and every difference a target compares.

The unit of resampling is the candidate (the test set is a sample of architectures): each of
``RESAMPLES`` resamples draws the candidates with replacement, and a statistic and a *paired*
difference (both methods on the same resample) are recomputed on it. The interval is the 2.5th
and 97.5th percentiles (percentile bootstrap, Efron & Tibshirani 1993, ch. 13); resamples on
which a statistic is undefined (``nan``: a constant ranking, no untrainable candidate drawn) are
left out and counted. A target is met only when the difference's whole interval is above zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["RESAMPLES", "Interval", "bootstrap", "paired_difference", "spearman_rows"]

RESAMPLES = 2000
SEED = 0

Statistic = Callable[[np.ndarray], float]  # indices of the candidates drawn -> a figure
# the same statistic on every resample at once: [resamples, n] indices -> [resamples] figures
RowStatistic = Callable[[np.ndarray], np.ndarray]


def spearman_rows(scores: np.ndarray, targets: np.ndarray) -> RowStatistic:
    """Spearman's rho on each row of a matrix of resampled indices, vectorized (the same nan
    policy as ``bench.pipeline.metrics.spearman``: nan ranks as the worst score; a constant row
    gives nan)."""
    from scipy.stats import rankdata

    a = np.where(np.isnan(scores), -np.inf, scores)
    b = np.where(np.isnan(targets), -np.inf, targets)

    def rows(index: np.ndarray) -> np.ndarray:
        ra, rb = rankdata(a[index], axis=1), rankdata(b[index], axis=1)
        ra, rb = ra - ra.mean(axis=1, keepdims=True), rb - rb.mean(axis=1, keepdims=True)
        denominator = np.sqrt((ra**2).sum(axis=1) * (rb**2).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(denominator > 0, (ra * rb).sum(axis=1) / denominator, np.nan)

    return rows


@dataclass(frozen=True)
class Interval:
    point: float  # the statistic on all candidates
    low: float
    high: float
    n: int  # candidates
    undefined: int = 0  # resamples on which the statistic was nan

    @property
    def above_zero(self) -> bool:
        return self.low > 0

    def text(self, digits: int = 2) -> str:
        if math.isnan(self.point):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.point:.{digits}f}"
        return f"{self.point:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def to_json(self) -> dict[str, float | int]:
        return {"point": self.point, "low": self.low, "high": self.high, "n": self.n, "undefined": self.undefined}


def _indices(n: int, resamples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _interval(point: float, values: list[float], n: int, method: str = "linear") -> Interval:
    array = np.asarray(values, dtype=np.float64)
    ok = array[np.isfinite(array)]
    if len(ok) < 0.5 * len(array) or not len(ok):  # undefined on most resamples: no interval
        return Interval(point, math.nan, math.nan, n, int(len(array) - len(ok)))
    low, high = np.percentile(ok, [2.5, 97.5], method=method)  # type: ignore[call-overload]
    return Interval(point, float(low), float(high), n, int(len(array) - len(ok)))


def _values(statistic: Statistic | RowStatistic, index: np.ndarray, rows: bool) -> np.ndarray:
    if rows:
        return np.asarray(statistic(index), dtype=np.float64)  # type: ignore[arg-type]
    return np.array([statistic(i) for i in index], dtype=np.float64)


def bootstrap(
    statistic: Statistic | RowStatistic,
    n: int,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    *,
    rows: bool = False,
    method: str = "linear",
) -> Interval:
    """``statistic`` on all ``n`` candidates, with its 95 % percentile interval (``rows=True``:
    ``statistic`` takes the whole [resamples, n] index matrix, e.g. ``spearman_rows``). ``method``
    is numpy's percentile method: ``"inverted_cdf"`` keeps each end a resample's own value, where a
    finite stand-in for "never" must not be interpolated with a real one.

    >>> bootstrap(lambda i: float(np.mean(np.arange(10.0)[i])), 10).point
    4.5
    """
    every = np.arange(n)
    point = float(_values(statistic, every[None], rows)[0]) if n else math.nan
    if n < 2 or resamples < 1:
        return Interval(point, math.nan, math.nan, n)
    return _interval(point, list(_values(statistic, _indices(n, resamples, seed), rows)), n, method)


def paired_difference(
    first: Statistic | RowStatistic,
    second: Statistic | RowStatistic,
    n: int,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    *,
    rows: bool = False,
) -> Interval:
    """``first - second`` on the same resamples (the comparison a target line makes)."""
    if n < 2 or resamples < 1:
        return Interval(math.nan, math.nan, math.nan, n)
    every = np.arange(n)[None]
    point = float(_values(first, every, rows)[0] - _values(second, every, rows)[0])
    index = _indices(n, resamples, seed)
    return _interval(point, list(_values(first, index, rows) - _values(second, index, rows)), n)

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

__all__ = ["RESAMPLES", "Interval", "bootstrap", "paired_difference"]

RESAMPLES = 2000
SEED = 0

Statistic = Callable[[np.ndarray], float]  # indices of the candidates drawn -> a figure


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


def _interval(point: float, values: list[float], n: int) -> Interval:
    array = np.asarray(values, dtype=np.float64)
    ok = array[np.isfinite(array)]
    if len(ok) < 0.5 * len(array) or not len(ok):  # undefined on most resamples: no interval
        return Interval(point, math.nan, math.nan, n, int(len(array) - len(ok)))
    low, high = np.percentile(ok, [2.5, 97.5])
    return Interval(point, float(low), float(high), n, int(len(array) - len(ok)))


def bootstrap(statistic: Statistic, n: int, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """``statistic`` on all ``n`` candidates, with its 95 % percentile interval.

    >>> bootstrap(lambda i: float(np.mean(np.arange(10.0)[i])), 10).point
    4.5
    """
    if n < 2:
        return Interval(statistic(np.arange(n)) if n else math.nan, math.nan, math.nan, n)
    point = statistic(np.arange(n))
    return _interval(point, [statistic(i) for i in _indices(n, resamples, seed)], n)


def paired_difference(
    first: Statistic, second: Statistic, n: int, resamples: int = RESAMPLES, seed: int = SEED
) -> Interval:
    """``first - second`` on the same resamples (the comparison a target line makes)."""
    if n < 2:
        return Interval(math.nan, math.nan, math.nan, n)
    every = np.arange(n)
    point = first(every) - second(every)
    return _interval(point, [first(i) - second(i) for i in _indices(n, resamples, seed)], n)

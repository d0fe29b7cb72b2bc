"""Preflight's components with the network's size, combined by a fit on a development sample.

The shipped score is a trainability score: it separates the cells that cannot train from the rest
and ranks little among the cells that all train (``docs/nasbench201.md``). The issue's remedy, put
to the test: add what ranks trainable networks (the network's size, ``log10`` of its parameters,
and the kernel's log range that the conditioning already measures on its forward passes) and
calibrate the combination on a development sample of cells disjoint from the reported one.

Each feature is oriented so that higher predicts better, standardized with the development
sample's mean and deviation (a value the engine could not measure gets the development sample's
worst), and the weights are a ridge fit of the accuracy's normal scores (its ranks mapped through
the normal quantile) on the development cells. Nothing of the reported sample is used to fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import norm, rankdata

__all__ = ["FEATURES", "Combination", "features", "fit"]

# name -> (where it is read, its sign: +1 when higher predicts a better cell). Every component the
# engine reports on this path (each a penalty) and the size: none left out, so that no choice of
# features leans on the reported cells' per-component figures, which the report shows.
FEATURES: dict[str, tuple[str, float]] = {
    "probe_loss": ("component", -1.0),
    "kernel_log_range": ("component", -1.0),
    "jacobian_log": ("component", -1.0),
    "non_finite": ("component", -1.0),
    "output_log_ratio": ("component", -1.0),
    "log_params": ("size", 1.0),
}
RIDGE = 1e-2


def _value(result: dict[str, Any], name: str) -> float:
    where, sign = FEATURES[name]
    if where == "size":
        params = float(result["proxies"]["params"]["score"])
        return math.log10(params) if params > 0 else math.nan
    value = (result["preflight"].get("components") or {}).get(name)
    return sign * float(value) if value is not None and math.isfinite(float(value)) else math.nan


def features(results: Sequence[dict[str, Any]], names: Sequence[str]) -> np.ndarray:
    """``[cells, features]``: each feature oriented higher-is-better (nan where not measured)."""
    return np.array([[_value(r, n) for n in names] for r in results], dtype=np.float64).reshape(len(results), -1)


class Combination:
    """A fitted linear combination of standardized features (:func:`fit`)."""

    def __init__(self, names: Sequence[str], mean: np.ndarray, std: np.ndarray, worst: np.ndarray, weights: np.ndarray):
        self.names, self.mean, self.std, self.worst, self.weights = list(names), mean, std, worst, weights

    def _standardized(self, x: np.ndarray) -> np.ndarray:
        filled = np.where(np.isnan(x), self.worst, x)
        return (filled - self.mean) / self.std

    def score(self, results: Sequence[dict[str, Any]]) -> np.ndarray:
        """Higher predicts a better cell."""
        return self._standardized(features(results, self.names)) @ self.weights

    def describe(self) -> str:
        return ", ".join(f"{n} {w:+.2f}" for n, w in zip(self.names, self.weights, strict=True))


def fit(results: Sequence[dict[str, Any]], names: Sequence[str], ridge: float = RIDGE) -> Combination:
    """The combination of ``names`` fitted on ``results`` (the development cells) to the normal
    scores of their accuracy ranks."""
    x = features(results, names)
    worst = np.array([np.nanmin(col) if np.isfinite(col).any() else 0.0 for col in x.T])
    filled = np.where(np.isnan(x), worst, x)
    mean, std = filled.mean(axis=0), filled.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    z = (filled - mean) / std
    accuracy = np.array([r["accuracy"] for r in results], dtype=np.float64)
    target = norm.ppf((rankdata(accuracy) - 0.5) / len(accuracy))
    weights = np.linalg.solve(z.T @ z / len(z) + ridge * np.eye(z.shape[1]), z.T @ target / len(z))
    return Combination(names, mean, std, worst, weights)


MIN_DEV = 30  # development cells needed before a fit is reported


def report_lines(dev: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]], best_proxy: str) -> list[str]:
    """The report's section: the combination fitted on ``dev``, its Spearman on ``results`` against
    the best proxy's (paired), and each feature's contribution (refitted without it)."""
    from bench.pipeline.metrics import spearman
    from bench.v2.stats import bootstrap, paired_difference

    lines = ["", "## Preflight's components with the network's size, fitted on a development sample", ""]
    if len(dev) < MIN_DEV:
        return [*lines, f"Not run: {len(dev)} development cells scored (at least {MIN_DEV} are needed; `--dev N`).", ""]
    names = list(FEATURES)
    full = fit(dev, names)
    accuracy = np.array([r["accuracy"] for r in results], dtype=np.float64)
    ours = full.score(results)
    n = len(results)

    def rho(scores: np.ndarray) -> Any:
        return bootstrap(lambda i: spearman(scores[i], accuracy[i]), n)

    lines += [
        f"Fitted on {len(dev)} development cells (a second stratified sample, seed 1, disjoint from the reported "
        f"one); weights on standardized features: {full.describe()} (`bench/nasbench201/combine.py`). On the "
        f"{n} reported cells the combination's Spearman is {rho(ours).text(3)}, paired with (the best proxy is "
        "the best on these reported cells, a choice that can only favour the proxy):",
        "",
    ]
    for name in dict.fromkeys((best_proxy, "params")):
        proxy = np.array([float(r["proxies"][name]["score"]) for r in results], dtype=np.float64)
        versus = paired_difference(
            lambda i: spearman(ours[i], accuracy[i]), lambda i, p=proxy: spearman(p[i], accuracy[i]), n
        )
        verdict = "above" if versus.low > 0 else "below" if versus.high < 0 else "not distinguishable"
        what = "the best proxy" if name == best_proxy else "the size alone"
        lines.append(f"- minus {name}'s ({what}): {versus.text(3)} ({verdict});")
    lines += [
        "",
        "| left out (refitted on the development cells without it) | Spearman | full minus this |",
        "|---|---|---|",
    ]
    for name in names:
        rest = fit(dev, [m for m in names if m != name]).score(results)
        drop = paired_difference(
            lambda i: spearman(ours[i], accuracy[i]), lambda i, rest=rest: spearman(rest[i], accuracy[i]), n
        )
        lines.append(f"| {name} | {rho(rest).text(3)} | {drop.text(3)} |")
    lines.append("")
    return lines

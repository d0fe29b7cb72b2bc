"""Preflight's components, its expressivity terms and the network's size, combined by a fit on a
development sample.

The shipped score is a trainability score: it separates the cells that cannot train from the rest
and ranks little among the cells that all train (``docs/nasbench201.md``). What ranks trainable
networks is added: the network's size (``log10`` of its parameters), the kernel's log range that
the conditioning measures, and the expressivity terms the engine measures with
``options.expressivity`` (``worker.engine.expressivity``: NASWOT's ``log |K_H|`` and MeCo's
correlation floor, on the engine's drawn network); the combination is calibrated on a development
sample of cells disjoint from the reported one. Next to it, the same fit of every zero-cost proxy
(an ensemble of the peers): the simplest rival to a fitted combination is another one.

Each feature is oriented so that higher predicts better, standardized with the development
sample's mean and deviation (a value the engine could not measure, or a proxy's ``-inf``, gets the
development sample's worst; a proxy's ``+inf``, which the proxies count as best, its best), and the
weights are a ridge fit of the accuracy's normal scores (its ranks mapped through
the normal quantile) on the development cells. Nothing of the reported sample is used to fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.ranking import normal_scores, ridge_weights

__all__ = [
    "ENSEMBLE",
    "FEATURES",
    "FITTED",
    "Combination",
    "cross_validated",
    "features",
    "fit",
    "fitted_columns",
    "report_lines",
]

# name -> (where it is read, its sign: +1 when higher predicts a better cell). Every component the
# engine reports on this path (each a penalty), both expressivity terms and the size: none left out,
# so that no choice among them leans on the reported cells' per-component figures, which the report
# shows (which terms to add was decided on the development cells: ``cross_validated``).
FEATURES: dict[str, tuple[str, float]] = {
    "probe_loss": ("component", -1.0),
    "kernel_log_range": ("component", -1.0),
    "jacobian_log": ("component", -1.0),
    "non_finite": ("component", -1.0),
    "output_log_ratio": ("component", -1.0),
    "naswot": ("expressivity", 1.0),
    "meco": ("expressivity", 1.0),
    "log_params": ("size", 1.0),
}
PROXY = "proxy:"  # a feature named ``proxy:<name>`` is that zero-cost proxy's score (higher is better)
RIDGE = 1e-2
CV_FOLDS, CV_REPEATS = 10, 20  # the cross-validation behind the choice of terms


def _value(result: dict[str, Any], name: str) -> float:
    if name.startswith(PROXY):
        score = float(result["proxies"][name.removeprefix(PROXY)]["score"])
        return score if math.isfinite(score) or score == math.inf else math.nan
    where, sign = FEATURES[name]
    if where == "expressivity":
        measured = (result.get("expressivity") or {}).get(name)
        return sign * float(measured) if measured is not None else math.nan
    if where == "size":
        return float(result["proxies"]["params"]["score"]) / math.log(10)  # the proxy is the count's ln
    value = (result["preflight"].get("components") or {}).get(name)
    return sign * float(value) if value is not None and math.isfinite(float(value)) else math.nan


def features(results: Sequence[dict[str, Any]], names: Sequence[str]) -> np.ndarray:
    """``[cells, features]``: each feature oriented higher-is-better (nan where not measured)."""
    return np.array([[_value(r, n) for n in names] for r in results], dtype=np.float64).reshape(len(results), -1)


class Combination:
    """A fitted linear combination of standardized features (:func:`fit`)."""

    def __init__(
        self,
        names: Sequence[str],
        mean: np.ndarray,
        std: np.ndarray,
        fills: tuple[np.ndarray, np.ndarray],
        weights: np.ndarray,
    ):
        self.names, self.mean, self.std, self.weights = list(names), mean, std, weights
        self.worst, self.best = fills

    def _standardized(self, x: np.ndarray) -> np.ndarray:
        return (_filled(x, self.worst, self.best) - self.mean) / self.std

    def score(self, results: Sequence[dict[str, Any]]) -> np.ndarray:
        """Higher predicts a better cell."""
        return self._standardized(features(results, self.names)) @ self.weights

    def describe(self) -> str:
        return ", ".join(f"{n} {w:+.2f}" for n, w in zip(self.names, self.weights, strict=True))


def fit(results: Sequence[dict[str, Any]], names: Sequence[str], ridge: float = RIDGE) -> Combination:
    """The combination of ``names`` fitted on ``results`` (the development cells) to the normal
    scores of their accuracy ranks."""
    x = features(results, names)
    finite = [col[np.isfinite(col)] for col in x.T]
    worst = np.array([col.min() if col.size else 0.0 for col in finite])
    best = np.array([col.max() if col.size else 0.0 for col in finite])
    filled = _filled(x, worst, best)
    mean, std = filled.mean(axis=0), filled.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    z = (filled - mean) / std
    accuracy = np.array([r["accuracy"] for r in results], dtype=np.float64)
    weights = ridge_weights(z, normal_scores(accuracy), ridge)
    return Combination(names, mean, std, (worst, best), weights)


def _filled(x: np.ndarray, worst: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Not measured (nan) -> the development sample's worst value; ``+inf`` -> its best."""
    return np.where(np.isnan(x), worst, np.where(np.isposinf(x), best, x))


def cross_validated(
    cells: Sequence[dict[str, Any]], names: Sequence[str], folds: int = CV_FOLDS, repeats: int = CV_REPEATS
) -> float:
    """Mean over ``repeats`` seeded shuffles of the Spearman between the accuracy and each cell's
    out-of-fold score (fitted on the other folds): how the development cells alone judge a choice of
    features, without the reported ones."""
    from bench.pipeline.metrics import spearman

    accuracy = np.array([c["accuracy"] for c in cells], dtype=np.float64)
    rng = np.random.default_rng(0)
    rhos = []
    for _ in range(repeats):
        order = rng.permutation(len(cells))
        predicted = np.empty(len(cells))
        for k in range(folds):
            held = order[k::folds]
            kept = np.setdiff1d(order, held)
            combination = fit([cells[i] for i in kept], names)
            predicted[held] = combination.score([cells[i] for i in held])
        rhos.append(spearman(predicted, accuracy))
    return float(np.mean(rhos))


MIN_DEV = 30  # development cells needed before a fit is reported
FITTED = "preflight_fitted"  # the report's name for the combination fitted on the development cells
ENSEMBLE = "proxy_ensemble_fitted"  # and for every proxy fitted the same way


def fitted_columns(dev: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]]) -> dict[str, np.ndarray]:
    """On ``results``: the combination of every feature, and the same fit of every proxy measured on
    all cells, both fitted on ``dev`` (none below ``MIN_DEV`` development cells)."""
    if len(dev) < MIN_DEV or _cells_without_expressivity(dev, results):
        return {}
    return {
        FITTED: fit(dev, list(FEATURES)).score(results),
        ENSEMBLE: fit(dev, _proxy_features(dev, results)).score(results),
    }


def _cells_without_expressivity(dev: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]]) -> int:
    """Cells whose expressivity part was never measured: a fit over them would read the missing terms
    as the worst values, so none is reported until every cell has it."""
    return sum(1 for r in [*dev, *results] if "expressivity" in r and r["expressivity"] is None)


def _proxy_features(dev: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]]) -> list[str]:
    from bench.pipeline.proxies import PROXIES

    return [f"{PROXY}{p}" for p in PROXIES if all(p in r["proxies"] for r in [*dev, *results])]


def report_lines(dev: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]], best_proxy: str) -> list[str]:
    """The report's section: the combination fitted on ``dev``, its Spearman on ``results`` against
    the best proxy's (paired), and each feature's contribution (refitted without it)."""
    from bench.pipeline.metrics import spearman
    from bench.v2.stats import bootstrap, paired_difference

    lines = ["", "## Preflight's components, its expressivity terms and the size, fitted on a development sample", ""]
    if len(dev) < MIN_DEV:
        return [*lines, f"Not run: {len(dev)} development cells scored (at least {MIN_DEV} are needed; `--dev N`).", ""]
    if missing := _cells_without_expressivity(dev, results):
        return [
            *lines,
            f"Not run: {missing} cells lack the expressivity part (`python -m bench.nasbench201 --dev N "
            "--keep-older-engines` measures it without conditioning them again).",
            "",
        ]
    names = list(FEATURES)
    full = fit(dev, names)
    accuracy = np.array([r["accuracy"] for r in results], dtype=np.float64)
    ours = full.score(results)
    n = len(results)

    def rho(scores: np.ndarray) -> Any:
        return bootstrap(lambda i: spearman(scores[i], accuracy[i]), n)

    base = [f for f in names if FEATURES[f][0] != "expressivity"]
    choices = {
        "the components and the size": base,
        "with MeCo's term": [*base, "meco"],
        "with NASWOT's": [*base, "naswot"],
        "with both (the combination)": names,
        "every proxy": _proxy_features(dev, results),
    }
    lines += [
        f"How the terms were chosen, on the development cells alone ({CV_FOLDS}-fold cross-validated Spearman "
        f"there, the mean of {CV_REPEATS} shuffles): "
        + "; ".join(f"{what} {cross_validated(dev, chosen):.3f}" for what, chosen in choices.items())
        + ".",
        "",
    ]
    lines += [
        f"Fitted on {len(dev)} development cells (a second stratified sample, seed 1, disjoint from the reported "
        f"one); weights on standardized features: {full.describe()} (`bench/nasbench201/combine.py`). On the "
        f"{n} reported cells the combination's Spearman is {rho(ours).text(3)}, paired with (the best proxy is "
        "the best on these reported cells, a choice that can only favour the proxy):",
        "",
    ]
    proxies = _proxy_features(dev, results)
    measured = [name.removeprefix(PROXY) for name in proxies]
    ensemble = fit(dev, proxies).score(results)
    lines.append(
        f"- minus the proxies' ensemble (every proxy, {len(proxies)}, fitted the same way on the same "
        f"development cells; Spearman {rho(ensemble).text(3)}): " + _versus(ours, ensemble, accuracy) + ";"
    )
    for name in dict.fromkeys((best_proxy, "params", *measured)):
        proxy = np.array([float(r["proxies"][name]["score"]) for r in results], dtype=np.float64)
        what = {best_proxy: " (the best proxy)", "params": " (the size alone)"}.get(name, "")
        lines.append(f"- minus {name}'s{what}: {_versus(ours, proxy, accuracy)};")
    seconds = [r["expressivity_seconds"] for r in results if r.get("expressivity_seconds") is not None]
    if seconds:
        together = np.median([r["proxy_seconds"] for r in results])
        lines += [
            "",
            f"The expressivity terms cost one forward pass (a third of a counted training step): median "
            f"{np.median(seconds):.2f} s per cell here; every proxy together, {together:.1f} s.",
        ]
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


def _versus(ours: np.ndarray, other: np.ndarray, accuracy: np.ndarray) -> str:
    """Our Spearman minus the other's, paired over the same resamples, and which side it is on."""
    from bench.pipeline.metrics import spearman
    from bench.v2.stats import paired_difference

    versus = paired_difference(
        lambda i: spearman(ours[i], accuracy[i]), lambda i: spearman(other[i], accuracy[i]), len(accuracy)
    )
    verdict = "above" if versus.low > 0 else "below" if versus.high < 0 else "not distinguishable"
    return f"{versus.text(3)} ({verdict})"

"""Calibrate Preflight's score on the benchmark: the reproducible fit behind the shipped weights.

    python -m bench.pipeline.calibrate          # fit on the cache in bench/out/full, write the weights
    python -m bench.pipeline.calibrate --check  # exit 1 if the shipped weights differ from a fresh fit

The engine's score (``worker.engine.score``, weights in ``worker/engine/score_weights.json``) is

    score = -sum_c w_c * f_c,    f_c = log1p(|c| / t_c) if c was measured, else fill_c

over the log-space components c with thresholds t_c. This module fits, on a *training split*
of the candidates, the non-negative weights w_c by non-negative least squares
(``scipy.optimize.nnls``, with an intercept column) against a trained loss normalized by the
chance loss and capped at 1 (every loss at or above chance is equally untrainable). ``log1p``
keeps a single huge component from dominating; non-negativity keeps every component's
direction (larger = worse) as the engine defines it.

Missing components are handled deliberately: a diagnostic skipped under the cost budget
(``tuning.hessian_measured == []``) or not applicable leaves its component ``None``, and
``fill_c`` is the mean of f_c over the training candidates where c *was* measured. A skipped
diagnostic then costs the expected penalty: neither a reward (the old policy, no penalty)
nor a punishment. ``non_finite`` is not fitted: it is a hard prune with a fixed penalty
(``worker.engine._calibration.NON_FINITE_PENALTY``), and candidates with it are left out of the regression.

The prune threshold is where a logistic fit, on the training split, of "untrainable" on the
score crosses 1/2: the verdict prunes a candidate more likely untrainable than not. The first
rule (the cut with the training split's best precision among the cuts reaching recall >=
``RECALL_TARGET``) sits at the edge of the training split's untrainable scores, so on new
candidates recall falls below the target about half the time; it is kept as a comparison
(``cut_rule="recall"``; docs/benchmarks.md).

Ground truth (``--truth``): ``B`` (trained from Preflight's tuned initialization, what a
gated search trains; the default and what ships), ``A`` (from the spec's initialization) or
``both`` (the mean of the two capped losses; thresholded on B). ``compare`` fits all three,
and the fill ablation, and reports each on the held-out half (docs/benchmarks.md).

The split is deterministic: within each family, candidates in id order alternate
train / held-out, so both halves cover every family. Figures are reported on the held-out
half only.

``write_engine_weights`` is the one place that writes ``worker/engine/score_weights.json``.
This module reads the benchmark's rows (``bench.pipeline.rows``), never the analysis: the
analysis imports the calibration, not the other way round.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from bench.pipeline import metrics
from bench.pipeline.metrics import nan_as_worst, precision_recall_curve
from worker.engine._calibration import COMPONENTS as ENGINE_COMPONENTS

__all__ = [
    "COMPONENTS",
    "RECALL_TARGET",
    "TRUTHS",
    "apply",
    "compare",
    "features",
    "fit",
    "fit_rows",
    "prune_cut",
    "split",
    "write_engine_weights",
]

RECALL_TARGET = 0.8
# every fitted component (the engine's list); non_finite is a rule, not a weight
COMPONENTS = ENGINE_COMPONENTS
TRUTHS = ("A", "B", "both")
SHIPPED_TRUTH = "B"
ROOT = Path(__file__).resolve().parents[2]
WEIGHTS_FILE = ROOT / "worker" / "engine" / "score_weights.json"


def split(ids_by_family: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """(train ids, held-out ids): alternate within each family in sorted id order."""
    train: list[str] = []
    held: list[str] = []
    for ids in ids_by_family.values():
        for i, cid in enumerate(sorted(ids)):
            (train if i % 2 == 0 else held).append(cid)
    return train, held


def features(components: dict[str, float | None], thresholds: dict[str, float], names: Sequence[str]) -> np.ndarray:
    """``log1p(|c| / t_c)`` per component name; nan where the component was not measured
    (``None``; ``fit`` fills it), 50 where it is non-finite (capped)."""
    row = []
    for name in names:
        value = components.get(name)
        if value is None:
            row.append(math.nan)
            continue
        value = abs(float(value))
        scaled = math.log1p(value / thresholds.get(name, 1.0)) if math.isfinite(value) else 50.0
        row.append(min(scaled, 50.0))
    return np.asarray(row, dtype=np.float64)


def _fills(rows: np.ndarray, policy: str) -> np.ndarray:
    """Per column: the mean of the measured entries (``"mean"``) or 0 (``"zero"``: the old
    engine's policy, a skipped diagnostic costs nothing)."""
    if policy == "zero":
        return np.zeros(rows.shape[1])
    measured = ~np.isnan(rows)
    sums = np.where(measured, rows, 0.0).sum(axis=0)
    counts = measured.sum(axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)


def fit(
    rows: list[np.ndarray],
    targets: Sequence[float],
    untrainable: Sequence[bool],
    names: Sequence[str],
    fill: str = "mean",
    cut_rule: str = "logistic",
) -> dict[str, Any]:
    """NNLS fit of ``targets`` (capped normalized loss) on the features, plus the threshold.
    nan features (not measured) get the column's fill (``_fills``)."""
    x = np.vstack(rows).astype(np.float64)
    fills = _fills(x, fill)
    x = np.where(np.isnan(x), fills, x)
    y = np.minimum(np.asarray(targets, dtype=np.float64), 1.0)
    design = np.hstack([np.ones((len(x), 1)), x])
    coef, residual = nnls(design, y)
    model = {
        "form": "score = -sum_c w_c * f_c, f_c = log1p(|c| / t_c) if measured else fill_c",
        "weights": {name: float(w) for name, w in zip(names, coef[1:], strict=True)},
        "fill": {name: float(f) for name, f in zip(names, fills, strict=True)},
        "intercept": float(coef[0]),
        "train_rmse": float(residual / math.sqrt(len(y))),
        "recall_target": RECALL_TARGET,
    }
    model["prune_below"] = prune_cut(np.array([apply(model, r, names) for r in rows]), untrainable, cut_rule)
    return model


CUT_RULES = ("logistic", "recall")
_RIDGE = 1e-3  # keeps the logistic slope finite when the training split separates perfectly


def prune_cut(
    scores: np.ndarray, untrainable: Sequence[bool], rule: str = "logistic", recall_target: float = RECALL_TARGET
) -> float:
    """The prune cut (prune when ``score < prune_below``) by ``rule``: ``"logistic"``, where
    the logistic fit of untrainable on the score crosses 1/2 (hard failures, at or below
    ``-NON_FINITE_PENALTY / 2``, left out: the rule prunes them anyway); ``"recall"``, the cut
    with the best precision at recall >= ``recall_target`` (midpoint between neighbouring scores)."""
    if rule == "logistic":
        return _logistic_cut(scores, untrainable)
    if rule != "recall":
        raise ValueError(f"cut_rule must be one of {CUT_RULES}, but got {rule!r}")
    order = np.sort(nan_as_worst(scores))  # the curve's order: a NaN first
    precision, recall = precision_recall_curve(scores, untrainable)
    ok = np.nonzero(recall >= recall_target)[0]
    if len(ok) == 0:
        return float(order[-1]) + 1.0
    k = int(ok[np.argmax(precision[ok])])  # prune the k + 1 lowest scores
    upper = order[k + 1] if k + 1 < len(order) else order[k] + 1.0
    return float(upper if np.isneginf(order[k]) else (order[k] + upper) / 2.0)  # no midpoint with -inf


def _logistic_cut(scores: np.ndarray, untrainable: Sequence[bool]) -> float:
    from scipy.optimize import minimize

    from worker.engine._calibration import NON_FINITE_PENALTY

    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(untrainable, dtype=np.float64)
    keep = s > -NON_FINITE_PENALTY / 2
    s, y = s[keep], y[keep]
    if len(s) == 0 or y.min() == y.max():
        return float(s.min()) - 1.0 if len(s) else -1.0  # one class only: nothing to separate
    centre, spread = float(s.mean()), float(s.std()) or 1.0
    z = (s - centre) / spread

    def loss(p: np.ndarray) -> tuple[float, np.ndarray]:
        t = p[0] + p[1] * z
        prob = 1.0 / (1.0 + np.exp(-t))
        value = float(np.sum(np.logaddexp(0.0, t) - y * t) + _RIDGE * p[1] ** 2)
        grad = np.array([np.sum(prob - y), np.sum((prob - y) * z) + 2 * _RIDGE * p[1]])
        return value, grad

    a, b = minimize(loss, np.zeros(2), jac=True, method="BFGS").x
    if b >= 0:  # a higher score is not less likely untrainable: no cut below it helps
        return float(s.min()) - 1.0
    return centre - spread * a / b


def apply(model: dict[str, Any], row: np.ndarray, names: Sequence[str]) -> float:
    """The score of one candidate's feature row (nan entries take the model's fill)."""
    total = 0.0
    for n, v in zip(names, row, strict=True):
        total += model["weights"][n] * (model["fill"].get(n, 0.0) if math.isnan(v) else v)
    return -total


# --- from benchmark rows (bench.pipeline.rows.collect) ----------------------------------------


def _usable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["components"] and r["tuned_untrainable"] is not None]


def _finite(r: dict[str, Any]) -> bool:
    """No hard failure: the rule prunes the others, the regression leaves them out."""
    comps = r["components"]
    return not (comps.get("non_finite") or 0) and all(v is None or math.isfinite(v) for v in comps.values())


def _truth(r: dict[str, Any], truth: str) -> tuple[float, bool]:
    """(capped normalized loss, untrainable) under a ground truth."""
    a, b = min(r["norm_loss"], 1.0), min(r["tuned_norm_loss"], 1.0)
    if truth == "A":
        return a, r["untrainable"]
    if truth == "B":
        return b, bool(r["tuned_untrainable"])
    return (a + b) / 2.0, bool(r["tuned_untrainable"])


def split_rows(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    by_family: dict[str, list[str]] = {}
    for r in _usable(rows):
        by_family.setdefault(r["family"], []).append(r["id"])
    return split(by_family)


def fit_rows(
    rows: list[dict[str, Any]],
    truth: str = SHIPPED_TRUTH,
    fill: str = "mean",
    names: Sequence[str] = COMPONENTS,
    cut_rule: str = "logistic",
    recall_target: float = RECALL_TARGET,
) -> dict[str, Any]:
    """Fit on the training split of benchmark rows; the model plus the split it used.
    ``names``: the components fitted (the others get weight 0; an ablation leaves some out)."""
    if truth not in TRUTHS:
        raise ValueError(f"truth must be one of {TRUTHS}, but got {truth=}")
    train_ids, held_ids = split_rows(rows)
    train = set(train_ids)
    fitted = [r for r in _usable(rows) if r["id"] in train and _finite(r)]
    feats = [features(r["components"], r["component_thresholds"], names) for r in fitted]
    model = fit(
        feats,
        [_truth(r, truth)[0] for r in fitted],
        [_truth(r, truth)[1] for r in fitted],
        names,
        fill,
        cut_rule,
    )
    left_out = [n for n in COMPONENTS if n not in names]
    model["weights"] |= dict.fromkeys(left_out, 0.0)
    model["fill"] |= dict.fromkeys(left_out, 0.0)
    # The cut on every training candidate, hard failures included (the rule prunes them).
    train_rows = [r for r in _usable(rows) if r["id"] in train]
    scores = np.array([score_row(model, r) for r in train_rows])
    model["prune_below"] = prune_cut(scores, [_truth(r, truth)[1] for r in train_rows], cut_rule, recall_target)
    return model | {
        "truth": truth,
        "fill_policy": fill,
        "cut_rule": cut_rule,
        "thresholds": {n: _threshold_of(rows, n) for n in COMPONENTS},
        "train_n": len(train_rows),
        "train_ids": sorted(train_ids),
        "heldout_ids": sorted(held_ids),
    }


def _threshold_of(rows: list[dict[str, Any]], name: str) -> float:
    values = {r["component_thresholds"].get(name) for r in rows if r["components"]}
    values.discard(None)
    if len(values) != 1:
        raise ValueError(f"the cached reports disagree on the threshold of {name}: {values}")
    return float(values.pop())


def score_row(model: dict[str, Any], r: dict[str, Any]) -> float:
    """The shipped form on a benchmark row, hard failures included (``worker.engine.score``)."""
    from worker.engine._calibration import NON_FINITE_PENALTY

    row = features(r["components"], r["component_thresholds"], COMPONENTS)
    value = apply(model, np.where(row >= 50.0, math.nan, row), COMPONENTS)
    return value - (0.0 if _finite(r) else NON_FINITE_PENALTY)


WITHOUT_PROBE = tuple(n for n in COMPONENTS if n != "probe_loss")


def compare(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each fit choice (ground truth x fill policy, and the shipped choice without the
    trainability probe) on the held-out half: Spearman with -loss under A and B, and its
    verdict's precision / recall under A and B."""
    out = {}
    choices: list[tuple[str, str, tuple[str, ...], str, str]] = [
        (t, f, COMPONENTS, "logistic", f"{t}, fill {f}")
        for t in TRUTHS
        for f in ("mean", "zero")
        if f == "mean" or t == SHIPPED_TRUTH
    ]
    choices += [
        (
            SHIPPED_TRUTH,
            "mean",
            COMPONENTS,
            "recall",
            f"{SHIPPED_TRUTH}, fill mean, cut at the best precision at recall >= {RECALL_TARGET:g}",
        ),
        (SHIPPED_TRUTH, "mean", WITHOUT_PROBE, "logistic", f"{SHIPPED_TRUTH}, fill mean, without the probe"),
        (
            SHIPPED_TRUTH,
            "mean",
            WITHOUT_PROBE,
            "recall",
            f"{SHIPPED_TRUTH}, fill mean, without the probe, cut at recall >= {RECALL_TARGET:g}",
        ),
    ]
    for truth, fill, names, rule, label in choices:
        model = fit_rows(rows, truth, fill, names, rule)
        held = [r for r in _usable(rows) if r["id"] in set(model["heldout_ids"])]
        scores = [score_row(model, r) for r in held]
        flags = [s < model["prune_below"] or not _finite(r) for s, r in zip(scores, held, strict=True)]
        figures = {"prune_below": model["prune_below"]}
        for t in ("A", "B"):
            truth_rows = [_truth(r, t) for r in held]
            figures[f"spearman_{t}"] = metrics.spearman(scores, [-y for y, _ in truth_rows])
            f = metrics.flags_figures(flags, [bad for _, bad in truth_rows])
            figures[f"precision_{t}"], figures[f"recall_{t}"] = f.precision, f.recall
        out[label] = figures
    return out


def shipped_file(model: dict[str, Any], alone: dict[str, Any], engine: str) -> dict[str, Any]:
    """What ``worker/engine/score_weights.json`` holds: the fit with the probe (``model``) at the top
    level, the fit without it (``alone``) under ``without_probe``, and provenance."""
    keep = (
        "form",
        "truth",
        "fill_policy",
        "cut_rule",
        "weights",
        "fill",
        "thresholds",
        "prune_below",
        "recall_target",
        "intercept",
        "train_rmse",
        "train_n",
        "train_ids",
    )
    return (
        {
            "regenerate": "python -m bench.pipeline.calibrate  (from the cache of `make bench`, bench/out/full)",
            "benchmark_engine": engine,
        }
        | {k: model[k] for k in keep}
        | {"without_probe": {k: alone[k] for k in ("weights", "fill", "prune_below", "intercept", "train_rmse")}}
    )


def fit_shipped(rows: list[dict[str, Any]], truth: str = SHIPPED_TRUTH) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two fits the engine ships: with the trainability probe, and without it."""
    return fit_rows(rows, truth), fit_rows(rows, truth, names=WITHOUT_PROBE)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def same_fit(shipped: dict[str, Any], fresh: dict[str, Any], tol: float = 1e-9) -> bool:
    """The shipped weights, fills and cut equal a fresh fit's (to ``tol``, relative), for both
    fits when ``fresh`` holds the one without the probe too."""
    for key in ("weights", "fill", "thresholds"):
        if key not in fresh:
            continue
        a, b = shipped.get(key, {}), fresh[key]
        if set(a) != set(b) or any(not math.isclose(a[k], b[k], rel_tol=tol, abs_tol=tol) for k in b):
            return False
    if "without_probe" in fresh:
        alone = {k: fresh["without_probe"][k] for k in ("weights", "fill", "prune_below")}
        if not same_fit(shipped.get("without_probe") or {}, alone, tol):
            return False
    return math.isclose(shipped.get("prune_below", math.nan), fresh["prune_below"], rel_tol=tol, abs_tol=tol)


def write_engine_weights(fit: dict[str, Any], path: Path = WEIGHTS_FILE) -> Path:
    """Write the engine's score weights (``worker/engine/score_weights.json``; ``path``: another
    file) and return the path written: the only writer of that file. ``fit``: what
    ``shipped_file`` returns, rounded as ``--check`` compares it; checked as the engine will
    load it (``worker.engine._calibration.load``) before anything is written."""
    from worker.engine._calibration import load

    text = json.dumps(_rounded(fit), indent=1) + "\n"
    load(text)  # raises ValueError on a file the engine would refuse
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    from bench.pipeline.candidates import sample_candidates
    from bench.pipeline.protocol import FULL
    from bench.pipeline.rows import collect

    parser = argparse.ArgumentParser(prog="python -m bench.pipeline.calibrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "full", help="benchmark cache")
    parser.add_argument("--candidates", type=int, default=160)
    parser.add_argument("--truth", choices=TRUTHS, default=SHIPPED_TRUTH)
    parser.add_argument("--weights", type=Path, default=WEIGHTS_FILE, help="file to write")
    parser.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = parser.parse_args(argv)
    rows = collect(sample_candidates(args.candidates, seed=0), args.out, FULL)
    model, alone = fit_shipped(rows, args.truth)
    engine = ", ".join(sorted({str(r.get("engine_version")) for r in rows if r["components"]}))
    fresh = _rounded(shipped_file(model, alone, engine))
    if args.check:
        shipped = json.loads(args.weights.read_text()) if args.weights.exists() else {}
        ok = same_fit(shipped, fresh)
        print(f"{args.weights}: {'matches' if ok else 'differs from'} a fresh fit on {args.out}")
        return 0 if ok else 1
    written = write_engine_weights(fresh, args.weights)
    print(
        f"wrote {written}: weights {fresh['weights']}, prune below {fresh['prune_below']:.4g}; "
        f"without the probe {fresh['without_probe']['weights']}, prune below "
        f"{fresh['without_probe']['prune_below']:.4g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""From the rows of the cached stage results (``bench.pipeline.rows.collect``) to every figure
of the report (a JSON-ready dict)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from bench.pipeline import calibrate, metrics
from bench.pipeline.datasets import load_key
from bench.pipeline.inits import PEERS
from bench.pipeline.median_reference import median_pruner_reference
from bench.pipeline.protocol import Protocol
from bench.pipeline.proxies import PROXIES

__all__ = ["analyze", "shipped_scores_"]


# The engine's score before the calibration (hand-set weights, quadratic penalties, a missing
# component free, prune below -3), kept as a reference method: what the calibration changed.
HANDSET_WEIGHTS = {
    "jacobian_log": 1.0,
    "kernel_log_range": 0.5,
    "output_log_ratio": 1.0,
    "gamma_log_spread": 0.25,
    "hessian_log_spread": 0.25,
    "kappa_d_log": 0.25,
    "non_finite": 100.0,
}
HANDSET_CUT = -3.0


def _handset(components: dict[str, float | None], thresholds: dict[str, float]) -> float:
    if not components:
        return math.nan
    total = 0.0
    for name, value in components.items():
        if value is None or name not in HANDSET_WEIGHTS:
            continue
        scale = thresholds.get(name, 1.0) if name != "non_finite" else 1.0
        total += HANDSET_WEIGHTS[name] * (abs(value) / scale) ** 2 if math.isfinite(value) else 1e9
    return -total


def shipped_scores_(rows: list[dict[str, Any]]) -> None:
    """``preflight`` = the score and verdict the shipped engine gives, recomputed by
    ``worker.engine.score`` from each cached report's components (the score is a pure function of
    them and the thresholds, so a cache computed before the current weights still gives the
    shipped score); ``preflight_handset`` = the pre-calibration score, for reference."""
    from nas.options import Thresholds
    from worker.engine.score import score

    defaults = Thresholds()
    for r in rows:
        r["cached_score"], r["cached_verdict"] = r["preflight"], r["verdict"]
        r["preflight_handset"] = _handset(r["components"], r["component_thresholds"])
        r["handset_verdict"] = (
            None
            if not r["components"]
            else "prune"
            if r["preflight_handset"] < HANDSET_CUT or (r["components"].get("non_finite") or 0)
            else "keep"
        )
        if not r["components"]:
            continue
        result = score(r["components"], defaults)
        r["preflight"], r["verdict"] = result.score, result.verdict
        alone = score(r["components"] | {"probe_loss": None}, defaults)
        r["preflight_no_probe"], r["no_probe_verdict"] = alone.score, alone.verdict


def _method_scores(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    methods = {name: [r["proxies"].get(name, math.nan) for r in rows] for name in PROXIES}
    methods["preflight"] = [r["preflight"] for r in rows]
    methods["preflight_no_probe"] = [r.get("preflight_no_probe", math.nan) for r in rows]
    methods["preflight_handset"] = [r["preflight_handset"] for r in rows]
    return methods


def _costs(rows: list[dict[str, Any]], method: str) -> tuple[float, float]:
    """Median seconds per candidate and the same in training-step equivalents."""
    if method == "preflight_no_probe":  # the same report without the probe's seconds
        seconds = [r["preflight_seconds"] - r["probe_seconds"] for r in rows]
    elif method.startswith("preflight"):  # the hand-set score costs the same measurement
        seconds = [r["preflight_seconds"] for r in rows]
    else:
        seconds = [r["proxy_seconds"].get(method, math.nan) for r in rows]
    steps = [s / r["step_seconds"] for s, r in zip(seconds, rows, strict=True)]
    finite = [s for s in seconds if math.isfinite(s)]
    finite_steps = [s for s in steps if math.isfinite(s)]
    return (
        statistics.median(finite) if finite else math.nan,
        statistics.median(finite_steps) if finite_steps else math.nan,
    )


def ranking_table(rows: list[dict[str, Any]], target: str = "spec") -> dict[str, dict[str, float]]:
    """Per method: correlations with -loss and accuracy, pruning figures, cost. ``target``:
    the ground truth from the spec's initialization (``"spec"``) or from Preflight's tuned
    one (``"tuned"``, candidates without a tuned run left out)."""
    prefix = "" if target == "spec" else "tuned_"
    if target == "tuned":
        rows = [r for r in rows if r["tuned_untrainable"] is not None]
    neg_loss = [-r[prefix + "norm_loss"] for r in rows]
    accuracy = [r[prefix + "accuracy"] for r in rows]
    bad = [r[prefix + "untrainable"] for r in rows]
    table = {}
    for method, scores in _method_scores(rows).items():
        quarter = metrics.prune_fraction(scores, bad, 0.25)
        seconds, steps = _costs(rows, method)
        table[method] = {
            "spearman_loss": metrics.spearman(scores, neg_loss),
            "kendall_loss": metrics.kendall(scores, neg_loss),
            "spearman_accuracy": metrics.spearman(scores, accuracy),
            "kendall_accuracy": metrics.kendall(scores, accuracy),
            "quarter_precision": quarter.precision,
            "quarter_recall": quarter.recall,
            "precision_at_recall_0.8": metrics.precision_at_recall(scores, bad, 0.8),
            "seconds": seconds,
            "step_equivalents": steps,
        }
    return table


def _calibrate(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A fresh fit of the shipped form (``bench.pipeline.calibrate``), whether the shipped weights
    equal it, and every fit choice on the held-out half."""
    from worker.engine._calibration import load

    usable = [r for r in rows if r["components"] and r["tuned_untrainable"] is not None]
    if len(usable) < 10:
        return None
    model, alone = calibrate.fit_shipped(rows)
    shipped = load()
    return model | {
        "shipped_matches_fresh_fit": calibrate.same_fit(shipped, model | {"without_probe": alone}),
        "shipped": {k: shipped.get(k) for k in ("truth", "weights", "fill", "prune_below", "train_n", "without_probe")},
        "choices": calibrate.compare(rows),
    }


def _tuning(rows: list[dict[str, Any]], held: set[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    groups = {
        "all": [r for r in rows if not math.isnan(r["tuned_loss"])],
        "survivors": [r for r in rows if not math.isnan(r["tuned_loss"]) and r["verdict"] == "keep"],
    }
    for family in sorted({r["family"] for r in rows}):
        groups[f"survivors, {family}"] = [r for r in groups["survivors"] if r["family"] == family]
    groups["survivors trainable from the spec init (A)"] = [r for r in groups["survivors"] if not r["untrainable"]]
    if held:
        groups["survivors, held-out half"] = [r for r in groups["survivors"] if r["id"] in held]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for group, members in groups.items():
        tuned = [r["tuned_loss"] for r in members]
        out[group] = {"spec": metrics.tuning_comparison(tuned, [r["loss"] for r in members])}
        for peer in PEERS:
            other = [r["peers"].get(peer, math.nan) for r in members]
            out[group][peer] = metrics.tuning_comparison(tuned, other)
    return out


def _misses(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Survivors that trained no better from the tuned initialization than from the spec's:
    how many, how many were near-ties (tuned loss within 25 % of spec's), how many already
    trained from the spec's initialization (A), by family."""
    misses = [
        r
        for r in rows
        if r["verdict"] == "keep" and not math.isnan(r["tuned_loss"]) and not r["tuned_loss"] < r["loss"]
    ]
    return {
        "n": len(misses),
        "near_ties": sum(r["tuned_loss"] <= 1.25 * r["loss"] for r in misses),
        "trainable_from_spec": sum(not r["untrainable"] for r in misses),
        "by_family": {f: sum(r["family"] == f for r in misses) for f in sorted({r["family"] for r in misses})},
    }


def analyze(rows: list[dict[str, Any]], protocol: Protocol) -> dict[str, Any]:
    """Every figure of the report (adds the shipped score to the rows). The shipped score was
    fitted on the calibration's training half, so its figures that count are on the held-out
    half (``*_heldout*``)."""
    shipped_scores_(rows)
    bad = [r["untrainable"] for r in rows]
    calibration = _calibrate(rows)
    held_ids = set(calibration["heldout_ids"]) if calibration else set()
    held = [r for r in rows if r["id"] in held_ids]
    figures: dict[str, Any] = {
        "n": len(rows),
        "untrainable": int(sum(bad)),
        "families": {f: sum(r["family"] == f for r in rows) for f in sorted({r["family"] for r in rows})},
        "untrainable_by_family": {
            f: sum(r["untrainable"] for r in rows if r["family"] == f) for f in sorted({r["family"] for r in rows})
        },
        "preflight_errors": [f"{r['id']}: {r['preflight_error']}" for r in rows if r["preflight_error"]],
        "ranking_all": ranking_table(rows),
        "verdict_all": _verdict(rows, "untrainable", "verdict"),
        "ranking_all_tuned": ranking_table(rows, "tuned"),
        "verdict_all_tuned": _verdict(rows, "tuned_untrainable", "verdict"),
        "untrainable_tuned": int(sum(bool(r["tuned_untrainable"]) for r in rows)),
        "median_pruner": median_pruner_reference([r["curve"] for r in rows], bad, protocol.epochs),
        "tuning": _tuning(rows, held_ids),
        "tuning_misses": _misses(rows),
        "tuning_losses": {
            r["id"]: {
                "family": r["family"],
                "spec": r["loss"],
                "tuned": r["tuned_loss"],
                "verdict": r["verdict"],
                "name": r["name"],
            }
            for r in rows
        },
        "calibration": calibration,
        "cached_score_agrees": all(r["cached_verdict"] == r["verdict"] for r in rows if r["components"]),
        "train_seconds_median": statistics.median(r["train_seconds"] for r in rows) if rows else math.nan,
        "train_step_equivalents": protocol.epochs * len(protocol.lrs) * _steps_per_epoch(rows, protocol),
    }
    if held:
        figures["heldout_n"] = len(held)
        figures["heldout_untrainable"] = int(sum(r["untrainable"] for r in held))
        figures["heldout_untrainable_tuned"] = int(sum(bool(r["tuned_untrainable"]) for r in held))
        figures["heldout_rescued"] = int(sum(r["untrainable"] and r["tuned_untrainable"] is False for r in held))
        figures["median_pruner_heldout"] = median_pruner_reference(
            [r["curve"] for r in held], [r["untrainable"] for r in held], protocol.epochs
        )
        for suffix, truth in (("", "untrainable"), ("_tuned", "tuned_untrainable")):
            figures["ranking_heldout" + suffix] = ranking_table(held, "spec" if not suffix else "tuned")
            figures["verdict_heldout" + suffix] = _verdict(held, truth, "verdict")
            figures["handset_verdict_heldout" + suffix] = _verdict(held, truth, "handset_verdict")
            figures["no_probe_verdict_heldout" + suffix] = _verdict(held, truth, "no_probe_verdict")
    return figures


def _verdict(rows: list[dict[str, Any]], truth: str, verdict: str) -> dict[str, float]:
    """Precision / recall of a ``prune`` verdict against a ground truth (rows lacking it left out)."""
    kept = [r for r in rows if r.get(truth) is not None]
    return metrics.flags_figures([r.get(verdict) == "prune" for r in kept], [bool(r[truth]) for r in kept]).__dict__


def _steps_per_epoch(rows: list[dict[str, Any]], protocol: Protocol) -> float:
    sizes = [len(load_key(d).x_train) for d in {r["dataset"] for r in rows}]
    return float(np.median([math.ceil(s / protocol.batch_size) for s in sizes])) if sizes else math.nan

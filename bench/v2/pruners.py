"""Optuna's pruners replayed on the benchmark's learning curves, against Preflight at equal compute.

A replayed search visits the candidates of one dataset in a random order (``ORDERS`` orders). A
trial is the candidate trained by protocol S from the spec's init, seed 0, all three rates side
by side; it reports, at each checkpoint (a quarter epoch), the best rate's mean mini-batch loss
so far, and stops when the pruner says so. Compute is in training steps at batch 64: a
checkpoint of a trial costs its steps at every rate. The pruners are Optuna's own
(``MedianPruner``, ``SuccessiveHalvingPruner``, ``HyperbandPruner``), driven through
``study.ask`` / ``trial.report`` / ``trial.should_prune`` on an in-memory study.

Preflight's gate conditions every candidate (its counted cost), skips the ``prune`` verdicts and
trains the rest from the tuned init (protocol S, seed 0). A second comparison puts every method at
*the same compute*: given a pruner's compute, a score-ranked search pays the score of every
candidate, then trains candidates fully in descending score until that compute is spent (Preflight's
score and the equal-cost probe baseline). Figures: compute relative to training every candidate
fully, and regret = the best test accuracy of the pool minus the best a search trained fully.

The score-ranked search trains from the tuned init (what the product does) and the probe-ranked one
from the spec's (a probe tunes nothing), so their difference mixes the ranking with the init; the
score-ranked search trained from the spec's init too is the ranking alone, beside the probe's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna

from bench.v2.analysis import Row

__all__ = ["ORDERS", "replay"]

ORDERS = 20
PRUNERS: dict[str, Callable[[], optuna.pruners.BasePruner]] = {
    "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1),
    "successive_halving": lambda: optuna.pruners.SuccessiveHalvingPruner(),
    "hyperband": lambda: optuna.pruners.HyperbandPruner(min_resource=1, reduction_factor=3),
}


def _trial_data(row: Row, init: str) -> dict[str, Any] | None:
    runs = row.runs.get(("sgd", init))
    if not runs:
        return None
    run = runs[0]["run"]
    curve = np.min(np.array(run["curves"], dtype=float), axis=0)
    n_rates = len(run["curves"])
    per_checkpoint = run["steps_per_rate"] / len(curve) * n_rates
    return {
        "curve": np.where(np.isfinite(curve), curve, 1e6),
        "checkpoint_cost": per_checkpoint,
        "full_cost": per_checkpoint * len(curve),
        "accuracy": run["test_accuracy"][run["best"]],
    }


def _search(order: list[int], trials: list[dict[str, Any]], make: Callable[[], optuna.pruners.BasePruner]) -> tuple:
    # a fixed name: Hyperband assigns brackets by a hash of the study's name, a random one by default
    study = optuna.create_study(
        study_name="replay",
        direction="minimize",
        pruner=make(),
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    compute, best = 0.0, -math.inf
    for index in order:
        data = trials[index]
        trial = study.ask()
        pruned = False
        for step, value in enumerate(data["curve"]):
            compute += data["checkpoint_cost"]
            trial.report(float(value), step)
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                pruned = True
                break
        if not pruned:
            study.tell(trial, float(data["curve"][-1]))
            best = max(best, data["accuracy"])
    return compute, best


def _ranked(scores: np.ndarray, score_cost: np.ndarray, full: np.ndarray, accuracy: np.ndarray, budget: float) -> float:
    """The best accuracy a score-ranked search trains fully within ``budget`` (nan: scoring every
    candidate leaves too little to train the first one fully)."""
    left = budget - float(np.nansum(score_cost))
    best = math.nan
    for index in np.argsort(-np.where(np.isnan(scores), -np.inf, scores), kind="stable"):
        if full[index] > left:
            break
        left -= full[index]
        best = accuracy[index] if math.isnan(best) else max(best, accuracy[index])
    return best


def _mean_defined(values: list[float]) -> float:
    array = np.asarray(values, dtype=float)
    return float(array[~np.isnan(array)].mean()) if (~np.isnan(array)).any() else math.nan


def replay(rows: list[Row], orders: int = ORDERS) -> dict[str, Any]:
    """Compute ratio and regret of each pruner, of Preflight's gate, and of the score-ranked
    searches at each pruner's compute (means over the random orders)."""
    keep = [r for r in rows if r.preflight and r.baselines and ("sgd", "spec") in r.runs and ("sgd", "tuned") in r.runs]
    if len(keep) < 6:
        return {"n": len(keep)}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = [_trial_data(r, "spec") for r in keep]
    tuned = [_trial_data(r, "tuned") for r in keep]
    full_spec = float(sum(t["full_cost"] for t in spec))  # type: ignore[index]
    # the best test accuracy any candidate reaches, from the spec's init or the tuned one
    pool_best = max(t["accuracy"] for t in spec + tuned)  # type: ignore[index,operator]
    scores = np.array([float(r.preflight["score"]) for r in keep])  # type: ignore[index]
    pre_cost = np.array([float(r.preflight.get("counted_cost") or 0.0) for r in keep])  # type: ignore[union-attr]
    probe = np.array([-(r.baselines["probe_full"]["loss"] or math.nan) for r in keep])  # type: ignore[index]
    probe_cost = np.array([float(r.baselines["probe_full"]["cost"]) for r in keep])  # type: ignore[index]
    full_tuned = np.array([t["full_cost"] for t in tuned])  # type: ignore[index]
    acc_tuned = np.array([t["accuracy"] for t in tuned])  # type: ignore[index]
    full_specs = np.array([t["full_cost"] for t in spec])  # type: ignore[index]
    acc_spec = np.array([t["accuracy"] for t in spec])  # type: ignore[index]
    keeps = np.array([r.preflight.get("verdict") != "prune" for r in keep])  # type: ignore[union-attr]
    gate_compute = float(pre_cost.sum() + full_tuned[keeps].sum())
    gate_best = float(acc_tuned[keeps].max()) if keeps.any() else -math.inf
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {}
    for name, make in PRUNERS.items():
        computes, regrets, ranked_pre, ranked_pre_spec, ranked_probe = [], [], [], [], []
        for _ in range(orders):
            order = [int(i) for i in rng.permutation(len(keep))]
            compute, best = _search(order, spec, make)  # type: ignore[arg-type]
            computes.append(compute / full_spec)
            regrets.append(pool_best - best)
            ranked_pre.append(pool_best - _ranked(scores, pre_cost, full_tuned, acc_tuned, compute))
            ranked_pre_spec.append(pool_best - _ranked(scores, pre_cost, full_specs, acc_spec, compute))
            ranked_probe.append(pool_best - _ranked(probe, probe_cost, full_specs, acc_spec, compute))
        results[name] = {
            "compute_ratio": float(np.mean(computes)),
            "regret": float(np.mean(regrets)),
            # over the orders on which the ranked search could pay its scoring and train one candidate
            "preflight_ranked_regret": _mean_defined(ranked_pre),
            "preflight_ranked_spec_init_regret": _mean_defined(ranked_pre_spec),  # the ranking alone
            "probe_ranked_regret": _mean_defined(ranked_probe),
            "ranked_undefined_orders": int(np.isnan(ranked_pre).sum()),
        }
    results["preflight_gate"] = {
        "compute_ratio": gate_compute / full_spec,
        "regret": pool_best - gate_best,
        "skipped": int((~keeps).sum()),
    }
    return {"n": len(keep), "orders": orders, "pool_best": pool_best, "methods": results}

"""Optuna's MedianPruner as the reference a user would otherwise pick.

Replays the recorded training curves (spec initialization, the protocol's middle learning
rate: a user trains one rate) through a real ``optuna.pruners.MedianPruner`` study: each
candidate is a trial that reports its mean mini-batch loss after every epoch and stops when
``trial.should_prune()`` says so. A pruned trial is a flagged candidate; its cost is the
epochs it trained. Candidates enter in a random order (``orders`` shuffles, averaged).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["median_pruner_reference"]


def _replay(curves: list[list[float]], order: np.ndarray, startup: int) -> tuple[list[bool], list[int]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=0)
    study = optuna.create_study(direction="minimize", pruner=pruner)
    flagged, epochs = [False] * len(curves), [0] * len(curves)
    for i in order:
        trial = study.ask()
        curve = curves[i]
        last = math.inf
        for step, value in enumerate(curve):
            last = value if math.isfinite(value) else 1e300  # optuna rejects inf
            trial.report(last, step)
            epochs[i] = step + 1
            if trial.should_prune():
                flagged[i] = True
                break
        if flagged[i]:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, last)
    return flagged, epochs


def _mean(values: list[float]) -> float:
    """Mean of the finite values; nan when there are none (no warning)."""
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def median_pruner_reference(
    curves: list[list[float]],
    untrainable: list[bool],
    epochs_total: int,
    orders: int = 5,
    startup: int = 5,
) -> dict[str, Any]:
    """Mean precision, recall and fraction of training spent over ``orders`` random orders."""
    bad = np.asarray(untrainable, dtype=bool)
    precisions, recalls, spent = [], [], []
    for seed in range(orders):
        order = np.random.default_rng(seed).permutation(len(curves))
        flagged, epochs = _replay(curves, order, startup)
        flag = np.asarray(flagged, dtype=bool)
        hits = int((flag & bad).sum())
        precisions.append(hits / flag.sum() if flag.sum() else math.nan)
        recalls.append(hits / bad.sum() if bad.sum() else math.nan)
        spent.append(float(np.mean(epochs)) / epochs_total)
    return {
        "precision": _mean(precisions),
        "recall": _mean(recalls),
        "fraction_of_training": float(np.mean(spent)),
        "orders": orders,
        "n_startup_trials": startup,
    }

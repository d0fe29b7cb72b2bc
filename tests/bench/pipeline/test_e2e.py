"""The end-to-end figures from a demo's results.json (the demo itself is not run here)."""

from __future__ import annotations

import math

import pytest

from bench.pipeline import e2e


def _trial(accuracy, train, condition=0.0, state="complete", epochs=2):
    return {
        "accuracy": accuracy,
        "train_seconds": train,
        "condition_seconds": condition,
        "state": state,
        "epochs": epochs,
    }


def test_compute_to_reach_counts_trials_in_order_until_the_target():
    trials = [_trial(0.5, 2.0, 1.0), _trial(None, 0.0, 0.5, "pruned-before", 0), _trial(0.9, 3.0)]
    assert e2e.compute_to_reach(trials, 0.9) == pytest.approx(6.5)
    assert e2e.epochs_to_reach(trials, 0.9) == 4
    assert math.isinf(e2e.compute_to_reach(trials, 0.95))


def test_summary_compares_each_search_with_the_ungated_best():
    results = {
        "searches": [
            {"name": "no gate", "trials": [_trial(0.8, 4.0), _trial(0.9, 4.0)]},
            {"name": "preflight gate", "trials": [_trial(None, 0.0, 0.5, "pruned-before", 0), _trial(0.92, 3.0, 0.5)]},
        ]
    }
    got = e2e.summarize_seed(results)
    assert got["ungated_best_accuracy"] == 0.9
    assert got["no gate"]["ratio_to_ungated"] == pytest.approx(1.0)
    assert got["preflight gate"]["ratio_to_ungated"] == pytest.approx(4.0 / 8.0)
    assert got["preflight gate"]["pruned_before"] == 1


def test_the_oracle_gate_skips_only_the_trials_that_did_not_train_and_stops_at_the_target():
    trials = [_trial(0.1, 3.0), _trial(0.95, 2.0), _trial(0.0, 0.5), _trial(0.97, 1.0), _trial(0.2, 9.0)]
    # kept up to the target 0.97: 2.0 + 1.0 of the 6.5 s the trials spent to get there
    assert e2e.oracle_gate_ratio(trials, 0.97) == pytest.approx(3.0 / 6.5)
    assert e2e.oracle_gate_ratio(trials, 0.95) == pytest.approx(2.0 / 5.0)
    assert math.isinf(e2e.oracle_gate_ratio(trials, 0.99))


def test_summary_bounds_the_gate_by_the_oracle_on_the_ungated_trials():
    results = {
        "searches": [
            {"name": "no gate", "trials": [_trial(0.1, 4.0), _trial(0.9, 4.0)]},
            {"name": "preflight gate", "trials": [_trial(None, 0.0, 0.5, "pruned-before", 0), _trial(0.92, 3.0, 0.5)]},
        ]
    }
    assert e2e.summarize_seed(results)["oracle_gate_ratio"] == pytest.approx(0.5)


def test_the_survivors_spearman_pools_the_gated_trials_that_trained():
    def gated(*trials):
        return {
            "searches": [
                {"name": "no gate", "trials": [_trial(0.9, 1.0)]},
                {"name": "preflight gate", "trials": list(trials)},
            ]
        }

    def scored(accuracy, score, state="complete"):
        return {**_trial(accuracy, 1.0, 0.1, state), "score": score}

    runs = [
        gated(scored(0.90, -0.3), scored(0.95, -0.1), scored(0.0, 0.5)),  # diverged: left out
        gated(scored(0.97, -0.05), scored(None, -0.6, "pruned-before")),
    ]
    got = e2e.survivors_score_spearman(runs)
    assert got == {"n": 3, "spearman": pytest.approx(1.0)}

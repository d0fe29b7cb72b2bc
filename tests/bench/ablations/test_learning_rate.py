"""The recommended-learning-rate ablation: its rules, its per-candidate intervals, and the
figure the README and docs/conditioning.md quote, recomputed from the committed caches."""

from __future__ import annotations

import numpy as np

from bench.ablations.learning_rate import _at, _nearest, _rules, report

RATES = (0.1, 0.03, 0.01)


def test_a_recommended_rate_trains_at_the_nearest_rate_of_the_grid() -> None:
    assert [_nearest(RATES, lr) for lr in (0.2, 0.1, 0.03, 0.009, 0.001)] == [0, 0, 1, 2, 2]
    rules = _rules(RATES)
    recommended = next(rule for name, rule in rules.items() if "recommended_lr" in name)
    assert [recommended({"best_lr": lr}) for lr in (0.1, 0.03, None)] == [1, 2, 1]  # None: 0.03


def test_a_candidates_seeds_are_averaged_before_resampling() -> None:
    rows = [
        {"id": "a", "accuracy": np.array([0.2, 0.4, 0.6]), "best": 2},
        {"id": "a", "accuracy": np.array([0.4, 0.6, 0.8]), "best": 2},
        {"id": "b", "accuracy": np.array([0.9, 0.5, 0.1]), "best": 0},
    ]
    assert np.allclose(_at(rows, lambda row: row["best"]), [0.7, 0.9])


def test_the_quoted_figure_is_what_the_committed_caches_give() -> None:
    text = report()
    assert "| test | all | 104 |" in text and "+0.004 [-0.001, +0.012]" in text
    assert "The best fixed rate on the development set: 0.03." in text


def test_a_cached_probe_is_of_the_tuned_network_it_was_run_on() -> None:
    """The probe cache's fingerprint follows the tuned scales and the draw: a changed engine's
    network is probed again, not read from an older network's probe."""
    from bench.ablations.learning_rate import _tuned_fingerprint

    base = {"scales": {"blocks.0.0.weight": 1.5}, "draw": "orthogonal"}
    assert _tuned_fingerprint(base) == _tuned_fingerprint(dict(base))
    assert _tuned_fingerprint(base) != _tuned_fingerprint(base | {"scales": {"blocks.0.0.weight": 1.6}})
    assert _tuned_fingerprint(base) != _tuned_fingerprint(base | {"draw": "gaussian"})

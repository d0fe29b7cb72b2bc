"""The output-std ablation's summary: fractions per variant and per calibration half."""

from __future__ import annotations

import math

import pytest

from bench.ablations.output_std import _log_ratio, summarize


def test_summary_counts_tuned_better_per_half_and_keeps_divergence_one_sided():
    spec = {"a": 1.0, "b": 1.0, "c": math.inf, "d": 0.5}
    losses = {
        "a": {"x": 0.5, "y": 2.0},
        "b": {"x": 2.0, "y": 0.5},
        "c": {"x": 0.1, "y": math.inf},  # both diverged under y: no ratio to take, a tie
        "d": {"x": 0.25},
    }
    out = summarize(losses, spec, train_ids={"a", "b"})
    assert out["x"]["train"] == {"n": 2, "better": 0.5, "median_log_ratio": pytest.approx(0.0)}
    assert out["x"]["held-out"]["n"] == 2 and out["x"]["held-out"]["better"] == 1.0
    assert out["y"]["all"]["n"] == 3
    assert out["y"]["held-out"]["better"] == 0.0
    assert out["y"]["all"]["better"] == pytest.approx(1 / 3)


def test_the_log_ratio_counts_a_diverged_tuned_run_as_infinitely_worse():
    assert _log_ratio(1.0, 0.5) == pytest.approx(math.log(2.0))
    assert _log_ratio(0.5, math.inf) == -math.inf
    assert _log_ratio(math.inf, 0.5) == math.inf
    assert _log_ratio(math.inf, math.inf) == 0.0

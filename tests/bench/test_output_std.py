"""The output-std ablation's summary: fractions per variant and per calibration half."""

from __future__ import annotations

import math

import pytest

from bench.output_std import summarize


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

"""The calibration fit: split, features and the NNLS recovering known weights."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench import calibrate


def test_split_alternates_within_each_family():
    train, held = calibrate.split({"a": ["a-2", "a-0", "a-1"], "b": ["b-0", "b-1"]})
    assert train == ["a-0", "a-2", "b-0"]
    assert held == ["a-1", "b-1"]


def test_features_follow_the_engine_policy_for_missing_and_non_finite():
    row = calibrate.features({"x": 1.0, "y": None, "z": math.inf}, {"x": 0.5}, ["x", "y", "z"])
    assert row.tolist() == pytest.approx([math.log1p(2.0), 0.0, 50.0])


def test_fit_recovers_non_negative_weights_and_keeps_negative_ones_at_zero():
    rng = np.random.default_rng(0)
    rows = [rng.uniform(0, 1, size=3) for _ in range(200)]
    true = np.array([0.5, 0.0, 0.2])
    targets = [0.1 + float(r @ true) for r in rows]
    bad = [t > 0.5 for t in targets]
    model = calibrate.fit(rows, targets, bad, ["a", "b", "c"])
    assert model["weights"]["a"] == pytest.approx(0.5, abs=1e-9)
    assert model["weights"]["b"] == pytest.approx(0.0, abs=1e-9)
    assert model["weights"]["c"] == pytest.approx(0.2, abs=1e-9)
    assert model["intercept"] == pytest.approx(0.1, abs=1e-9)


def test_threshold_prunes_below_the_cut_with_the_best_precision_at_the_target_recall():
    # Features grow with badness: the three worst rows are the untrainable ones.
    rows = [np.array([v]) for v in (0.0, 0.1, 0.2, 0.9, 1.0, 1.1)]
    targets = [0.1, 0.1, 0.1, 1.0, 1.0, 1.0]
    model = calibrate.fit(rows, targets, [False, False, False, True, True, True], ["a"])
    scores = [calibrate.apply(model, r, ["a"]) for r in rows]
    pruned = [s < model["prune_below"] for s in scores]
    assert pruned == [False, False, False, True, True, True]

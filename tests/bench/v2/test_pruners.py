"""Optuna's pruners replayed on learning curves, and Preflight's gate, at counted compute."""

from __future__ import annotations

import math

import pytest

from bench.pipeline.candidates import Candidate
from bench.v2.analysis import Row
from bench.v2.pruners import replay

CHECKPOINTS = 8
STEPS = 80  # per rate: 10 steps a checkpoint, 3 rates


def _run(final: float, accuracy: float) -> dict:
    curve = [2.3 - (2.3 - final) * (k + 1) / CHECKPOINTS for k in range(CHECKPOINTS)]
    return {
        "run": {
            "curves": [curve, [c + 0.1 for c in curve], [c + 0.2 for c in curve]],
            "steps_per_rate": STEPS,
            "test_accuracy": [accuracy, accuracy - 0.05, accuracy - 0.1],
            "best": 0,
            "final_loss": [final, final + 0.1, final + 0.2],
            "diverged": [False] * 3,
        },
        "epochs": 2,
        "chance": math.log(10),
    }


def _row(i: int, good: bool, score: float) -> Row:
    final, accuracy = (0.3 + 0.01 * i, 0.9 - 0.001 * i) if good else (2.25, 0.1)
    row = Row(Candidate(f"c{i}", "fm_cnn", "fashion_mnist_image", {}), "test", chance=math.log(10))
    row.preflight = {"score": score, "verdict": "keep" if good else "prune", "counted_cost": 6.0}
    row.baselines = {"probe_full": {"loss": 0.5 if good else 1.0, "cost": 6.0}}
    row.runs = {("sgd", "spec"): [_run(final, accuracy)], ("sgd", "tuned"): [_run(final, accuracy)]}
    return row


@pytest.fixture(scope="module")
def result():
    rows = [_row(i, good=i % 2 == 0, score=-float(i)) for i in range(20)]
    return replay(rows, orders=4)


def test_pruners_stop_the_hopeless_candidates_and_spend_less_than_training_all(result):
    for name in ("median", "successive_halving", "hyperband"):
        figures = result["methods"][name]
        assert figures["compute_ratio"] < 0.9, name
        assert 0.0 <= figures["regret"] <= 0.8, name


def test_the_gate_skips_the_prune_verdicts_and_pays_its_conditioning(result):
    gate = result["methods"]["preflight_gate"]
    assert gate["skipped"] == 10
    full = 20 * 3 * STEPS
    assert gate["compute_ratio"] == pytest.approx((20 * 6.0 + 10 * 3 * STEPS) / full)
    assert gate["regret"] == pytest.approx(0.0)  # the best candidate (c0) is kept


def test_a_score_that_ranks_perfectly_finds_the_best_at_any_compute_that_trains_one(result):
    for name in ("median", "successive_halving", "hyperband"):
        assert result["methods"][name]["preflight_ranked_regret"] == pytest.approx(0.0), name


def test_too_few_candidates_give_no_replay():
    assert replay([_row(i, True, 0.0) for i in range(3)]) == {"n": 3}


def test_the_replay_repeats_exactly():
    rows = [_row(i, good=i % 3 != 0, score=-float(i)) for i in range(24)]
    assert replay(rows, orders=3) == replay(rows, orders=3)


def test_the_score_ranked_search_is_also_given_from_the_spec_init_as_the_probe_ranked_one_is():
    """The tuned init trains each candidate 0.05 better here: the score-ranked search from it has
    no regret, the same ranking from the spec's init loses exactly that (the ranking alone, beside
    the probe's, which also trains from the spec's init)."""
    rows = [_row(i, good=i % 2 == 0, score=-float(i)) for i in range(20)]
    for row in rows:
        tuned = row.runs[("sgd", "tuned")][0]["run"]
        tuned["test_accuracy"] = [a + 0.05 for a in tuned["test_accuracy"]]
    for name, figures in replay(rows, orders=4)["methods"].items():
        if name != "preflight_gate":
            assert figures["preflight_ranked_regret"] == pytest.approx(0.0), name
            assert figures["preflight_ranked_spec_init_regret"] == pytest.approx(0.05), name

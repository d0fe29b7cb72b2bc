"""The report's comparison of the tuned init with each init peer (issue target: fewer untrainable
candidates than any peer, next to the share of candidates it trains better)."""

from __future__ import annotations

import math

import pytest

from bench.pipeline.candidates import Candidate
from bench.v2.analysis import Row, tuning

CHANCE = math.log(10)


def _run(loss: float) -> dict[str, object]:
    diverged = math.isinf(loss)
    return {
        "run": {"best": 0, "final_loss": [loss], "test_accuracy": [0.1 if loss > 1 else 0.8], "diverged": [diverged]},
        "chance": CHANCE,
    }


def _row(i: int, tuned: float, peer: float) -> Row:
    row = Row(Candidate(f"c{i}", "fm_cnn", "fashion_mnist_image", {}), "test", chance=CHANCE)
    row.runs = {("sgd", "tuned"): [_run(tuned)], ("sgd", "lsuv"): [_run(peer)]}
    return row


def test_untrainable_counts_include_the_candidates_both_inits_diverge_on() -> None:
    """20 candidates: 2 diverge from both inits (left out of the loss share, counted untrainable
    for both), 10 more are untrainable from the peer alone (a final loss above ln C / 2), 1 from
    the tuned init alone."""
    rows = [_row(i, math.inf, math.inf) for i in range(2)]
    rows += [_row(i, 0.3, 2.0) for i in range(2, 12)]
    rows += [_row(12, 2.0, 0.3)]
    rows += [_row(i, 0.3, 0.4) for i in range(13, 20)]
    got = tuning(rows, "sgd", resamples=500)["lsuv"]
    assert got["n"] == 18
    assert got["wins"]["point"] == pytest.approx(17 / 18)
    bad = got["untrainable"]
    assert (bad["n"], bad["tuned"], bad["peer"]) == (20, 3, 12)
    assert bad["fewer"]["point"] == pytest.approx(9 / 20)
    assert 0 < bad["fewer"]["low"] < bad["fewer"]["point"] < bad["fewer"]["high"]


def test_equal_untrainable_counts_give_an_interval_around_zero() -> None:
    rows = [_row(0, 2.0, 0.3), _row(1, 0.3, 2.0)] + [_row(i, 0.3, 0.4) for i in range(2, 12)]
    bad = tuning(rows, "sgd", resamples=500)["lsuv"]["untrainable"]
    assert (bad["tuned"], bad["peer"], bad["fewer"]["point"]) == (1, 1, 0.0)
    assert bad["fewer"]["low"] < 0 < bad["fewer"]["high"]


def test_the_share_where_either_init_trains_leaves_out_pairs_that_neither_trains() -> None:
    """12 pairs where both end untrainable but finite (a loss near chance decides them: tuned
    "wins" 10) and 10 where one or both train (tuned wins 5): the share counts all 22, the
    second one the 10 alone."""
    rows = [_row(i, 2.0, 2.1) for i in range(10)] + [_row(i, 2.2, 2.1) for i in range(10, 12)]
    rows += [_row(i, 0.3, 0.4) for i in range(12, 17)] + [_row(i, 0.4, 0.3) for i in range(17, 22)]
    got = tuning(rows, "sgd", resamples=500)["lsuv"]
    assert got["wins"]["point"] == pytest.approx(15 / 22)
    either = got["wins_either_trains"]
    assert either["n"] == 10 and either["point"] == pytest.approx(0.5)
    assert either["low"] < 0.5 < either["high"]

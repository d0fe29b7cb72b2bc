"""The score's target lines are drawn against peers at Preflight's counted cost: LSUV then the
engine's probe sized to that cost always, LSUV's 15-step pipeline (several times the cost) only in
the supplementary lines."""

from __future__ import annotations

import math

from bench.pipeline.candidates import Candidate
from bench.v2.analysis import Row, ranking


def _row(i: int) -> Row:
    loss = 0.2 + 0.1 * i
    run = {
        "run": {"best": 0, "final_loss": [loss], "test_accuracy": [0.9 - 0.02 * i], "diverged": [False]},
        "chance": math.log(10),
    }
    row = Row(Candidate(f"c{i}", "fm_cnn", "fashion_mnist_image", {}), "test", chance=math.log(10))
    row.preflight = {"score": -0.1 * i, "counted_cost": 17.0}
    row.baselines = {
        "probe_full": {"loss": 0.5 + 0.01 * ((i * 7) % 12), "cost": 17.0},
        "lsuv_probe": {"loss": 0.3 + 0.05 * i, "cost": 80.0},  # ranks as well as Preflight, at 4.7 times
        "lsuv_probe_equal": {"loss": 0.4 + 0.01 * ((i * 5) % 12), "cost": 18.5},  # LSUV's passes ran over
    }
    row.proxies = {"step_seconds": 1.0, "tuned": {"snip": {"score": float((i * 3) % 12), "seconds": 30.0}}}
    row.runs = {("sgd", "tuned"): [run]}
    return row


def test_lsuv_sized_to_preflights_cost_is_an_equal_cost_peer_and_the_15_step_lsuv_probe_is_not():
    figures = ranking([_row(i) for i in range(12)], "B", "sgd", resamples=50)
    assert set(figures["equal_cost_peers"]) == {"probe_full", "probe_quarter", "lsuv_probe_equal"} & set(
        figures["methods"]
    )
    assert "lsuv_probe" not in figures["equal_cost_peers"]  # 80 counted steps against 17
    assert "proxy:snip" not in figures["equal_cost_peers"]  # 30 steps: over 1.05 times Preflight's cost
    for target in figures["targets"].values():
        assert target["best_peer"] in figures["equal_cost_peers"]
    # with the costlier pipeline among the peers, it is the best by Spearman (it ranks as Preflight does)
    assert figures["targets_costlier"]["spearman_accuracy"]["best_peer"] == "lsuv_probe"

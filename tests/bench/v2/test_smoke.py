"""Benchmark v2's smoke run: a few candidates of both sets, two seeds, every stage, a full report."""

from __future__ import annotations

import math
import re

import pytest

from bench.v2.__main__ import SMOKE_IDS, main
from bench.v2.stages import INIT_PEERS


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smoke_benchmark_computes_every_stage_and_writes_the_report(tmp_path, fashion_mnist_dir):
    assert main(["--smoke", "--out", str(tmp_path), "--jobs", "1", "--quiet"]) == 0

    from bench.pipeline.run import read_json

    figures = read_json(tmp_path / "figures.json")
    test = figures["test"]["figures"]
    assert set(test) == {"fashion_mnist", "digits"}  # the smoke set has no breast-cancer candidate
    fashion = test["fashion_mnist"]
    assert fashion["n"] == len([i for i in SMOKE_IDS if "fm_" in i])
    for key in ("A/sgd", "B/sgd", "A/adamw", "B/adamw"):
        rank = fashion["ranking"][key]
        assert rank["n"] == fashion["n"] and rank["seeds"] == 2, key
        methods = rank["methods"]
        assert {"preflight", "probe_full", "probe_quarter", "lsuv_probe", "lsuv_probe_equal", "first_epoch"} <= set(
            methods
        )
        assert {"proxy:params"} <= set(methods)
        assert any(m.startswith("proxy:") for m in methods)
        # the equal-cost probes cost what Preflight costs, within one step per rate
        assert abs(methods["probe_full"]["cost"] - methods["preflight"]["cost"]) <= 3.0
        assert abs(methods["lsuv_probe_equal"]["cost"] - methods["preflight"]["cost"]) <= 2.0
        assert methods["probe_quarter"]["cost"] < 0.5 * methods["preflight"]["cost"]
        assert "lsuv_probe_equal" in rank["equal_cost_peers"] and "lsuv_probe" not in rank["equal_cost_peers"]
        for kind, target in rank["targets"].items():
            assert target["best_peer"] in rank["equal_cost_peers"], kind
        for kind, target in rank["targets_costlier"].items():  # the costlier LSUV pipeline among the peers too
            assert target["best_peer"] in {*rank["equal_cost_peers"], "lsuv_probe"}, kind
            rho = methods["preflight"]["figures"]["spearman_accuracy"]["point"]
            assert math.isnan(rho) or -1.0 <= rho <= 1.0
    assert set(fashion["tuning"]["sgd"]) == {"spec", *INIT_PEERS}
    assert set(fashion["tuning"]["adamw"]) == {"spec", *INIT_PEERS}  # the init peers under both protocols
    assert fashion["stage_costs"]["counted"]["probe_counted_steps"] > 0
    page = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "The frozen test set" in page and "The development set" in page
    assert "### Fashion-MNIST (test)" in page
    assert "Not enough candidates with every stage computed" in page  # the replay needs six or more
    # every stage computed: as many trainings in the cache as the completeness line expects
    counts = re.findall(r"(\d+) of (\d+) \(candidate, init, protocol, seed\) trainings", page)
    assert counts and all(trained == expected for trained, expected in counts), counts

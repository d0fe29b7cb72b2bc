"""Benchmark v2's report: what its answers say about the score's targets."""

from __future__ import annotations

from bench.v2 import report


def _target(peer: str, low: float, point: float, high: float) -> dict:
    return {"best_peer": peer, "difference": {"point": point, "low": low, "high": high}, "met": low > 0}


def test_the_answers_count_the_lines_met_against_only_the_peers_that_cost_no_more_than_preflight():
    methods = {"preflight": {"cost": 17.3}, "lsuv_probe": {"cost": 79.8}, "proxy:snip": {"cost": 1.6}}
    entry = {
        "ranking": {
            "B/sgd": {
                "n": 64,
                "methods": methods,
                "targets_strict": {
                    "spearman_accuracy": _target("proxy:snip", 0.02, 0.12, 0.26),
                    "spearman_loss": _target("proxy:snip", -0.01, 0.10, 0.25),
                },
            },
            "A/sgd": {"n": 64, "methods": methods, "targets_strict": {}},
        }
    }
    text = report._strict_answer(entry)
    assert "leaving out lsuv_probe at 79.8 counted steps" in text
    assert "1 of 2 met (B/sgd Spearman" in text and "against proxy:snip" in text
    assert report._strict_answer({"ranking": {"A/sgd": {"n": 0}}}) == ""

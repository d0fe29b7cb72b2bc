"""Benchmark v2's report: what its answers say about the score's targets."""

from __future__ import annotations

from bench.v2 import report


def _target(peer: str, low: float, point: float, high: float) -> dict:
    return {"best_peer": peer, "difference": {"point": point, "low": low, "high": high}, "met": low > 0}


def test_the_answers_also_count_the_lines_met_with_the_costlier_lsuv_pipeline_among_the_peers():
    methods = {"preflight": {"cost": 17.3}, "lsuv_probe": {"cost": 79.8}, "proxy:snip": {"cost": 1.6}}
    entry = {
        "ranking": {
            "B/sgd": {
                "n": 64,
                "methods": methods,
                "targets_costlier": {
                    "spearman_accuracy": _target("proxy:snip", 0.02, 0.12, 0.26),
                    "spearman_loss": _target("proxy:snip", -0.01, 0.10, 0.25),
                },
            },
            "A/sgd": {"n": 64, "methods": methods, "targets_costlier": {}},
        }
    }
    text = report._costlier_answer(entry)
    assert "With lsuv_probe among the peers too (at 79.8 counted steps" in text
    assert "1 of 2 met (B/sgd Spearman" in text and "against proxy:snip" in text
    assert report._costlier_answer({"ranking": {"A/sgd": {"n": 0}}}) == ""


def _verdict(flagged: int, untrainable: int, precision: float, recall: float, near: list[str]) -> dict:
    def figure(point: float) -> dict:
        return {"point": point, "low": point - 0.1, "high": min(1.0, point + 0.1)}

    return {
        "n": 64,
        "flagged": flagged,
        "untrainable": untrainable,
        "precision": figure(precision),
        "recall": figure(recall),
        "pruned_near_best": near,
    }


def test_the_answers_report_the_verdict_with_data_and_on_the_default_path_separately():
    entry = {
        "verdict": {"sgd": _verdict(1, 9, 1.0, 0.11, []), "adamw": _verdict(1, 26, 0.0, 0.0, [])},
        "verdict_default_path": _verdict(5, 9, 0.6, 0.5, ["c3"]) | {"engines": ["f3ec9c6a"]},
    }
    text = report._verdict_answer("Fashion-MNIST", entry)
    assert "with data 1 flagged of 9 untrainable, precision 1.00 [0.90, 1.00], recall 0.11" in text
    assert "on the default path (no data) 5 flagged of 9 untrainable" in text
    assert "1 pruned within 5 points of the best" in text
    assert "26 untrainable" not in text  # protocol S only
    table = "\n".join(report._verdict_table(entry))
    assert "| sgd, the default path (no data; engine f3ec9c6a) | 64 (9) | 5 |" in table
    assert report._verdict_answer("digits", {"verdict": {}, "verdict_default_path": {"n": 0}}) == ""

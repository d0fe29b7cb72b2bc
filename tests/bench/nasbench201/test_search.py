"""The NAS-Bench-201 search replay: a gate that skips proposals predicted to do badly reaches the
ungated best with less compute when its prediction is right, and is charged what it measures."""

from __future__ import annotations

import math

import numpy as np

from bench.nasbench201 import search


def _cells(n: int, seed: int, informative: bool) -> list[dict]:
    """Cells whose MeCo score and probe loss carry the accuracy (``informative``) or nothing."""
    rng = np.random.default_rng(seed)
    accuracy = rng.uniform(30, 94, size=n)
    signal = (accuracy - 60) / 20 if informative else rng.normal(size=n)
    return [
        {
            "accuracy": float(a),
            "proxies": {
                "flops": {"score": math.log(1e8)},  # every training costs the same
                "params": {"score": math.log(1e5)},
                "meco": {"score": float(m)},
            },
            "preflight": {"components": {"probe_loss": float(-m)}, "counted_cost": 15.0, "verdict": "keep"},
            "expressivity": {"meco": float(m), "naswot": None},
        }
        for a, m in zip(accuracy, signal, strict=True)
    ]


def test_a_gate_whose_prediction_is_right_reaches_the_ungated_best_with_less_compute():
    figures = search.simulate(_cells(400, 0, informative=True), repeats=20)
    for name in (search.RANKED, "MeCo, same rule"):
        assert np.median(figures[name].to_best) < 0.8
        assert np.mean(figures[name].at_equal_compute) > 0
        assert np.median(figures[name].trained) < 0.7 * search.PROPOSALS  # it skipped
    # no cell is below 20 %: the perfect flagging gate skips nothing and reaches it at the same compute
    assert np.allclose(figures["perfect flagging gate"].to_best, 1.0)


def test_a_gate_that_predicts_nothing_gains_nothing_on_average():
    figures = search.simulate(_cells(400, 1, informative=False), repeats=40)
    assert np.mean(figures["MeCo, same rule"].at_equal_compute) < 0.5  # points of accuracy: noise
    assert np.median(figures["MeCo, same rule"].to_best) > 0.8


def test_the_conditioning_is_charged_to_the_searches_that_condition():
    cells = _cells(400, 2, informative=True)
    figures = search.simulate(cells, repeats=10)
    # the verdict keeps every cell: it trains what the ungated search trains, plus the conditioning
    verdict = figures["Preflight's verdict alone"].to_best
    assert np.all(verdict > 1.0) and np.all(verdict < 1.01)


def test_the_rank_gate_skips_a_prune_verdict_from_the_first_proposal_as_the_gate_does():
    cells = _cells(400, 3, informative=True)
    flagged = {i for i, c in enumerate(cells) if c["accuracy"] < 50}
    for i in flagged:
        cells[i]["preflight"]["verdict"] = "prune"
    figures = search.simulate(cells, repeats=10)
    ranked, verdict = figures[search.RANKED], figures["Preflight's verdict alone"]
    # within the first proposals, before any fit, it trains what the verdict keeps and no more
    assert np.all(ranked.trained <= verdict.trained)
    assert np.all(verdict.trained < search.PROPOSALS * 0.8)
    # a space the verdict flags whole: nothing trains, not even the fit's first proposals
    for cell in cells:
        cell["preflight"]["verdict"] = "prune"
    assert np.all(search.simulate(cells, repeats=3)[search.RANKED].trained == 0)

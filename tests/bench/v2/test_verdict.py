"""The report's verdict figures (issue targets: the cut's precision and recall against ground truth B,
no prune near the best accuracy) and the cost per candidate."""

from __future__ import annotations

import math

import pytest

from bench.pipeline.candidates import Candidate
from bench.v2.analysis import Row, costs, verdict


def _row(i: int, *, untrainable: bool, pruned: bool, accuracy: float, cost: float = 17.0) -> Row:
    final = 2.2 if untrainable else 0.4
    run = {
        "run": {"best": 0, "final_loss": [final], "test_accuracy": [accuracy], "diverged": [False]},
        "chance": math.log(10),
    }
    row = Row(Candidate(f"c{i}", "fm_cnn", "fashion_mnist_image", {}), "test", chance=math.log(10))
    row.preflight = {"verdict": "prune" if pruned else "keep", "counted_cost": cost}
    row.runs = {("sgd", "tuned"): [run]}
    return row


def test_the_verdict_is_scored_against_the_tuned_inits_untrainable_candidates() -> None:
    rows = [_row(i, untrainable=i < 4, pruned=i < 3 or i == 10, accuracy=0.1 if i < 4 else 0.8) for i in range(20)]
    figures = verdict(rows, "sgd", resamples=200)
    assert figures["flagged"] == 4 and figures["untrainable"] == 4
    assert figures["precision"]["point"] == pytest.approx(3 / 4)
    assert figures["recall"]["point"] == pytest.approx(3 / 4)
    assert figures["pruned_near_best"] == ["c10"]  # a pruned candidate at the best accuracy is named


def test_a_prune_far_below_the_best_is_not_a_near_best_prune() -> None:
    rows = [_row(i, untrainable=False, pruned=i == 0, accuracy=0.5 if i == 0 else 0.9) for i in range(12)]
    assert verdict(rows, "sgd", resamples=0)["pruned_near_best"] == []


def test_the_cost_figures_are_the_median_and_the_90th_percentile() -> None:
    rows = [_row(i, untrainable=False, pruned=False, accuracy=0.8, cost=float(i + 1)) for i in range(10)]
    figures = costs(rows)
    assert figures["median"] == pytest.approx(5.5) and figures["p90"] == pytest.approx(9.1)


def test_the_tuned_runs_train_the_network_the_report_tuned() -> None:
    """The tuned stages rebuild the report's scales on its seed and draw, with its bias shifts: the
    orthogonal draw's scales on the Gaussian weights, or the scales without the centering's shifts,
    would be another network (bugs this test would have caught)."""
    import torch

    from bench.v2.stages import tuned_model
    from nas.examples import EXAMPLE_MLP
    from worker.engine import condition

    report = condition(EXAMPLE_MLP, options={"probe_steps": 1})
    assert report.environment.draw == "orthogonal"
    assert report.bias_shifts
    stage = {"scales": dict(report.scales), "draw": report.environment.draw, "bias_shifts": report.bias_shifts}
    candidate = Candidate("c", "mlp", "digits", EXAMPLE_MLP)
    x = torch.randn(4, *EXAMPLE_MLP["input_shape"], generator=torch.Generator().manual_seed(0))
    ours = tuned_model(candidate, report.environment.seed, stage).eval()
    assert torch.equal(ours(x), report.build_model(EXAMPLE_MLP).eval()(x))


def test_a_stage_that_ran_on_some_candidates_only_costs_its_mean_over_all() -> None:
    from bench.v2.analysis import stage_costs

    rows = [_row(i, untrainable=False, pruned=False, accuracy=0.8) for i in range(4)]
    for i, row in enumerate(rows):
        assert row.preflight is not None
        row.preflight["counted"] = {"probe": 10.7} | ({"probe_lower": 5.3} if i == 0 else {})
        row.preflight["timings"] = {"probe": 0.1}
    figures = stage_costs(rows)
    assert figures["counted"]["probe"] == pytest.approx(10.7)
    assert figures["counted"]["probe_lower"] == pytest.approx(5.3 / 4)  # 0 where it did not run
    assert figures["seconds"] == {"probe": pytest.approx(0.1)}

"""The cost budget of ``worker.engine.condition`` (docs/conditioning.md section 6) and dropping
balancing that did not converge."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch

from nas import build_model
from worker.engine import condition
from worker.engine.autoinit import autoinit
from worker.engine.balancing import balance
from worker.engine.budget import FORWARD_COST, hessian_plan, profile_cost
from worker.engine.hessian import spread_order


def _cbr(c: int) -> list[dict[str, Any]]:
    return [{"type": "conv2d", "out": c, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]


CNN = {
    "input_shape": [3, 16, 16],
    "blocks": [
        {"layers": _cbr(32)},
        {"layers": _cbr(32)},
        {"layers": [{"type": "maxpool", "kernel": 2}]},
        {"layers": _cbr(64)},
        {"layers": _cbr(64)},
        {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]},
    ],
}
SIGMOID_MLP = {
    "input_shape": [32],
    "blocks": [{"layers": [{"type": "linear", "out": 64}, {"type": "sigmoid"}]} for _ in range(6)]
    + [{"layers": [{"type": "linear", "out": 10}]}],
}


def test_spread_order_covers_every_layer_and_every_prefix_is_spread() -> None:
    for n in range(12):
        order = spread_order(n)
        assert sorted(order) == list(range(n))
    assert spread_order(9)[:3] == [0, 8, 4]


@pytest.mark.parametrize("budget", [30.0, 24.0])
def test_the_whole_conditioning_of_a_small_cnn_stays_within_its_budget(budget: float) -> None:
    condition(CNN, options={"batch_size": 32, "diagnostics": False})  # one-time costs (vmap) off the clock
    report = condition(CNN, options={"batch_size": 32, "budget_steps": budget, "diagnostics": True})
    timings, tuning = report.tuning.timings, report.tuning
    stages = {"step", "profile_before", "balance", "autoinit", "scaling", "bnp", "probe"}
    assert set(timings) >= stages
    # counted by the cost model (deterministic, what decides): within the budget exactly, the probe
    # included (its cost is reserved before AutoInit)
    counted = cast(
        dict[str, float],
        {
            k.removeprefix("counted_"): v
            for k, v in tuning.budget.items()
            if k.startswith("counted_") and k != "counted_steps"
        },
    )
    assert set(counted) >= stages
    assert tuning.budget["counted_steps"] is not None
    assert (
        sum(counted.values()) == pytest.approx(tuning.budget["counted_steps"])
        and tuning.budget["counted_steps"] <= budget
    )
    assert tuning.budget["probe_counted_steps"] == counted["probe"] > 0
    # The timed seconds against the budget (a speed figure, which a loaded machine stretches) are
    # measured as ratios by the benchmark, not here: python -m bench.perf.tuning_cost (docs/conditioning.md).
    assert tuning.balancing_mode == "closed_form"
    names = [layer.name for layer in report.layers]
    measured = names if tuning.hessian_measured is None else tuning.hessian_measured
    for layer in report.layers:  # measured layers have figures, the others are null
        assert (layer.hessian_mean_sq_singular is not None) == (layer.name in measured), layer
        assert layer.gamma is not None and layer.kappa_d is not None  # scaling and bnp always run
    if tuning.hessian_measured is not None:
        assert any("Hessian figures" in r for r in report.notes)
        assert names[-1] not in tuning.hessian_measured  # hidden layers first: the output layer is not scored
        if len(tuning.hessian_measured) < 2:
            assert report.components["hessian_log_spread"] is None  # no spread from one layer


def test_the_default_path_costs_at_most_twenty_training_steps_all_in() -> None:
    report = condition(CNN, options={"batch_size": 32})
    budget = report.tuning.budget
    assert budget["budget_steps"] == 20.0
    assert budget["counted_steps"] is not None and budget["probe_counted_steps"] is not None
    assert budget["counted_steps"] <= 20.0 and budget["probe_counted_steps"] > 0
    assert report.tuning.probe is not None  # the probe ran, inside the budget
    assert report.environment.diagnostics == []  # the diagnostics are off the default path


def test_the_budget_decisions_are_deterministic() -> None:
    options = {"batch_size": 32, "budget_steps": 26.0, "hessian_iterations": 3, "diagnostics": True}
    a, b = condition(CNN, options=options), condition(CNN, options=options)
    assert a.tuning.hessian_measured == b.tuning.hessian_measured and a.tuning.steps == b.tuning.steps
    assert a.scales == pytest.approx(b.scales, rel=1e-9)


def test_the_hessian_plan_fits_layers_then_iterations_into_what_is_left() -> None:
    assert hessian_plan(1000.0, 9, 3, 1, 0.25)[:2] == (9, 3)  # everything fits
    layers, iterations, cost = hessian_plan(12.0, 9, 3, 1, 0.25)
    assert iterations == 2 and 1 <= layers < 9 and cost <= 12.0
    assert hessian_plan(0.5, 9, 3, 1, 0.25) == (0, 0, 0.0)


def test_autoinit_stops_at_its_counted_cost() -> None:
    model = build_model(CNN, seed=0)
    x = torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    free = autoinit(model, x, steps=3, output_std=0.05, tolerance=1e-4)
    capped = autoinit(model, x, steps=3, output_std=0.05, tolerance=1e-4, max_cost=0.0)
    assert capped.steps == 1 <= free.steps and capped.cost == pytest.approx(FORWARD_COST + 2 * profile_cost(2))


def test_balancing_that_does_not_converge_is_dropped_with_a_note() -> None:
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    assert not balance(build_model(SIGMOID_MLP, seed=0), x, rounds=4).converged  # saturating activations
    report = condition(
        SIGMOID_MLP, options={"budget_steps": None, "balance_rounds": 4, "diagnostics": False, "batch_size": 64}
    )
    assert report.tuning.balancing_mode == "dropped"
    assert report.tuning.balancing == {}
    assert any("balancing did not converge" in r for r in report.notes)
    assert report.scales == {k: v for k, v in report.tuning.autoinit.items()}


def test_closed_form_balancing_costs_no_pass() -> None:
    x = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    result = balance(build_model(CNN, seed=0), x, rounds=0)
    assert result.passes == 0 and result.before == () and not result.converged
    assert {m.kind for m in result.multipliers} >= {"geometric"}

"""The trainability probe: a few SGD steps from the tuned weights, normalized by the best
constant prediction's loss, that leave the model as they found it."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import worker.engine
from nas import build_model
from worker.engine.probe import CAP, probe_cost, reference_loss, run_probe

pytestmark = pytest.mark.usefixtures("one_thread")

CLASSES = 4


def _mlp(
    depth: int = 2,
    width: int = 32,
    init: dict[str, Any] | None = None,
    dropout: float = 0.0,
    norm: bool = True,
) -> dict[str, Any]:
    hidden = [
        {"type": "linear", "out": width},
        *([{"type": "batchnorm"}] if norm else []),
        {"type": "relu"},
    ]
    if dropout:
        hidden.append({"type": "dropout", "p": dropout})
    return {
        "input_shape": [16],
        "init": init or {"scheme": "fan_in"},
        "blocks": [{"layers": hidden} for _ in range(depth)] + [{"layers": [{"type": "linear", "out": CLASSES}]}],
    }


def _separable(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Classes from a fixed linear rule: a batch an ordinary MLP fits in a few steps."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    y = (x @ torch.randn(16, CLASSES, generator=g)).argmax(dim=1)
    return x, y


def _probe(model: torch.nn.Module, y: torch.Tensor | None, lrs: tuple[float, ...] = (0.1, 0.03, 0.01)) -> Any:
    x, labels = _separable()
    return run_probe(model, x, labels if y is None else y, steps=10, lrs=lrs, momentum=0.9, seed=0)


def test_the_probe_leaves_weights_statistics_gradients_and_mode_unchanged() -> None:
    model = build_model(_mlp(), seed=0)
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = _probe(model, None)
    assert result.loss is not None
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "weights or BatchNorm buffers changed"
    assert all(p.grad is None for p in model.parameters())
    assert not model.training


def test_a_trainable_network_learns_its_batch_and_a_dead_one_does_not() -> None:
    """An MLP at fan-in init fits a linearly separable batch: after 10 steps it keeps less
    than half the uniform prediction's loss. With weights at std 1e-4 through 12 layers and
    no normalization, no signal reaches the head (the gradients vanish): on balanced labels,
    where a constant prediction can do no better than uniform, the probe stays within 2 % of 1."""
    healthy = _probe(build_model(_mlp(), seed=0), None)
    balanced = torch.arange(64) % CLASSES
    dead = _probe(
        build_model(_mlp(depth=12, init={"scheme": "normal", "std": 1e-4}, norm=False), seed=0),
        balanced,
    )
    assert healthy.loss is not None and healthy.loss < 0.5
    assert dead.loss is not None and dead.loss == pytest.approx(1.0, abs=0.02)


def test_a_rate_that_blows_up_is_diverged_and_every_rate_diverging_is_the_cap() -> None:
    model = build_model(_mlp(), seed=0)
    result = _probe(model, None, lrs=(1e6,))
    assert result.loss == CAP and result.best_lr is None
    assert result.curves["1e+06"][-1] is None  # non-finite or beyond the limit: stored as null
    mixed = _probe(model, None, lrs=(1e6, 0.03))
    assert mixed.best_lr == 0.03 and mixed.loss is not None and mixed.loss < 1.0


def test_without_labels_the_probe_memorizes_random_classes_over_the_logits() -> None:
    x, _ = _separable()
    result = run_probe(build_model(_mlp(), seed=0), x, None, steps=5, lrs=(0.03,), momentum=0.9, seed=3)
    assert result.targets == "random"
    assert result.reference == pytest.approx(math.log(CLASSES))
    again = run_probe(build_model(_mlp(), seed=0), x, None, steps=5, lrs=(0.03,), momentum=0.9, seed=3)
    assert again.curves == result.curves


def test_the_reference_is_the_uniform_or_mean_predictions_loss() -> None:
    assert reference_loss(torch.tensor([0, 1, 2]), outputs=10) == pytest.approx(math.log(10))
    t = torch.tensor([[1.0, 0.0], [3.0, 2.0]])  # mean (2, 1): squared distances 2 and 2
    assert reference_loss(t, outputs=2) == pytest.approx(0.5 * 2.0)
    x = torch.randn(16, 16)
    constant = torch.nn.Linear(16, 2)  # trained to the mean of float targets, MSE -> reference
    with torch.no_grad():
        constant.weight.zero_()
        constant.bias.copy_(t.mean(dim=0))
    targets = t.repeat(8, 1)
    with torch.no_grad():
        loss = 0.5 * (constant(x) - targets).pow(2).sum(dim=1).mean()
    assert float(loss) == pytest.approx(reference_loss(targets, outputs=2))


def test_dropout_draws_the_same_masks_at_every_rate_and_every_run() -> None:
    spec = _mlp(dropout=0.5)
    a = _probe(build_model(spec, seed=0), None)
    b = _probe(build_model(spec, seed=0), None)
    assert a.curves == b.curves


def test_condition_reports_the_probe_as_a_score_component_and_counts_its_cost() -> None:
    from nas.options import ConditionOptions

    x, y = _separable()
    report = worker.engine.condition(_mlp(), data={"x": x, "y": y})
    defaults = ConditionOptions()
    probe, steps, rates = report.tuning.probe, defaults.probe_steps, defaults.probe_lrs
    assert probe is not None and probe.targets == "given"
    assert report.components["probe_loss"] == pytest.approx(probe.loss)
    assert report.score_fit == "with_probe"
    assert set(probe.curves) == {f"{lr:g}" for lr in rates} and all(len(c) == steps + 1 for c in probe.curves.values())
    assert (
        report.tuning.budget["probe_counted_steps"]
        == pytest.approx(probe_cost(steps, len(rates)))
        == pytest.approx(len(rates) * (steps + 1 / 3))
    )
    # counted in the budget: the whole conditioning, the probe included, within budget_steps
    assert report.tuning.budget["counted_steps"] is not None and defaults.budget_steps is not None
    assert report.tuning.budget["counted_steps"] <= defaults.budget_steps
    assert "probe" in report.tuning.timings


def test_turning_the_probe_off_scores_with_the_calibration_fitted_without_it() -> None:
    """probe_steps 0: no probe; the score is the fit of the other components alone, with its
    own cut, and the probe costs nothing."""
    from worker.engine.score import CUTS, FIT_WEIGHTS

    on = worker.engine.condition(_mlp())
    off = worker.engine.condition(_mlp(), options={"probe_steps": 0})
    assert off.components["probe_loss"] is None and off.tuning.probe is None
    assert off.score_fit == "without_probe" and off.prune_below == CUTS["without_probe"]
    assert off.penalties["probe_loss"] == 0.0
    assert off.score == pytest.approx(-sum(p for p in off.penalties.values() if p))
    assert FIT_WEIGHTS["without_probe"] != FIT_WEIGHTS["with_probe"]
    assert off.tuning.budget["probe_counted_steps"] == 0.0
    assert on.scales == off.scales  # the probe measures; it never changes the initialization


def test_a_lower_rates_probe_joins_the_first_with_its_lower_loss_its_curve_and_its_cost() -> None:
    from worker.engine.probe import with_lower_rate

    model = build_model(_mlp(), seed=0)
    high, low = _probe(model, None, lrs=(30.0,)), _probe(model, None, lrs=(0.01,))
    assert high.best_lr is None and low.best_lr == 0.01  # 30 blows up; 0.01 learns
    joined = with_lower_rate(high, low)
    assert joined.loss == low.loss and joined.best_lr == 0.01
    assert set(joined.curves) == {"30", "0.01"} and joined.cost == pytest.approx(high.cost + low.cost)
    assert with_lower_rate(low, high).loss == low.loss  # a diverged lower rate changes nothing


def test_a_prune_whose_probe_did_best_at_its_lowest_rate_is_probed_again_below_it() -> None:
    """Rates far too high for the network prune it; ``probe_lower_lr`` finds that it learns at a
    rate below them, keeps it, recommends that rate and counts the extra probe in the budget."""
    x, y = _separable()
    options = {"probe_lrs": (30.0, 10.0), "budget_steps": None}
    pruned = worker.engine.condition(_mlp(), data={"x": x, "y": y}, options=options | {"probe_lower_lr": None})
    assert (
        pruned.verdict == "prune"
        and pruned.tuning.probe is not None
        and set(pruned.tuning.probe.curves) == {"30", "10"}
    )
    kept = worker.engine.condition(_mlp(), data={"x": x, "y": y}, options=options | {"probe_lower_lr": 0.03})
    probe = kept.tuning.probe
    assert probe is not None
    assert set(probe.curves) == {"30", "10", "0.03"} and probe.best_lr == 0.03
    assert kept.verdict == "keep" and probe.loss is not None and probe.loss < 0.9
    assert kept.components["probe_loss"] == pytest.approx(probe.loss)
    assert kept.recommended_lr is not None and kept.recommended_lr < 0.03
    budget = kept.tuning.budget
    assert budget["counted_probe_lower"] == pytest.approx(probe_cost(5, 1))
    assert budget["probe_counted_steps"] == pytest.approx(probe_cost(5, 2) + probe_cost(5, 1))
    assert any("ran again at 0.03" in note for note in kept.notes)
    assert kept.scales == pruned.scales  # the probe measures; it never changes the initialization


def test_a_keep_or_a_prune_at_a_higher_rate_runs_no_lower_probe() -> None:
    x, y = _separable()
    kept = worker.engine.condition(_mlp(), data={"x": x, "y": y})
    assert kept.verdict == "keep" and "counted_probe_lower" not in kept.tuning.budget


def test_a_lower_rate_not_below_every_probe_rate_is_never_tried() -> None:
    x, y = _separable()
    options = {"probe_lrs": (30.0, 10.0), "budget_steps": None, "probe_lower_lr": 10.0}
    report = worker.engine.condition(_mlp(), data={"x": x, "y": y}, options=options)
    assert (
        report.verdict == "prune"
        and report.tuning.probe is not None
        and set(report.tuning.probe.curves) == {"30", "10"}
    )

"""LSUV's forward-variance target in one pass (``worker.engine.forward_variance``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from nas import PreflightNet, build_model
from nas.build import apply_scales_
from worker.engine import condition
from worker.engine._moments import forward_hooks
from worker.engine.autoinit import conditioning_mode
from worker.engine.budget import FORWARD_COST
from worker.engine.forward_variance import unit_forward_variance_scales, weighted_layers

# a bad gain, a saturating activation and a residual block (and, in ``_model``, non-zero biases):
# nothing here lands at unit variance by construction
SPEC: dict[str, Any] = {
    "input_shape": [16],
    "init": {"scheme": "normal", "std": 0.4},
    "blocks": [
        {"layers": [{"type": "linear", "out": 32}, {"type": "tanh"}]},
        {"layers": [{"type": "residual", "body": [{"type": "linear", "out": 32}, {"type": "relu"}]}]},
        {"layers": [{"type": "linear", "out": 24}, {"type": "tanh"}]},
        {"layers": [{"type": "linear", "out": 10}]},
    ],
}


def _model() -> PreflightNet:
    model = build_model(SPEC, seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.fill_(0.3)
    return model


def _x() -> torch.Tensor:
    return 3.0 * torch.randn(64, 16, generator=torch.Generator().manual_seed(0))


def _variances(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Each weighted layer's output variance on ``x``, in the order the forward pass reaches them."""
    seen: dict[str, float] = {}
    modules = dict(model.named_modules())

    def record(name: str):  # noqa: ANN202
        def hook(_module: nn.Module, _args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            seen.setdefault(name, float(out.var()))

        return hook

    with forward_hooks([(modules[name], record(name)) for name in weighted_layers(model)]):
        with conditioning_mode(model), torch.no_grad():
            model(x)
    return seen


def _lsuv_loop(model: nn.Module, x: torch.Tensor, rounds: int = 50) -> None:
    """LSUV's own loop (Mishkin & Matas 2016, Algorithm 1), weight and bias scaled together: one
    layer at a time, a whole forward pass per round, until its variance is 1 to 1e-10."""
    modules = dict(model.named_modules())
    for name in weighted_layers(model):
        layer = modules[name]
        for _ in range(rounds):
            var = _variances(model, x)[name]
            if abs(var - 1.0) < 1e-10:
                break
            with torch.no_grad():
                for p in layer.parameters(recurse=False):
                    p.div_(math.sqrt(var))


def test_one_pass_puts_every_weighted_layer_at_unit_output_variance() -> None:
    model, x = _model(), _x()
    assert any(abs(v - 1.0) > 0.2 for v in _variances(model, x).values())
    apply_scales_(model, unit_forward_variance_scales(model, x))
    variances = _variances(model, x)
    assert len(variances) == 4
    assert all(v == pytest.approx(1.0, rel=1e-4) for v in variances.values())


def test_one_pass_equals_lsuvs_layer_by_layer_loop() -> None:
    one_pass, loop, x = _model(), _model(), _x()
    apply_scales_(one_pass, unit_forward_variance_scales(one_pass, x))
    _lsuv_loop(loop, x)
    for (name, a), b in zip(one_pass.state_dict().items(), loop.state_dict().values(), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name


def test_the_head_gets_its_own_std() -> None:
    model, x = _model(), _x()
    scales = unit_forward_variance_scales(model, x, head_std=0.5)
    apply_scales_(model, scales)
    variances = list(_variances(model, x).values())
    assert variances[-1] == pytest.approx(0.25, rel=1e-4)
    assert variances[0] == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize("place", ["base", "final"])
def test_the_option_is_counted_as_one_forward_pass_and_the_report_rebuilds_its_network(place: str) -> None:
    x = _x()
    options = {"seed": 0, "forward_variance": place, "probe_steps": 0}
    report = condition(SPEC, data=x, options=options)
    budget = report.tuning.budget
    assert budget["counted_forward_variance"] == pytest.approx(FORWARD_COST)
    off = condition(SPEC, data=x, options=options | {"forward_variance": "off"}).tuning.budget
    assert "counted_forward_variance" not in off
    rebuilt = build_model(SPEC, scales=dict(report.scales), seed=0, draw="orthogonal")
    variances = list(_variances(rebuilt, x).values())
    if place == "final":  # the last word: LSUV's target on the hidden layers, output_std on the head
        assert all(v == pytest.approx(1.0, rel=1e-3) for v in variances[:-1])
        assert variances[-1] == pytest.approx(0.25, rel=1e-3)
    else:  # AutoInit's start: a different start from the default's, which AutoInit then tunes on
        default = condition(SPEC, data=x, options=options | {"forward_variance": "off"}).scales
        assert any(abs(report.scales[k] - default.get(k, 1.0)) > 1e-3 for k in report.scales)
        assert any(abs(v - 1.0) > 1e-2 for v in variances)

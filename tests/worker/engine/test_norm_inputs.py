"""LSUV's unit-variance target on the scale-invariant weights (``worker.engine.norm_inputs``)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from nas import build_model
from nas.build import apply_scales_
from worker.engine import condition
from worker.engine.autoinit import autoinit, conditioning_mode
from worker.engine.norm_inputs import unit_variance_scales

# a tiny ``normal`` std before each BatchNorm (invariant), and a plain head (not invariant)
SPEC: dict[str, Any] = {
    "input_shape": [16],
    "init": {"scheme": "normal", "std": 0.003},
    "blocks": [
        {"layers": [{"type": "linear", "out": 32}, {"type": "batchnorm"}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 32}, {"type": "batchnorm"}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 10}]},
    ],
}


def _x() -> torch.Tensor:
    return torch.randn(64, 16, generator=torch.Generator().manual_seed(0))


def _unit(spec: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict[str, float], list[torch.Tensor]]:
    model, x = build_model(spec, seed=0), _x()
    scales = unit_variance_scales(model, x, autoinit(model, x, steps=0))
    with conditioning_mode(model), torch.no_grad():
        before = model(x)
        apply_scales_(model, scales)
        after = model(x)
        hidden = [
            cast(nn.Sequential, model.blocks[0])[0](x),
            cast(nn.Sequential, model.blocks[1])[0](model.blocks[0](x)),
        ]
    return before, after, scales, hidden


def test_the_weights_feeding_a_norm_get_unit_output_variance_on_the_data() -> None:
    _, _, scales, hidden = _unit(SPEC)
    assert set(scales) == {"blocks.0.0.weight", "blocks.0.0.bias", "blocks.1.0.weight", "blocks.1.0.bias"}
    # LSUV's target on the data, within LSUV's own tolerance (0.1): one pass measures every layer, and
    # the second one saw the first's output still damped by the norm's eps (the tiny spec std)
    assert abs(float(hidden[0].double().var()) - 1.0) < 1e-6
    assert abs(float(hidden[1].double().var()) - 1.0) < 0.1
    assert all(factor > 10 for factor in scales.values())  # the tiny spec std was far from it


def test_the_function_is_unchanged_where_the_norms_eps_does_not_matter() -> None:
    """Scale-invariant up to the norm's eps: at a moderate spec std the output is the same; at the
    tiny one the eps (1e-5) was damping the normalized output, which the rescaling undoes."""
    moderate = SPEC | {"init": {"scheme": "normal", "std": 0.2}}
    before, after, _, _ = _unit(moderate)
    assert torch.allclose(before, after, atol=1e-4)
    before, after, _, _ = _unit(SPEC)
    assert not torch.allclose(before, after, atol=1e-4)


def test_the_option_changes_only_the_scale_invariant_multipliers() -> None:
    options = {"probe_steps": 0, "budget_steps": None, "balance": False}
    spec = condition(SPEC, data=_x(), options=options)
    unit = condition(SPEC, data=_x(), options=options | {"norm_inputs": "unit_variance"})
    changed = {k for k in unit.scales if abs(unit.scales[k] - spec.scales.get(k, 1.0)) > 1e-9}
    assert changed == {"blocks.0.0.weight", "blocks.0.0.bias", "blocks.1.0.weight", "blocks.1.0.bias"}

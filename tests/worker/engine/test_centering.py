"""Zero-mean outputs in one pass (``worker.engine.centering``) and the report's bias shifts."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from nas import build_model
from nas.build import apply_bias_shifts_
from nas.examples import EXAMPLE_VIT
from worker.engine import condition
from worker.engine._moments import forward_hooks
from worker.engine.autoinit import conditioning_mode
from worker.engine.budget import FORWARD_COST
from worker.engine.centering import centering_shifts

# ReLU after ReLU on positive inputs: every layer's output carries a per-channel offset, and the
# middle conv has no bias (it stays as it is); a residual block reuses its input
CNN: dict[str, Any] = {
    "input_shape": [2, 8, 8],
    "blocks": [
        {"layers": [{"type": "conv2d", "out": 8, "kernel": 3}, {"type": "relu"}]},
        {"layers": [{"type": "conv2d", "out": 8, "kernel": 3, "bias": False}, {"type": "relu"}]},
        {"layers": [{"type": "residual", "body": [{"type": "conv2d", "out": 8, "kernel": 3}, {"type": "relu"}]}]},
        {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 5}]},
    ],
}


def _x(shape: list[int]) -> torch.Tensor:
    return torch.rand(48, *shape, generator=torch.Generator().manual_seed(0)) + 0.5


def _channel_means(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each linear or conv layer's output mean per channel (a conv's dimension 1, a linear
    layer's last) on ``x``, keyed by the layer's name."""
    seen: dict[str, torch.Tensor] = {}

    def record(name: str, channel: int):  # noqa: ANN202
        def hook(_module: nn.Module, _args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            dim = channel % out.dim()
            seen.setdefault(name, out.mean(dim=[d for d in range(out.dim()) if d != dim]))

        return hook

    hooks = [
        (module, record(name, 1 if isinstance(module, nn.Conv2d) else -1))
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | nn.Conv2d)
    ]
    with forward_hooks(hooks), conditioning_mode(model), torch.no_grad():
        model(x)
    return seen


def test_the_shifts_put_every_biased_layers_output_at_zero_mean_per_channel_in_one_pass() -> None:
    model, x = build_model(CNN, seed=0), _x([2, 8, 8])
    before = _channel_means(model, x)
    assert all(float(before[n].abs().max()) > 1e-2 for n in ("blocks.0.0", "blocks.2.0.body.0", "blocks.3.1"))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    shifts = centering_shifts(model, x)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())  # measured, not applied
    assert set(shifts) == {"blocks.0.0.bias", "blocks.2.0.body.0.bias", "blocks.3.1.bias"}  # no bias: no shift
    apply_bias_shifts_(model, shifts)
    after = _channel_means(model, x)
    for name in ("blocks.0.0", "blocks.2.0.body.0", "blocks.3.1"):  # later layers saw the corrected inputs
        assert float(after[name].abs().max()) < 1e-5, name
    assert float(after["blocks.1.0"].abs().max()) > 1e-2  # the conv without a bias keeps its offset


def test_a_linear_layer_on_tokens_is_centered_per_feature_not_per_token() -> None:
    """Tokens ``[N, T, D]`` keep their features last: dimension 1 is the token, not the channel."""
    model, x = build_model(EXAMPLE_VIT, seed=0), _x(list(EXAMPLE_VIT["input_shape"]))
    apply_bias_shifts_(model, centering_shifts(model, x))
    token_layers = {
        name: mean
        for name, mean in _channel_means(model, x).items()
        if isinstance(model.get_submodule(name), nn.Linear) and model.get_submodule(name).bias is not None
    }
    assert token_layers
    for name, mean in token_layers.items():
        assert mean.numel() == model.get_submodule(name).out_features, name
        assert float(mean.abs().max()) < 1e-4, name


def test_the_report_rebuilds_the_centered_network_and_counts_its_pass() -> None:
    x, y = _x([2, 8, 8]), torch.arange(48) % 5
    options = {"seed": 0, "probe_steps": 0}
    report = condition(CNN, data={"x": x, "y": y}, options=options)
    assert report.bias_shifts and report.tuning.budget["counted_center_outputs"] == pytest.approx(FORWARD_COST)
    rebuilt = _channel_means(report.build_model(CNN), x)
    assert all(float(rebuilt[n].abs().max()) < 1e-5 for n in ("blocks.0.0", "blocks.2.0.body.0", "blocks.3.1"))
    off = condition(CNN, data={"x": x, "y": y}, options=options | {"center_outputs": False})
    assert off.bias_shifts == {} and "counted_center_outputs" not in off.tuning.budget
    assert off.scales == report.scales  # the centering runs after every scale and changes none


def test_bias_shifts_that_do_not_fit_the_model_are_refused_with_the_name() -> None:
    model = build_model(CNN, seed=0)
    with pytest.raises(KeyError, match=r"blocks\.1\.0\.bias"):
        apply_bias_shifts_(model, {"blocks.1.0.bias": [0.0] * 8})  # that conv has no bias
    with pytest.raises(ValueError, match=r"has 3 values for 8 channels"):
        apply_bias_shifts_(model, {"blocks.0.0.bias": [0.0] * 3})
    with pytest.raises(ValueError, match="finite"):
        apply_bias_shifts_(model, {"blocks.0.0.bias": [float("nan")] * 8})


def test_a_vector_that_is_not_a_bias_is_not_shifted() -> None:
    """A norm's weight is a vector of the bias's length: shifting it would rescale the layer."""
    layers = [{"type": "linear", "out": 8}, {"type": "layernorm"}, {"type": "relu"}, {"type": "linear", "out": 3}]
    model = build_model({"input_shape": [4], "blocks": [{"layers": layers}]}, seed=0)
    weights = [n for n, t in model.named_parameters() if t.dim() == 1 and not n.endswith("bias")]
    assert weights == ["blocks.0.1.weight"]  # the LayerNorm's
    before = {n: t.clone() for n, t in model.named_parameters()}
    for name in weights:
        with pytest.raises(KeyError, match="not a bias of this model"):
            apply_bias_shifts_(model, {name: [1.0] * dict(model.named_parameters())[name].numel()})
    assert all(torch.equal(before[n], t) for n, t in model.named_parameters())

"""AutoInit tuning: the papers' claims that belong to it, and the pitfalls of issue 3."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from nas import build_model
from nas.build import apply_scales_
from worker.engine.autoinit import Loss, autoinit, conditioning_mode
from worker.engine.jacobian import block_jacobians


def relu_mlp(sigma_w: float, width: int = 128, hidden: int = 10, d_in: int = 64) -> dict[str, Any]:
    """AutoInit Fig. 1 network: ``hidden`` ReLU layers, W ~ N(0, sigma_w^2 / fan_in), b = 0."""
    gain = sigma_w / math.sqrt(2)  # fan_in scheme: variance 2 gain^2 / fan_in
    blocks = [{"layers": [{"type": "linear", "out": width}, {"type": "relu"}]} for _ in range(hidden)]
    blocks.append({"layers": [{"type": "linear", "out": 10}]})
    return {"input_shape": [d_in], "init": {"scheme": "fan_in", "gain": gain}, "blocks": blocks}


def batch(shape: list[int], n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn((n, *shape), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("loss", ["log", "square"])
@pytest.mark.parametrize("sigma_w", [0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
def test_relu_mlp_is_critical_after_one_step_of_the_one_step_rate(sigma_w: float, loss: Loss) -> None:
    """AutoInit Fig. 1 (left) with eq. 19 (log loss) and eq. 43 (square loss): a ReLU MLP with
    10 hidden layers (width 128 here, 500 in the paper), sigma_w from 0.5 to 3, tuned for one
    step: every J^{l,l+1} lies in [0.8, 1.25]. The hidden multipliers match the closed form
    a = 1 / sqrt(J(0)) = sqrt(2) / sigma_w (eq. 20) within 10 %."""
    spec = relu_mlp(sigma_w)
    model = build_model(spec, seed=1)
    x = batch(spec["input_shape"], 64)
    result = autoinit(model, x, loss=loss, steps=1, generator=torch.Generator().manual_seed(2))
    assert result.steps <= 1
    apjn = result.after.apjn
    assert torch.all((apjn >= 0.8) & (apjn <= 1.25)), apjn
    for layer in range(1, 10):
        assert result.scales[f"blocks.{layer}.0.weight"] == pytest.approx(math.sqrt(2) / sigma_w, rel=0.1)


def test_tuned_scales_rebuild_the_critical_network() -> None:
    """The returned scales are what nas.build_model takes: rebuilt with them, the model
    measures critical (every J within [0.8, 1.25]) without the tuner."""
    spec = relu_mlp(2.5, hidden=4)
    x = batch(spec["input_shape"], 64)
    result = autoinit(build_model(spec, seed=0), x, steps=3, generator=torch.Generator().manual_seed(0))
    rebuilt = build_model(spec, scales=result.scales, seed=0)
    apjn = block_jacobians(rebuilt, x, 4, torch.Generator().manual_seed(9)).apjn
    assert torch.all((apjn >= 0.8) & (apjn <= 1.25)), apjn


def pre_bn_mlp(mu: int, depth: int = 12, width: int = 128) -> dict[str, Any]:
    """AutoInit eq. 21: h^{l+1} = W phi(BN(h^l)) + b + mu h^l."""
    body = [{"type": "batchnorm"}, {"type": "relu"}, {"type": "linear", "out": width}]
    layers = [{"type": "residual", "body": body}] if mu else body
    return {"input_shape": [width], "blocks": [{"layers": layers} for _ in range(depth)]}


def test_pre_bn_mlp_is_chaotic_without_residual_and_near_critical_with_it() -> None:
    """AutoInit Fig. 2 and eq. 38-39 (|B| = 128, width 128, 12 blocks; the paper: 500, 30):
    without residual connections every deep block (l >= 3) has J within 10 % of
    pi / (pi - 1) = 1.467 (chaotic, J > 1); with mu = 1, J = 1 + O(1/l): it decreases with
    depth and the last block is below 1.2."""
    x = batch([128], 128)
    profiles = {}
    for mu in (0, 1):
        model = build_model(pre_bn_mlp(mu), seed=0)
        with conditioning_mode(model):
            profiles[mu] = block_jacobians(model, x, 2, torch.Generator().manual_seed(1)).apjn
    chaotic = profiles[0][3:]
    torch.testing.assert_close(chaotic, torch.full_like(chaotic, math.pi / (math.pi - 1)), rtol=0.1, atol=0.0)
    residual = profiles[1]
    assert residual[-1] < 1.2 and residual[-1] < residual[2] < residual[0], residual


def gap_cnn(cut: int) -> dict[str, Any]:
    """One CNN with a global-average-pooling head, cut into blocks two ways."""
    conv0 = [{"type": "conv2d", "out": 16, "kernel": 3}, {"type": "relu"}]
    conv1 = [{"type": "conv2d", "out": 32, "kernel": 3}, {"type": "relu"}]
    head = [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]
    if cut == 0:
        blocks = [conv0, conv1, head]
    else:
        blocks = [conv0 + conv1[:1], conv1[1:] + head[:1], head[1:]]
    return {"input_shape": [3, 16, 16], "blocks": [{"layers": b} for b in blocks]}


def test_gap_head_cnn_keeps_output_scale_and_block_cuts_agree() -> None:
    """Issue 3 pitfall 1 and 3: with a global-average-pooling head, after tuning the output
    second moment is within a factor 2 of the target output_std^2 = 0.05^2 for both cuts, and
    the two cuts give equivalent initializations: the tuned networks compute the same
    function (max relative difference 1e-3) - ReLU is positively homogeneous, so only the
    product of the gains along the path matters."""
    x = batch([3, 16, 16], 32)
    outputs = []
    for cut in (0, 1):
        model = build_model(gap_cnn(cut), seed=0)
        result = autoinit(model, x, output_std=0.05, generator=torch.Generator().manual_seed(1))
        k_out = result.after.k[-1].item()
        assert 0.05**2 / 2 <= k_out <= 0.05**2 * 2, k_out
        apply_scales_(model, result.scales)
        with torch.no_grad():
            outputs.append(model(x))
    assert ((outputs[0] - outputs[1]).abs().max() / outputs[0].abs().max()).item() < 1e-3


def test_gap_block_is_normalised_by_what_the_pooling_does() -> None:
    """A [global_avgpool, linear] block has APJN 1/(H W) times the linear layer's at any sane
    init; its target is that reduction factor, so the linear layer is not multiplied by H W."""
    spec = gap_cnn(0)
    x = batch([3, 16, 16], 32)
    result = autoinit(build_model(spec, seed=0), x, output_std=None, generator=torch.Generator().manual_seed(1))
    assert result.units[-1].log_rho == pytest.approx(-math.log(16 * 16))
    assert result.after.apjn[-1].item() == pytest.approx(1 / 256, rel=0.25)
    assert 0.2 < result.scales["blocks.2.1.weight"] < 5


def bn_cnn() -> dict[str, Any]:
    block = [{"type": "conv2d", "out": 16, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]
    return {
        "input_shape": [3, 8, 8],
        "blocks": [{"layers": block}] * 3 + [{"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]}],
    }


def test_weights_feeding_batchnorm_are_held_at_one_and_seeds_agree() -> None:
    """Issue 3 pitfall 2: multipliers of weights that feed a BatchNorm change no Jacobian; they
    are held at exactly 1 (and listed as invariant) instead of drifting on noise, and the
    tuned multipliers of three seeds agree within a factor 1.3 (not e^6)."""
    tuned = []
    for seed in range(3):
        result = autoinit(
            build_model(bn_cnn(), seed=seed), batch([3, 8, 8], 32, seed), generator=torch.Generator().manual_seed(seed)
        )
        assert {"blocks.0.0", "blocks.1.0", "blocks.2.0"} <= set(result.invariant)
        assert all(result.scales[f"blocks.{b}.0.weight"] == 1.0 for b in range(3))
        tuned.append(torch.tensor([result.scales[f"blocks.{b}.1.weight"] for b in range(3)]))
    spread = torch.stack(tuned).log()
    assert (spread.max(0).values - spread.min(0).values).max().item() < math.log(1.3)


def test_a_residual_that_cannot_reach_criticality_ends_with_a_status() -> None:
    """AutoInit section 1.2: where no critical initialization exists, J is pushed as close to 1
    as possible. With alpha = 2 the block's J >= alpha^2 = 4; the tuner stops with status
    'unreachable' or 'max_steps', finite multipliers and J within 10 % of 4."""
    spec = {
        "input_shape": [32],
        "blocks": [
            {"layers": [{"type": "residual", "alpha": 2.0, "body": [{"type": "linear", "out": 32}, {"type": "relu"}]}]}
        ],
    }
    result = autoinit(build_model(spec, seed=0), batch([32], 32), steps=15, generator=torch.Generator().manual_seed(0))
    assert result.status in ("unreachable", "max_steps")
    assert not result.converged
    assert all(math.isfinite(v) for v in result.scales.values())
    assert result.after.apjn[0].item() == pytest.approx(4.0, rel=0.1)


def test_non_finite_input_gives_a_status_not_an_exception() -> None:
    """NaN policy: a batch with NaN ends with status 'non_finite' and multipliers of 1."""
    x = batch([64], 8)
    x[0, 0] = math.nan
    result = autoinit(build_model(relu_mlp(1.0, hidden=2), seed=0), x)
    assert result.status == "non_finite" and not result.converged
    assert set(result.scales.values()) == {1.0}


def test_overflowing_start_is_recovered_by_shrinking() -> None:
    """A 40-layer ReLU MLP with sigma_w = 60 overflows float32 at initialization; the tuner
    shrinks the gains until the forward pass is finite, then tunes to criticality."""
    spec = relu_mlp(60.0, width=32, hidden=40, d_in=32)
    x = batch([32], 32)
    model = build_model(spec, seed=0)
    with torch.no_grad():
        assert not torch.isfinite(model(x)).all()
    result = autoinit(model, x, steps=5, generator=torch.Generator().manual_seed(0))
    assert result.after.finite and result.status == "converged", result.message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"loss": "cubic"}, "loss"), ({"steps": -1}, "steps"), ({"output_std": 0.0}, "output_std")],
)
def test_arguments_are_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        autoinit(build_model(relu_mlp(1.0, hidden=1), seed=0), batch([64], 4), **kwargs)


def test_kernel_term_restrains_the_forward_growth_of_deep_silu_nets() -> None:
    """Issue 3 pitfall 4 (AutoInit eq. 24): on a 20-layer SiLU MLP, tuning J alone lets the
    forward second moment grow (max K^l / K^0 > 3 here, > 1000 at 30 layers of width 128); the
    Jacobian-kernel loss with lambda = 2 at least halves log(max K^l / K^0), with every hidden
    J still in [0.6, 1.25]."""
    spec = relu_mlp(math.sqrt(2), width=64, hidden=20, d_in=64)
    for block in spec["blocks"][:-1]:
        block["layers"][1]["type"] = "silu"
    x = batch([64], 32)
    growth, apjn = {}, {}
    loss: Loss
    for loss, lam in (("log", 0.0), ("kernel", 2.0)):
        result = autoinit(
            build_model(spec, seed=0),
            x,
            loss=loss,
            kernel_lambda=lam,
            steps=10,
            generator=torch.Generator().manual_seed(1),
        )
        k = result.after.k
        growth[loss] = (k.max() / k[0]).item()
        apjn[loss] = result.after.apjn[:-1]
    assert growth["log"] > 3, growth
    assert math.log(growth["kernel"]) < 0.5 * math.log(growth["log"]), growth
    assert torch.all((apjn["kernel"] >= 0.6) & (apjn["kernel"] <= 1.25)), apjn["kernel"]


def test_tuning_leaves_the_callers_batchnorm_statistics_as_they_were() -> None:
    """The tuner's first forward passes (the pooling ratios, the attention logits) ran before
    conditioning_mode, in the model's own training mode: they moved BatchNorm's running mean and
    variance and counted a batch, which the restore at the end then kept."""
    model = build_model(bn_cnn(), seed=0)
    before = {name: value.clone() for name, value in model.named_buffers()}
    autoinit(model, batch([3, 8, 8], 32), steps=2, generator=torch.Generator().manual_seed(1))
    assert model.training
    for name, value in model.named_buffers():
        assert torch.equal(value, before[name]), name


def test_dropout_is_off_for_the_pooling_ratio_of_the_kernel_target_as_for_the_tuning() -> None:
    """A block with dropout before its pooling: the kernel target's pooling ratio (eq. 24) was
    measured with dropout on (a training-mode model) while every Jacobian was measured with it
    off; dropout at p = 0.5 and at p = 0 must tune alike, since neither acts during tuning."""

    def spec(p: float) -> dict[str, Any]:
        block = [{"type": "conv2d", "out": 8, "kernel": 3}, {"type": "relu"}, {"type": "dropout", "p": p}]
        return {
            "input_shape": [3, 8, 8],
            "blocks": [
                {"layers": [*block, {"type": "avgpool", "kernel": 4}]},
                {"layers": [{"type": "flatten"}, {"type": "linear", "out": 10}]},
            ],
        }

    x = batch([3, 8, 8], 32)
    scales = [
        autoinit(build_model(spec(p), seed=0), x, loss="kernel", generator=torch.Generator().manual_seed(1)).scales
        for p in (0.5, 0.0)
    ]
    assert scales[0] == pytest.approx(scales[1], rel=1e-9)

"""APJN estimator (AutoInit eq. 7) against exact Jacobians from torch.autograd.functional."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.autograd.functional import jacobian

from nas import PreflightNet, build_model
from worker.engine.autoinit import conditioning_mode
from worker.engine.jacobian import block_jacobians, has_batch_coupling, run_blocks

MLP: dict[str, Any] = {
    "input_shape": [6],
    "blocks": [
        {"layers": [{"type": "linear", "out": 8}, {"type": "tanh"}]},
        {"layers": [{"type": "linear", "out": 5}, {"type": "relu"}, {"type": "linear", "out": 7}]},
        {"layers": [{"type": "residual", "body": [{"type": "linear", "out": 7}, {"type": "gelu"}]}]},
        {"layers": [{"type": "linear", "out": 3}]},
    ],
}
CNN: dict[str, Any] = {
    "input_shape": [2, 6, 6],
    "blocks": [
        {"layers": [{"type": "conv2d", "out": 3, "kernel": 3}, {"type": "relu"}, {"type": "avgpool", "kernel": 2}]},
        {"layers": [{"type": "conv2d", "out": 4, "kernel": 3, "stride": 2}, {"type": "silu"}]},
        {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 3}]},
    ],
}
BN_MLP: dict[str, Any] = {
    "input_shape": [5],
    "blocks": [
        {"layers": [{"type": "linear", "out": 6}, {"type": "batchnorm"}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 4}, {"type": "batchnorm"}, {"type": "relu"}]},
    ],
}


def exact_apjn(model: PreflightNet, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3 from full Jacobians: per sample (|B| = 1) without BatchNorm, over the whole
    batch (cross-sample derivatives included) with it. Returns (J per block, K per boundary)."""
    _, outputs = run_blocks(model, x, detach=False)
    boundaries = [x] + [o.detach() for o in outputs]
    coupled = has_batch_coupling(model)
    values = []
    for block, h_in, h_out in zip(model.blocks, boundaries[:-1], boundaries[1:], strict=True):
        n_out = h_out[0].numel()
        if coupled:
            full = jacobian(block, h_in)  # [B, *out, B, *in]
            values.append(full.double().pow(2).sum() / (x.shape[0] * n_out))
        else:
            per = [jacobian(lambda s, b=block: b(s.unsqueeze(0)).squeeze(0), h) for h in h_in]
            values.append(torch.stack([p.double().pow(2).sum() / n_out for p in per]).mean())
    k = torch.stack([b.double().pow(2).mean() for b in boundaries])
    return torch.stack(values), k


def _setup(spec: dict[str, Any], batch: int, seed: int = 0) -> tuple[PreflightNet, torch.Tensor]:
    model = build_model(spec, seed=seed).double()
    x = torch.randn((batch, *spec["input_shape"]), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return model, x


@pytest.mark.parametrize(("spec", "batch"), [(MLP, 4), (CNN, 3), (BN_MLP, 6)], ids=["mlp", "cnn", "batchnorm"])
def test_estimate_is_unbiased_against_the_exact_jacobian(spec: dict[str, Any], batch: int) -> None:
    """Claim (eq. 7): the Gaussian-vector estimate is unbiased for eq. 3. With 1500 vectors the
    mean must lie within 5 standard errors (and 10 %) of the exact value, for every block;
    K^l equals the exact second moment to float64 precision."""
    model, x = _setup(spec, batch)
    with conditioning_mode(model):
        exact_j, exact_k = exact_apjn(model, x)
        profile = block_jacobians(model, x, n_vectors=1500, generator=torch.Generator().manual_seed(1))
    se = profile.log_apjn_stderr * profile.apjn
    assert torch.all((profile.apjn - exact_j).abs() <= 5 * se), (profile.apjn, exact_j, se)
    torch.testing.assert_close(profile.apjn, exact_j, rtol=0.1, atol=0.0)
    torch.testing.assert_close(profile.k, exact_k, rtol=1e-12, atol=0.0)


def test_spread_shrinks_as_one_over_sqrt_of_the_number_of_vectors() -> None:
    """Claim: the estimator's standard deviation scales as 1/sqrt(N_v). Over 150 draws each,
    std(N_v = 1) / std(N_v = 16) must be 4 within 30 % (the sampling error of a std from 150
    draws is about 6 %)."""
    wide = {"input_shape": [32], "blocks": [{"layers": [{"type": "linear", "out": 64}, {"type": "relu"}]}] * 3}
    model, x = _setup(wide, 4)
    g = torch.Generator().manual_seed(3)
    with conditioning_mode(model):
        draws = {
            n: torch.stack([block_jacobians(model, x, n_vectors=n, generator=g).apjn for _ in range(150)])
            for n in (1, 16)
        }
    ratio = draws[1].std(dim=0) / draws[16].std(dim=0)
    assert torch.all((ratio > 4 / 1.3) & (ratio < 4 * 1.3)), ratio


def test_batched_backward_equals_one_backward_per_vector() -> None:
    """The vmapped VJP (is_grads_batched) and a loop over vectors give the same terms."""
    model, x = _setup(CNN, 3)
    profile = block_jacobians(model, x, n_vectors=3, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    _, outputs = run_blocks(model, x)
    vectors = [torch.randn((3, *o.shape), generator=g, dtype=o.dtype) for o in outputs]
    loop = []
    for m in range(3):
        inputs, outputs = run_blocks(model, x)
        grads = torch.autograd.grad(outputs, inputs, [v[m] for v in vectors])
        loop.append(
            torch.stack([gr.pow(2).flatten(1).sum(-1) / o[0].numel() for gr, o in zip(grads, outputs, strict=True)], -1)
        )
    torch.testing.assert_close(profile.terms, torch.stack(loop), rtol=1e-10, atol=1e-12)


def test_relu_mlp_apjn_is_sigma_w_squared_over_two() -> None:
    """AutoInit eq. 20: a ReLU MLP with W ~ N(0, sigma_w^2 / N_l) has J^{l,l+1} = sigma_w^2 / 2
    at large width, whatever the widths, when eq. 3 divides by the output size N_{l+1}; widths
    512 -> 256 -> 1024 -> 512 (dividing by N_l instead would give 2x, 1/4 x and 2x of it) and
    64 samples x 4 vectors: within 10 %."""
    sigma_w = 1.7
    blocks = [{"layers": [{"type": "relu"}, {"type": "linear", "out": width}]} for width in (256, 1024, 512)]
    spec = {"input_shape": [512], "init": {"scheme": "fan_in", "gain": sigma_w / math.sqrt(2)}, "blocks": blocks}
    model = build_model(spec, seed=0)
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    profile = block_jacobians(model, x, n_vectors=4, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(profile.apjn, torch.full((3,), sigma_w**2 / 2, dtype=torch.float64), rtol=0.1, atol=0.0)


def test_non_finite_forward_is_reported_not_raised() -> None:
    """NaN policy: a non-finite input gives a profile with ``finite`` False, no exception."""
    model, x = _setup(MLP, 3)
    x[0, 0] = math.inf
    profile = block_jacobians(model, x, n_vectors=2, generator=torch.Generator().manual_seed(0))
    assert not profile.finite


@pytest.mark.parametrize(("kwargs", "message"), [({"n_vectors": 0}, "n_vectors")])
def test_arguments_are_validated(kwargs: dict[str, Any], message: str) -> None:
    model, x = _setup(MLP, 2)
    with pytest.raises(ValueError, match=message):
        block_jacobians(model, x, **kwargs)


def test_twin_parameters_replace_the_model_tensors_without_touching_them() -> None:
    """functional_call twin: scaling the only weight by a scales J by a^2; the model is unchanged."""
    spec = {"input_shape": [16], "blocks": [{"layers": [{"type": "linear", "out": 16, "bias": False}]}]}
    model, x = _setup(spec, 4)
    w = model.get_parameter("blocks.0.0.weight")
    before = w.clone()
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    base = block_jacobians(model, x, 2, g1).apjn
    twin = block_jacobians(model, x, 2, g2, params={"blocks.0.0.weight": w * 3.0}).apjn
    torch.testing.assert_close(twin, 9.0 * base, rtol=1e-12, atol=0.0)
    assert torch.equal(w, before)

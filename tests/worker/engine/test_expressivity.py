"""The expressivity terms (``worker.engine.expressivity``): NASWOT's kernel (Mellor et al. 2021,
eq. 2) and MeCo's correlation floor (Jiang et al. 2023, eq. 7), and their place in the report."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from nas import build_model
from worker.engine import condition
from worker.engine.budget import FORWARD_COST
from worker.engine.expressivity import activation_kernel_log_det, correlation_floor, measure_expressivity

SPEC: dict[str, Any] = {
    "input_shape": [12],
    "blocks": [
        {"layers": [{"type": "linear", "out": 24}, {"type": "batchnorm"}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 16}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 5}]},
    ],
}


def _codes(n: int, units: int, seed: int) -> torch.Tensor:
    return torch.rand(n, units, generator=torch.Generator().manual_seed(seed)) > 0.5


def test_naswot_kernel_counts_the_units_on_which_two_samples_agree() -> None:
    codes = _codes(8, 40, 0)
    hamming = (codes[:, None, :] != codes[None, :, :]).sum(-1).double()
    expected = torch.linalg.slogdet(40 - hamming)
    assert expected.sign > 0
    assert math.isclose(activation_kernel_log_det(codes), float(expected.logabsdet), rel_tol=1e-12)


def test_two_samples_with_one_code_make_the_kernel_singular() -> None:
    codes = _codes(6, 30, 1)
    codes[3] = codes[0]
    assert activation_kernel_log_det(codes) == -math.inf


def test_codes_that_split_the_samples_further_have_the_larger_log_determinant() -> None:
    """More units cutting the samples apart: ``K_H`` moves towards a scaled identity."""
    coarse = torch.cat([_codes(8, 8, 2)] * 4, dim=1)  # 32 units, only 8 distinct patterns
    fine = _codes(8, 32, 3)
    assert activation_kernel_log_det(fine) > activation_kernel_log_det(coarse)


def test_the_correlation_floor_is_one_for_uncorrelated_channels_and_zero_for_a_repeated_one() -> None:
    rows = torch.linalg.qr(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)))[0].T
    rows = rows - rows.mean(dim=1, keepdim=True)
    rows = torch.linalg.qr(rows.T)[0].T  # zero-mean, mutually orthogonal channels
    feature = rows.reshape(1, 4, 8, 8)
    assert math.isclose(correlation_floor(feature, feature_map=True), 1.0, abs_tol=0.05)
    repeated = torch.cat([feature, feature[:, :1]], dim=1)
    assert correlation_floor(repeated, feature_map=True) < 1e-9


def test_a_feature_map_is_read_on_its_first_sample_and_a_vector_output_over_the_samples() -> None:
    g = torch.Generator().manual_seed(1)
    maps = torch.randn(3, 5, 6, 6, generator=g)
    other = maps.clone()
    other[1:] = torch.randn(2, 5, 6, 6, generator=g)
    assert correlation_floor(maps, feature_map=True) == correlation_floor(
        other, feature_map=True
    )  # the paper's one-sample form
    vectors = torch.randn(6, 20, generator=g)
    expected = float(torch.linalg.eigvalsh(torch.corrcoef(vectors.double()))[0])
    assert math.isclose(correlation_floor(vectors, feature_map=False), expected, rel_tol=1e-9)


def test_one_pass_measures_every_activation_and_weighted_layer_and_leaves_the_model_as_it_was() -> None:
    """Against the papers' formulas computed here by hand on the same outputs (batch statistics);
    8 samples, fewer than the hidden layers' widths, so their correlations are not rank-deficient."""
    model = build_model(SPEC, seed=0)
    x = torch.randn(8, 12, generator=torch.Generator().manual_seed(2))
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    outputs: list[torch.Tensor] = []
    pre_activations: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, o: outputs.append(o.detach()))
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]
    hooks += [
        m.register_forward_hook(lambda _m, i, _o: pre_activations.append(i[0].detach()))
        for m in model.modules()
        if isinstance(m, nn.ReLU)
    ]
    with torch.no_grad():
        model.train()(x)
    for hook in hooks:
        hook.remove()
    model.load_state_dict({**model.state_dict(), **buffers})
    model.eval()
    measured = measure_expressivity(model, x)
    assert measured.layers == 3 and measured.activation_units == 24 + 16
    assert not any(m.training for m in model.modules())
    assert all(torch.equal(v, buffers[k]) for k, v in model.named_buffers())
    floors = [max(float(torch.linalg.eigvalsh(torch.corrcoef(o.double()))[0]), 0.0) for o in outputs]
    assert min(floors[:2]) > 1e-3  # the hidden layers count; the 5-unit head is rank-deficient (0)
    assert measured.meco is not None and math.isclose(measured.meco, sum(floors), rel_tol=1e-9)
    codes = torch.cat([p > 0 for p in pre_activations], dim=1)
    hamming = (codes[:, None, :] != codes[None, :, :]).sum(-1).double()
    assert measured.naswot is not None
    assert math.isclose(measured.naswot, float(torch.linalg.slogdet(40 - hamming).logabsdet), rel_tol=1e-12)


def test_a_conv_layer_is_read_on_the_first_samples_channels_as_the_paper_does() -> None:
    conv = nn.Conv2d(3, 6, 3, padding=1)
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = conv(x)
    expected = float(torch.linalg.eigvalsh(torch.corrcoef(out[0].reshape(6, -1).double()))[0])
    assert expected > 1e-3
    measured = measure_expressivity(nn.Sequential(conv, nn.ReLU()), x)
    assert measured.meco is not None and math.isclose(measured.meco, expected, rel_tol=1e-9)


def test_a_linear_layer_no_wider_than_the_batch_adds_nothing_to_meco() -> None:
    """The documented limit of the vector form: N samples correlated over D <= N units have rank
    below N, so the floor is 0 (docs/conditioning.md, section 10)."""
    narrow = torch.randn(64, 10, generator=torch.Generator().manual_seed(6))
    assert correlation_floor(narrow, feature_map=False) == 0.0
    assert correlation_floor(narrow[:8], feature_map=False) > 0.0


def test_a_network_that_maps_every_sample_to_one_code_has_no_finite_naswot() -> None:
    model = build_model(SPEC, seed=0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.zero_()
    x = torch.randn(16, 12, generator=torch.Generator().manual_seed(3))
    assert measure_expressivity(model, x).naswot == -math.inf


def test_the_option_puts_the_drawn_networks_expressivity_in_the_report_and_counts_its_pass() -> None:
    x = torch.randn(32, 12, generator=torch.Generator().manual_seed(4))
    off = condition(SPEC, data=x)
    assert off.expressivity is None and "counted_expressivity" not in off.tuning.budget
    report = condition(SPEC, data=x, options={"expressivity": True})
    drawn = build_model(SPEC, seed=0, draw=report.environment.draw)
    measured = measure_expressivity(drawn, x)
    assert report.expressivity is not None
    assert report.expressivity.naswot == measured.naswot and report.expressivity.meco == measured.meco
    assert report.tuning.budget["counted_expressivity"] == FORWARD_COST
    assert "expressivity" not in report.components

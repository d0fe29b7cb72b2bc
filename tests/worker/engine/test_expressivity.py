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
    model = build_model(SPEC, seed=0)
    x = torch.randn(32, 12, generator=torch.Generator().manual_seed(2))
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    model.eval()
    measured = measure_expressivity(model, x)
    assert measured.layers == 3 and measured.activation_units == 24 + 16
    assert not any(m.training for m in model.modules())
    assert all(torch.equal(v, buffers[k]) for k, v in model.named_buffers())
    assert measured.meco is not None and 0.0 <= measured.meco <= 3.0
    assert measured.naswot is not None and math.isfinite(measured.naswot)


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

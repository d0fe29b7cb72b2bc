"""The engine on format 1.1: AutoInit tunes pre-LN transformers and NAS-Bench-201 cells to
criticality, the attention temperature and its compensation are exact, zero edges and parallel
edges get the gains their routes call for, and the diagnostics measure linear layers on sequences
as convolutions over positions."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest
import torch
from torch import nn

import nas
from nas.build import Residual
from nas.space import nasbench201_spec, vit_spec
from worker.engine import condition
from worker.engine._moments import per_sample_weight_grad_sq
from worker.engine.attention import LOGIT_VARIANCE, attention_temperatures, logit_variances
from worker.engine.autoinit import autoinit
from worker.engine.structure import analyse

TOLERANCE = math.log(1.25)  # J within [0.8, 1.25] of its target


def _ratios(result: Any) -> list[float]:
    """|log J_b - log rho_b| per block after tuning."""
    rho = {b: unit.log_rho for unit in result.units for b in unit.blocks if len(unit.blocks) == 1}
    log_j = result.after.log_apjn.tolist()
    return [abs(log_j[b] - rho.get(b, 0.0)) for b in range(len(log_j))]


@pytest.mark.parametrize("gain", [0.5, 3.0])
def test_a_12_block_pre_ln_transformer_is_tuned_to_criticality_at_every_block(gain: float, one_thread: None) -> None:
    spec = vit_spec(depth=12, width=32, heads=4, patch=7, init={"scheme": "fan_in", "gain": gain})
    model = nas.build_model(spec, seed=0)
    x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    result = autoinit(model, x, loss="log", steps=30, generator=torch.Generator().manual_seed(0))
    assert result.status == "converged", result.message
    before = [abs(v) for v in result.before.log_apjn.tolist()[:2]]
    assert max(before) > TOLERANCE  # the start is off: the embedding (gain^2) or the first block
    off = {b: round(r, 3) for b, r in enumerate(_ratios(result)) if r > TOLERANCE}
    assert not off, f"blocks off their target after tuning (|log J / rho|): {off}"


def test_an_all_conv_nasbench201_network_is_tuned_to_criticality_at_every_cell(one_thread: None) -> None:
    # every node sums BatchNorm-normalized edges, so a cell's output has 2-3x its input's second
    # moment and its APJN starts at 2 to 6; the cells' BN gains are what AutoInit can move
    spec = nasbench201_spec(["nor_conv_3x3"] * 6, channels=8, cells_per_stage=2, input_shape=(3, 16, 16))
    model = nas.build_model(spec, seed=0)
    x = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    result = autoinit(model, x, loss="log", steps=30, generator=torch.Generator().manual_seed(0))
    cells = [b for b, block in enumerate(model.spec.blocks) if block.layers[0].type == "cell"]
    assert max(result.before.apjn[b].item() for b in cells) > 1.8
    assert all(unit.stream == 2.0 and unit.stream_floor == 0.0 for unit in result.units if unit.blocks[0] in cells)
    off = {b: round(_ratios(result)[b], 3) for b in cells if _ratios(result)[b] > TOLERANCE}
    assert not off, f"cells off criticality after tuning: {off}"


def test_the_attention_temperature_puts_the_logits_at_unit_second_moment(one_thread: None) -> None:
    model = nas.build_model(vit_spec(depth=1, width=32, heads=4, init={"scheme": "fan_in", "gain": 3.0}), seed=0)
    x = torch.randn(16, 1, 28, 28)
    before = logit_variances(model, x)
    assert min(before.values()) > 100  # gain 3 on q and k: logits 9x too large in scale
    scales = attention_temperatures(model, x)
    assert set(scales) == {f"blocks.1.0.body.1.{p}.{t}" for p in "qk" for t in ("weight", "bias")}
    nas.build.apply_scales_(model, scales)
    for variance in logit_variances(model, x).values():
        assert variance == pytest.approx(LOGIT_VARIANCE, rel=1e-5)  # bilinear in W_q, W_k: exact (float32)


def test_the_query_key_compensation_holds_the_logits_while_the_branch_gain_moves(one_thread: None) -> None:
    model = nas.build_model(vit_spec(depth=1, width=32, heads=4), seed=0)
    (unit,) = [u for u in analyse(model) if 1 in u.blocks]
    fractions = {g.module: g.fraction for g in unit.gains}
    layernorm, q = "blocks.1.0.body.0", "blocks.1.0.body.1.q"
    assert fractions[q] == pytest.approx(-fractions[layernorm])
    x = torch.randn(8, 1, 28, 28)
    reference = logit_variances(model, x)
    branch = cast(Residual, cast(nn.Sequential, model.blocks[1])[0]).body
    out_before = branch(torch.randn(2, 49, 32, generator=torch.Generator().manual_seed(0)))
    u = 1.5
    nas.build.apply_scales_(model, {t: math.exp(g.fraction * u) for g in unit.gains for t in g.tensors})
    for name, variance in logit_variances(model, x).items():
        assert variance == pytest.approx(reference[name], rel=1e-6)
    out_after = branch(torch.randn(2, 49, 32, generator=torch.Generator().manual_seed(0)))
    # the attention branch's output moves by the LN, value and output shares of u
    share = fractions[layernorm] + fractions["blocks.1.0.body.1.v"] + fractions["blocks.1.0.body.1.o"]
    assert (out_after.norm() / out_before.norm()).item() == pytest.approx(math.exp(share * u), rel=1e-5)


def _cell_model(edges: list[dict[str, Any]], nodes: int = 4) -> nas.PreflightNet:
    spec = {
        "format": "1.1",
        "input_shape": [4, 6, 6],
        "blocks": [{"layers": [{"type": "cell", "nodes": nodes, "edges": edges}]}],
    }
    return nas.build_model(spec, seed=0)


def _conv_bn() -> list[dict[str, Any]]:
    return [{"type": "relu"}, {"type": "conv2d", "out": 4, "kernel": 3, "bias": False}, {"type": "batchnorm"}]


def test_zero_edges_and_what_only_they_feed_hold_their_gains(one_thread: None) -> None:
    model = _cell_model(
        [
            {"from": 0, "to": 1, "op": [{"type": "zero"}]},
            {"from": 1, "to": 2, "op": _conv_bn()},  # out of a node only a zero edge feeds: no signal
            {"from": 0, "to": 2, "op": _conv_bn()},
            {"from": 2, "to": 3, "op": _conv_bn()},
        ]
    )
    (unit,) = analyse(model)
    held = {g.module for g in unit.gains if g.invariant}
    assert "blocks.0.0.edges.e1_2.2" in held and "blocks.0.0.edges.e1_2.1" in held
    moving = {g.module: g.fraction for g in unit.gains if g.fraction}
    assert moving == {"blocks.0.0.edges.e0_2.2": 0.5, "blocks.0.0.edges.e2_3.2": 0.5}


def test_parallel_edges_share_the_log_gain_by_route_potential(one_thread: None) -> None:
    # routes 0->1->2 (two BN gains) and 0->2 (one): the short edge carries both units of the log-gain,
    # so every route from input to output scales alike and J follows exp(2u) exactly
    model = _cell_model(
        [
            {"from": 0, "to": 1, "op": _conv_bn()},
            {"from": 1, "to": 2, "op": _conv_bn()},
            {"from": 0, "to": 2, "op": _conv_bn()},
        ],
        nodes=3,
    )
    (unit,) = analyse(model)
    fractions = {g.module: g.fraction for g in unit.gains if g.fraction}
    assert fractions == {
        "blocks.0.0.edges.e0_1.2": 0.5,
        "blocks.0.0.edges.e1_2.2": 0.5,
        "blocks.0.0.edges.e0_2.2": 1.0,
    }
    assert unit.exact and unit.depth == 2


def test_a_skip_edge_beside_a_conv_route_makes_the_cell_inexact(one_thread: None) -> None:
    model = _cell_model([{"from": 0, "to": 1, "op": _conv_bn()}, {"from": 0, "to": 1, "op": []}], nodes=2)
    (unit,) = analyse(model)
    assert not unit.exact and unit.stream == 0.0  # an identity route: not scale-free


def test_per_sample_weight_gradients_of_a_linear_on_a_sequence_sum_over_its_tokens() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(5, 3)
    x, dy = torch.randn(4, 7, 5, dtype=torch.float64), torch.randn(4, 7, 3, dtype=torch.float64)
    per_sample = [dy[b].T @ x[b] for b in range(4)]  # d(sum_t <dy_t, W x_t>) / dW for sample b
    expected = torch.stack(per_sample).pow(2).mean().item()
    assert per_sample_weight_grad_sq(linear, x, dy) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("spec", "models"),
    [
        (vit_spec(depth=2, width=32, heads=4, patch=7), {"homogeneous", "residual_stream"}),
        (
            nasbench201_spec(["nor_conv_3x3"] * 6, channels=4, cells_per_stage=1, input_shape=(3, 8, 8)),
            {"scale_free_cell"},
        ),
    ],
)
def test_the_report_says_which_model_of_j_each_unit_was_tuned_with(
    spec: dict[str, Any], models: set[str], one_thread: None
) -> None:
    report = condition(spec, None, {"seed": 0, "diagnostics": False, "probe_steps": 2})
    seen = {unit.model for unit in report.tuning.units}
    assert models <= seen, seen
    for unit in report.tuning.units:
        assert unit.one_step_rate == (unit.model == "homogeneous")
        assert (unit.elasticity is None) == (unit.model == "untunable")
    if "residual_stream" in models:
        assert set(report.tuning.attention_logits_after) == {"blocks.1.0.body.1", "blocks.2.0.body.1"}
        first = report.tuning.attention_logits_after["blocks.1.0.body.1"]
        assert first == pytest.approx(LOGIT_VARIANCE, rel=0.05)
    assert all(layer.gamma is None for layer in report.layers)  # diagnostics off: no numbers made up

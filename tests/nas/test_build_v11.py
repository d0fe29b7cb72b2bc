"""The builder on format 1.1: attention and pre-LN transformer blocks agree with PyTorch's own
modules, zero edges cut a cell's paths, parameter counts match hand derivations, and a cell's
parameter names and weights do not depend on the order its edges are listed in."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch
from torch import nn

from nas.build import Cell, PreflightNet, SelfAttention, build_model
from nas.space import nasbench201_cell, nasbench201_spec, transformer_block, vit_spec


def _block(model: PreflightNet, index: int) -> Any:
    """``model.blocks[index]``, an ``nn.Sequential``; untyped, as the tests reach into the attributes
    of each layer's own class."""
    return model.blocks[index]


def _sequence_spec(layers: list[dict[str, Any]], width: int = 16, tokens_side: int = 3) -> dict[str, Any]:
    """[width, side, side] image -> patch 1 embedding -> [side^2, width] tokens -> layers."""
    embed = {"type": "patch_embed", "patch": 1, "out": width}
    return {
        "format": "1.1",
        "input_shape": [width, tokens_side, tokens_side],
        "blocks": [{"layers": [embed]}, {"layers": layers}],
    }


def _copy_attention(ours: SelfAttention, reference: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.k.weight, ours.v.weight]))
        reference.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.k.bias, ours.v.bias]))
        reference.out_proj.weight.copy_(ours.o.weight)
        reference.out_proj.bias.copy_(ours.o.bias)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_torch_multihead_attention(causal: bool) -> None:
    model = build_model(_sequence_spec([{"type": "attention", "heads": 4, "causal": causal}]), seed=0)
    ours = _block(model, 1)[0]
    assert isinstance(ours, SelfAttention)
    reference = nn.MultiheadAttention(16, 4, batch_first=True)
    _copy_attention(ours, reference)
    with torch.no_grad():  # random biases, so a dropped bias would show
        for projection in (ours.q, ours.k, ours.v, ours.o):
            projection.bias.normal_()
        _copy_attention(ours, reference)
    x = torch.randn(5, 9, 16)
    mask = torch.ones(9, 9, dtype=torch.bool).triu(1) if causal else None
    expected, _ = reference(x, x, x, attn_mask=mask, need_weights=False)
    torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=1e-5)


def test_pre_ln_transformer_block_matches_torch_transformer_encoder_layer() -> None:
    model = build_model(_sequence_spec(transformer_block(16, heads=2, mlp_ratio=4.0)), seed=1)
    attention_branch, mlp_branch = _block(model, 1)
    reference = nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )
    with torch.no_grad():
        norm1, attention = attention_branch.body
        norm2, linear1, _, linear2 = mlp_branch.body
        for projection in (attention.q, attention.k, attention.v, attention.o, linear1, linear2):
            projection.bias.normal_()
        for norm in (norm1, norm2):
            norm.weight.normal_(1.0, 0.1)
            norm.bias.normal_(0.0, 0.1)
        _copy_attention(attention, reference.self_attn)
        for mine, theirs in (
            (norm1, reference.norm1),
            (norm2, reference.norm2),
            (linear1, reference.linear1),
            (linear2, reference.linear2),
        ):
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
    reference.eval()
    x = torch.randn(3, 9, 16)
    torch.testing.assert_close(model.blocks[1](x), reference(x), atol=1e-5, rtol=1e-5)


def test_a_nasbench201_cell_whose_paths_to_the_output_are_all_zero_ignores_its_input() -> None:
    # node 1 = none(x); node 2 = none(x) + conv(node 1); output = none(x) + skip(node 1) + conv(node 2)
    blocked = ["none", "none", "nor_conv_3x3", "none", "skip_connect", "nor_conv_3x3"]
    model = build_model(nasbench201_spec(blocked, channels=8, cells_per_stage=1), seed=0).eval()
    first, second = torch.randn(4, 3, 32, 32), 10 * torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(first), model(second))
    live = ["nor_conv_3x3", "none", "nor_conv_3x3", "none", "skip_connect", "nor_conv_3x3"]
    model = build_model(nasbench201_spec(live, channels=8, cells_per_stage=1), seed=0).eval()
    with torch.no_grad():
        assert not torch.allclose(model(first), model(second))


def _parameters(spec: dict[str, Any]) -> int:
    return sum(p.numel() for p in build_model(spec, seed=0).parameters())


def test_parameter_counts_of_reference_cells_match_hand_derivations() -> None:
    def one_cell(ops: list[str], channels: int = 16) -> int:
        spec = {
            "format": "1.1",
            "input_shape": [channels, 8, 8],
            "blocks": [{"layers": [nasbench201_cell(ops, channels)]}],
        }
        return _parameters(spec)

    # ReLU-conv(k, no bias)-BN on C channels: C*C*k^2 weights and 2C BatchNorm affine
    assert one_cell(["nor_conv_3x3"] * 6) == 6 * (16 * 16 * 9 + 2 * 16) == 14_016
    assert one_cell(["nor_conv_1x1"] * 6) == 6 * (16 * 16 + 2 * 16) == 1_728
    assert one_cell(["avg_pool_3x3", "skip_connect", "none"] * 2) == 0


def test_parameter_count_of_the_nasbench201_skeleton_matches_a_hand_derivation() -> None:
    c = 16
    cell = lambda w: 6 * (w * w * 9 + 2 * w)  # noqa: E731  every edge a 3x3 ReLU-conv-BN
    reduction = lambda a, b: a * b * 9 + 2 * b + b * b * 9 + 2 * b + a * b  # noqa: E731  two convs + 1x1 shortcut
    expected = (
        3 * c * 9
        + 2 * c  # stem conv and BN
        + 5 * cell(c)
        + reduction(c, 2 * c)
        + 5 * cell(2 * c)
        + reduction(2 * c, 4 * c)
        + 5 * cell(4 * c)
        + 2 * 4 * c
        + 4 * c * 10
        + 10  # head BN and linear
    )
    assert expected == 1_531_546  # NAS-Bench-201's largest CIFAR-10 network, 1.53 M parameters
    assert _parameters(nasbench201_spec(["nor_conv_3x3"] * 6)) == expected


def test_parameter_count_of_vit_tiny_matches_a_hand_derivation() -> None:
    d, depth, tokens, classes = 192, 12, (224 // 16) ** 2, 1000
    per_block = 2 * (2 * d) + 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)  # two LNs, attention, MLP
    expected = (3 * 16 * 16 * d + d) + tokens * d + depth * per_block + 2 * d + (d * classes + classes)
    assert expected == 5_717_032  # timm's vit_tiny_patch16_224 is 5,717,416: + a class token and its position
    spec = vit_spec(
        depth=depth, width=d, heads=3, mlp_ratio=4.0, patch=16, input_shape=(3, 224, 224), n_classes=classes
    )
    from nas.shapes import trace_shapes
    from nas.spec import ArchitectureSpec

    assert trace_shapes(ArchitectureSpec.model_validate(spec)).parameters == expected


def test_a_cells_names_and_weights_do_not_depend_on_the_edge_listing() -> None:
    spec = nasbench201_spec(
        ["nor_conv_3x3", "nor_conv_1x1", "avg_pool_3x3", "skip_connect", "nor_conv_3x3", "none"],
        channels=4,
        cells_per_stage=1,
    )
    shuffled = nasbench201_spec(
        ["nor_conv_3x3", "nor_conv_1x1", "avg_pool_3x3", "skip_connect", "nor_conv_3x3", "none"],
        channels=4,
        cells_per_stage=1,
    )
    for block in shuffled["blocks"]:
        for layer in block["layers"]:
            if layer["type"] == "cell":
                random.Random(3).shuffle(layer["edges"])
    a, b = build_model(spec, seed=7), build_model(shuffled, seed=7)
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in b.named_parameters()]
    for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        torch.testing.assert_close(p, q)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(a(x), b(x))


def test_parallel_edges_sum_and_concat_stacks_nodes() -> None:
    edges = [{"from": 0, "to": 1}, {"from": 0, "to": 1}, {"from": 1, "to": 2, "op": [{"type": "scale", "factor": 3.0}]}]
    spec: dict[str, Any] = {
        "format": "1.1",
        "input_shape": [2, 4, 4],
        "blocks": [{"layers": [{"type": "cell", "nodes": 3, "edges": edges}]}],
    }
    x = torch.randn(3, 2, 4, 4)
    torch.testing.assert_close(build_model(spec)(x), 6 * x)
    spec["blocks"][0]["layers"][0]["output"] = "concat"
    model = build_model(spec)
    assert isinstance(_block(model, 0)[0], Cell)
    torch.testing.assert_close(model(x), torch.cat([2 * x, 6 * x], dim=1))


def test_average_pool_padding_averages_only_real_inputs() -> None:
    pool = {"type": "avgpool", "kernel": 3, "stride": 1, "padding": 1}
    spec = {"format": "1.1", "input_shape": [1, 5, 5], "blocks": [{"layers": [pool]}]}
    out = build_model(spec)(torch.full((1, 1, 5, 5), 2.0))
    torch.testing.assert_close(out, torch.full((1, 1, 5, 5), 2.0))  # padded zeros would lower the border


def test_patch_embedding_is_a_strided_conv_with_row_major_tokens() -> None:
    spec = {
        "format": "1.1",
        "input_shape": [3, 8, 8],
        "blocks": [{"layers": [{"type": "patch_embed", "patch": 4, "out": 5}]}],
    }
    model = build_model(spec, seed=0)
    conv = _block(model, 0)[0].proj
    x = torch.randn(2, 3, 8, 8)
    tokens = model(x)
    assert tokens.shape == (2, 4, 5)
    expected = nn.functional.conv2d(x, conv.weight, conv.bias, stride=4)  # [2, 5, 2, 2]
    torch.testing.assert_close(tokens[:, 1], expected[:, :, 0, 1])  # token 1 = row 0, column 1


def test_attention_projections_follow_the_init_scheme() -> None:
    width = 256
    spec = _sequence_spec([{"type": "attention", "heads": 4, "init": {"scheme": "fan_in", "gain": 0.5}}], width=width)
    attention = _block(build_model(spec, seed=0), 1)[0]
    for projection in (attention.q, attention.k, attention.v, attention.o):
        variance = projection.weight.var().item()
        assert variance == pytest.approx(0.25 * 2 / width, rel=0.05)
        assert torch.count_nonzero(projection.bias) == 0
    pos = _block(build_model(vit_spec(depth=1, width=64, heads=2), seed=0), 0)[1].embedding
    assert pos.std().item() == pytest.approx(0.02, rel=0.1)
    assert math.isfinite(pos.sum().item())

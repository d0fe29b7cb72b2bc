"""Model builder: shapes agree with the spec's inferred shapes, weights have the variances
of the spec's init table, seeds make builds reproducible, and scales multiply weights."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from nas import PreflightNet, build_model, summarize
from nas.build import init_variance
from nas.examples import EXAMPLE_CNN, EXAMPLE_MLP
from nas.spec import Init


def _block(model: PreflightNet, index: int) -> Any:
    """``model.blocks[index]``, an ``nn.Sequential``; untyped, as the tests reach into the attributes
    of each layer's own class."""
    return model.blocks[index]


SCHEMES: list[dict[str, Any]] = [
    {"scheme": "fan_in"},
    {"scheme": "fan_out"},
    {"scheme": "arithmetic"},
    {"scheme": "geometric"},
    {"scheme": "torch_default"},
    {"scheme": "normal", "std": 0.05},
    {"scheme": "fan_in", "gain": 2.5},
    {"scheme": "geometric", "gain": 0.5},
]

EXPECTED_VARIANCE = {  # spec-format.md's table, written out independently of the builder
    "fan_in": lambda i, o: 2 / i,
    "fan_out": lambda i, o: 2 / o,
    "arithmetic": lambda i, o: 2 / ((i + o) / 2),
    "geometric": lambda i, o: 2 / math.sqrt(i * o),
    "torch_default": lambda i, o: 1 / (3 * i),
    "normal": lambda i, o: 0.05**2,
}


# The sample variance of n iid weights has relative standard error sqrt(2 / n) for a
# Gaussian (smaller for a uniform); we allow 5 standard errors.
def _tolerance(n: int) -> float:
    return 5 * math.sqrt(2 / n)


@pytest.mark.parametrize("init", SCHEMES, ids=lambda i: f"{i['scheme']}-gain{i.get('gain', 1)}")
@pytest.mark.parametrize(
    ("input_shape", "layer", "fans"),
    [
        ([384], {"type": "linear", "out": 640}, (384, 640)),
        ([48, 6, 6], {"type": "conv2d", "out": 96, "kernel": 3}, (48 * 9, 96 * 9)),
        ([32, 6, 6], {"type": "conv2d", "out": 64, "kernel": 5, "groups": 2}, (16 * 25, 64 * 25)),
    ],
    ids=["linear", "conv2d", "grouped-conv2d"],
)
def test_weight_variance_matches_the_init_table(
    init: dict[str, Any], input_shape: list[int], layer: dict[str, Any], fans: tuple[int, int]
) -> None:
    """Measured weight variance equals the table's variance times gain^2 within 5 standard
    errors of the sample variance; biases are zero except under torch_default."""
    spec = {"input_shape": input_shape, "blocks": [{"layers": [{**layer, "init": init}]}]}
    module = _block(build_model(spec, seed=0), 0)[0]
    weight = module.weight.detach().double()
    expected = EXPECTED_VARIANCE[init["scheme"]](*fans) * init.get("gain", 1.0) ** 2
    measured = weight.var().item()
    assert abs(measured / expected - 1) < _tolerance(weight.numel()), (measured, expected)
    assert abs(weight.mean().item()) < 5 * math.sqrt(expected / weight.numel())
    if init["scheme"] == "torch_default":
        assert module.bias.abs().max() > 0
    else:
        assert torch.count_nonzero(module.bias) == 0


def test_init_variance_function_follows_the_table() -> None:
    for scheme, formula in EXPECTED_VARIANCE.items():
        init = Init(scheme=scheme, gain=1.5, std=0.05 if scheme == "normal" else None)
        assert init_variance(init, 30, 70) == pytest.approx(formula(30, 70) * 1.5**2)


def test_layer_init_overrides_the_spec_default() -> None:
    spec = {
        "input_shape": [500],
        "init": {"scheme": "normal", "std": 1.0},
        "blocks": [
            {"layers": [{"type": "linear", "out": 500}, {"type": "linear", "out": 500, "init": {"scheme": "fan_in"}}]}
        ],
    }
    model = build_model(spec, seed=0)
    assert _block(model, 0)[0].weight.std().item() == pytest.approx(1.0, rel=0.02)
    assert _block(model, 0)[1].weight.std().item() == pytest.approx(math.sqrt(2 / 500), rel=0.02)


ALL_LAYERS_SPEC: dict[str, Any] = {
    "input_shape": [4, 9, 9],
    "blocks": [
        {
            "layers": [
                {"type": "conv2d", "out": 8, "kernel": 3, "stride": 2, "groups": 2, "bias": False},
                {"type": "batchnorm"},
                {"type": "relu"},
                {"type": "groupnorm", "groups": 4},
                {"type": "conv2d", "out": 8, "kernel": 2},
                {"type": "gelu"},
            ]
        },
        {
            "layers": [
                {
                    "type": "residual",
                    "alpha": 0.5,
                    "beta": 0.25,
                    "body": [{"type": "conv2d", "out": 6, "kernel": 3}, {"type": "silu"}],
                    "shortcut": [{"type": "conv2d", "out": 6, "kernel": 1}],
                },
                {"type": "maxpool", "kernel": 2},
                {"type": "avgpool", "kernel": 2, "stride": 1},
                {"type": "layernorm"},
            ]
        },
        {
            "layers": [
                {"type": "conv2d", "out": 5, "kernel": 1, "padding": 0},
                {"type": "global_avgpool"},
                {"type": "tanh"},
                {"type": "dropout", "p": 0.1},
                {"type": "flatten"},
                {"type": "linear", "out": 6},
                {"type": "batchnorm"},
                {"type": "sigmoid"},
                {"type": "leaky_relu", "slope": 0.2},
                {"type": "scale", "factor": 2.0},
                {"type": "identity"},
                {"type": "linear", "out": 3, "bias": False},
            ]
        },
    ],
}


def test_every_layer_builds_with_the_inferred_shapes() -> None:
    model = build_model(ALL_LAYERS_SPEC, seed=0).eval()
    seen: dict[str, tuple[int, ...]] = {}
    hooks = [
        model.get_submodule(info.module).register_forward_hook(
            lambda mod, inp, out, name=info.module: seen.__setitem__(name, tuple(out.shape[1:]))
        )
        for info in model.trace.layers
    ]
    out, boundaries = model(torch.randn(2, 4, 9, 9), return_boundaries=True)
    for hook in hooks:
        hook.remove()
    assert {info.module: info.out_shape for info in model.trace.layers} == seen
    assert [tuple(b.shape[1:]) for b in boundaries] == list(model.trace.boundaries)
    assert out.shape == (2, 3)


def test_residual_computes_alpha_shortcut_plus_beta_body() -> None:
    model = build_model(ALL_LAYERS_SPEC, seed=0).eval()
    residual = _block(model, 1)[0]
    x = torch.randn(2, 8, 4, 4)
    expected = 0.5 * residual.shortcut(x) + 0.25 * residual.body(x)
    torch.testing.assert_close(residual(x), expected)


def test_batchnorm_dimension_follows_the_input_rank() -> None:
    model = build_model(ALL_LAYERS_SPEC, seed=0)
    assert isinstance(_block(model, 0)[1], nn.BatchNorm2d)
    assert isinstance(_block(model, 2)[6], nn.BatchNorm1d)
    assert _block(model, 0)[1].weight.eq(1).all() and _block(model, 0)[1].bias.eq(0).all()


def test_same_seed_builds_identical_weights_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = build_model(EXAMPLE_CNN, seed=7), build_model(EXAMPLE_CNN, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    c = build_model(EXAMPLE_CNN, seed=8)
    assert not torch.equal(_block(a, 0)[0].weight, _block(c, 0)[0].weight)


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, 2**64], ids=["negative", "float", "text", "bool", "too-large"])
def test_a_seed_torch_would_misread_is_refused(seed: object) -> None:
    """torch takes -1 as 2**64 - 1 (another network, silently); the others failed deep inside it."""
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        build_model(EXAMPLE_MLP, seed=seed)  # type: ignore[arg-type]


def test_numpy_integer_seeds_build_the_same_network_as_python_ints() -> None:
    import numpy as np

    a, b = build_model(EXAMPLE_MLP, seed=np.int64(5)), build_model(EXAMPLE_MLP, seed=5)  # type: ignore[arg-type]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_scales_multiply_the_named_initial_values() -> None:
    scales = {"blocks.0.0.weight": 0.5, "blocks.1.0.body.0.weight": 3.0, "blocks.1.0.body.0.bias": 2.0}
    plain, scaled = build_model(EXAMPLE_MLP, seed=1), build_model(EXAMPLE_MLP, scales=scales, seed=1)
    params = dict(scaled.named_parameters())
    for name, p in plain.named_parameters():
        torch.testing.assert_close(params[name], p * scales.get(name, 1.0))


def test_scales_reach_the_factor_of_a_scale_layer() -> None:
    spec = {"input_shape": [3], "blocks": [{"layers": [{"type": "scale", "factor": 2.0}]}]}
    model = build_model(spec, scales={"blocks.0.0.factor": 1.5})
    torch.testing.assert_close(model(torch.ones(1, 3)), torch.full((1, 3), 3.0))


@pytest.mark.parametrize(
    ("scales", "error"),
    [({"blocks.9.0.weight": 2.0}, KeyError), ({"blocks.0.0.weight": float("nan")}, ValueError)],
    ids=["unknown name", "non-finite"],
)
def test_bad_scales_are_rejected(scales: dict[str, float], error: type[Exception]) -> None:
    with pytest.raises(error):
        build_model(EXAMPLE_MLP, scales=scales)


def test_summary_counts_parameters_fans_and_macs() -> None:
    summary = summarize(EXAMPLE_CNN)
    model = build_model(EXAMPLE_CNN)
    assert summary.parameters == sum(p.numel() for p in model.parameters())
    assert summary.output_shape == [10]
    convs = [layer for layer in summary.layers if layer.type == "conv2d"]
    assert [(c.fan_in, c.fan_out) for c in convs] == [(1 * 9, 16 * 9), (16 * 9, 32 * 9)]
    # conv1 16x8x8 outputs x 9 MACs, conv2 32x4x4 outputs x 144 MACs, linear 32x10
    assert summary.macs == 16 * 64 * 9 + 32 * 16 * 144 + 32 * 10
    assert "cnn-small" in summary.to_text()


def test_the_summary_table_shows_a_names_control_characters_escaped() -> None:
    """`preflight describe` printed a name's escape sequences raw: a spec could retitle the
    terminal, clear it, or forge a line of the table."""
    summary = summarize({**EXAMPLE_CNN, "name": "cnn\x1b]0;pwned\x07\x1b[2J\nfake line\u00e9"})
    first = summary.to_text().splitlines()[0]
    assert first.startswith("cnn\\x1b]0;pwned\\x07\\x1b[2J\\nfake line\u00e9: ")
    assert not any(not c.isprintable() for c in first)
    assert summary.name == "cnn\x1b]0;pwned\x07\x1b[2J\nfake line\u00e9"  # the JSON keeps the name as given


def test_weighted_layers_lists_linear_and_conv_in_forward_order() -> None:
    model = build_model(ALL_LAYERS_SPEC)
    names = [info.module for info, _ in model.weighted_layers()]
    assert names == [
        "blocks.0.0",
        "blocks.0.4",
        "blocks.1.0.body.0",
        "blocks.1.0.shortcut.0",
        "blocks.2.0",
        "blocks.2.5",
        "blocks.2.11",
    ]


@pytest.mark.parametrize("spec", [EXAMPLE_MLP, EXAMPLE_CNN], ids=["mlp", "cnn"])
def test_the_orthogonal_draw_flattens_each_spectrum_and_keeps_the_gaussian_draws_norm(spec: dict[str, Any]) -> None:
    gaussian = build_model(spec, seed=3)
    orthogonal = build_model(spec, seed=3, draw="orthogonal")
    pairs = zip(gaussian.weighted_layers(), orthogonal.weighted_layers(), strict=True)
    for (_, g), (_, o) in pairs:
        flat = o.weight.detach().reshape(o.weight.shape[0], -1).double()
        singular = torch.linalg.svdvals(flat)
        assert singular.max() / singular.min() == pytest.approx(1.0, abs=1e-5)  # orthogonal up to a scale
        assert o.weight.norm().item() == pytest.approx(g.weight.norm().item(), rel=1e-5)  # the scheme's scale
        # the orthogonal polar factor of the Gaussian draw: the nearest orthogonal direction to it
        g_flat = g.weight.detach().reshape(g.weight.shape[0], -1).double()
        u, _, vh = torch.linalg.svd(g_flat, full_matrices=False)
        assert torch.allclose(flat / flat.norm(), (u @ vh) / (u @ vh).norm(), atol=1e-6)
    again = build_model(spec, seed=3, draw="orthogonal")
    for a, b in zip(orthogonal.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)  # the same seed, the same draw


def test_an_unknown_draw_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="draw must be one of"):
        build_model(EXAMPLE_MLP, seed=0, draw="uniform")  # type: ignore[arg-type]


def test_a_report_rebuilds_the_network_its_scales_were_tuned_on() -> None:
    from worker.engine import condition

    report = condition(EXAMPLE_MLP, options={"draw": "orthogonal", "probe_steps": 1, "budget_steps": None})
    assert report.environment.draw == "orthogonal"
    assert report.bias_shifts  # the centering's, added after the scales
    rebuilt = report.build_model(EXAMPLE_MLP)
    env = report.environment
    by_hand = build_model(
        EXAMPLE_MLP, scales=report.scales, seed=env.seed, draw="orthogonal", bias_shifts=report.bias_shifts
    )
    gaussian = build_model(EXAMPLE_MLP, scales=report.scales, seed=env.seed, bias_shifts=report.bias_shifts)
    unshifted = build_model(EXAMPLE_MLP, scales=report.scales, seed=env.seed, draw="orthogonal")
    x = torch.randn(8, *EXAMPLE_MLP["input_shape"], generator=torch.Generator().manual_seed(0))
    assert torch.equal(rebuilt(x), by_hand(x))
    assert not torch.allclose(rebuilt(x), gaussian(x))  # the draw matters: a report without it builds another net
    assert not torch.allclose(rebuilt(x), unshifted(x))  # and so do the shifts

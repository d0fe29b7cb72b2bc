"""Property tests over random valid specs: they validate, build and run with the inferred
shapes, and their canonical hash ignores key order, explicit defaults and names."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nas import build_model, parse_spec, spec_hash
from nas.canonical import applied_output_std, key_options
from nas.options import HEAD_STD, HEAD_STD_NORMALIZED

ACTIVATIONS = ["relu", "gelu", "silu", "tanh", "sigmoid", "identity", "leaky_relu"]
INITS = [{"scheme": s} for s in ("fan_in", "fan_out", "arithmetic", "geometric", "torch_default")] + [
    {"scheme": "normal", "std": 0.1}
]


@st.composite
def _vector_layers(draw: st.DrawFn, width: int, count: int) -> tuple[list[dict[str, Any]], int]:
    layers: list[dict[str, Any]] = []
    for _ in range(count):
        kind = draw(st.sampled_from(["linear", "act", "norm", "residual", "dropout", "scale"]))
        if kind == "linear":
            width = draw(st.integers(1, 12))
            layer: dict[str, Any] = {"type": "linear", "out": width, "bias": draw(st.booleans())}
            if draw(st.booleans()):
                layer["init"] = draw(st.sampled_from(INITS))
        elif kind == "act":
            layer = {"type": draw(st.sampled_from(ACTIVATIONS))}
        elif kind == "norm":  # a layernorm over one value is refused (its output is constant)
            layer = {"type": draw(st.sampled_from(["batchnorm", "layernorm"] if width > 1 else ["batchnorm"]))}
        elif kind == "dropout":
            layer = {"type": "dropout", "p": draw(st.floats(0, 0.9))}
        elif kind == "scale":
            layer = {"type": "scale", "factor": draw(st.floats(-3, 3))}
        else:
            body, _ = draw(_vector_layers(width, draw(st.integers(0, 2))))
            layer = {
                "type": "residual",
                "body": body + [{"type": "linear", "out": width}],
                "alpha": draw(st.floats(0, 2)),
                "beta": draw(st.floats(0, 2)),
            }
        layers.append(layer)
    return layers, width


@st.composite
def _image_layers(
    draw: st.DrawFn, shape: tuple[int, int, int], count: int
) -> tuple[list[dict[str, Any]], tuple[int, int, int]]:
    c, h, w = shape
    layers: list[dict[str, Any]] = []
    for _ in range(count):
        kind = draw(st.sampled_from(["conv", "act", "norm", "pool", "residual"]))
        if kind == "conv":
            groups = draw(st.sampled_from([g for g in (1, 2) if c % g == 0]))
            out = groups * draw(st.integers(1, 4))
            kernel = draw(st.integers(1, min(h, w, 4)))
            stride = draw(st.integers(1, 2))
            layer: dict[str, Any] = {"type": "conv2d", "out": out, "kernel": kernel, "stride": stride, "groups": groups}
            if stride > 1:
                pad = (kernel - 1) // 2
                h, w = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
            c = out
        elif kind == "act":
            layer = {"type": draw(st.sampled_from(ACTIVATIONS))}
        elif kind == "norm":  # over one value a layernorm or groupnorm is refused (its output is constant)
            over_one = c * h * w == 1
            layer = draw(
                st.sampled_from(
                    [{"type": "batchnorm"}]
                    + ([] if over_one else [{"type": "layernorm"}, {"type": "groupnorm", "groups": 1}])
                )
            )
        elif kind == "pool":
            kernel = draw(st.integers(1, min(h, w)))
            stride = draw(st.integers(1, kernel))
            layer = {"type": draw(st.sampled_from(["maxpool", "avgpool"])), "kernel": kernel, "stride": stride}
            h, w = (h - kernel) // stride + 1, (w - kernel) // stride + 1
        else:
            layer = {
                "type": "residual",
                "body": [{"type": "conv2d", "out": c, "kernel": 3}, {"type": "relu"}],
                "beta": draw(st.floats(0, 1)),
            }
        layers.append(layer)
    return layers, (c, h, w)


def _split_into_blocks(draw: st.DrawFn, layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(layers) - 1)), max_size=4))))
    edges = [0, *[c for c in cuts if c < len(layers)], len(layers)]
    return [{"layers": layers[a:b]} for a, b in zip(edges, edges[1:], strict=False) if b > a]


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        width = draw(st.integers(1, 10))
        layers, _ = draw(_vector_layers(width, draw(st.integers(0, 6))))
        layers.append({"type": "linear", "out": draw(st.integers(1, 5))})
        spec: dict[str, Any] = {"input_shape": [width], "blocks": _split_into_blocks(draw, layers)}
    else:
        shape = (draw(st.integers(1, 4)), draw(st.integers(3, 9)), draw(st.integers(3, 9)))
        layers, _ = draw(_image_layers(shape, draw(st.integers(0, 5))))
        layers += [{"type": draw(st.sampled_from(["global_avgpool", "flatten"]))}, {"type": "linear", "out": 3}]
        spec = {"input_shape": list(shape), "blocks": _split_into_blocks(draw, layers)}
    if draw(st.booleans()):
        spec["init"] = draw(st.sampled_from(INITS))
    return spec


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _with_explicit_defaults(spec: dict[str, Any]) -> dict[str, Any]:
    """Write out the defaults a spec omitted, and push the spec-wide init onto each layer."""
    spec = copy.deepcopy(spec)
    default_init = spec.pop("init", {"scheme": "fan_in"})
    defaults: dict[str, dict[str, Any]] = {
        "linear": {"bias": True},
        "conv2d": {"stride": 1, "padding": "same", "groups": 1, "bias": True},
        "leaky_relu": {"slope": 0.01},
        "residual": {"shortcut": [], "alpha": 1.0, "beta": 1.0},
    }

    def fill(layer: dict[str, Any]) -> None:
        for key, value in defaults.get(layer["type"], {}).items():
            layer.setdefault(key, value)
        if layer["type"] in ("linear", "conv2d"):
            layer.setdefault("init", dict(default_init))
            layer["init"].setdefault("gain", 1.0)
        if layer["type"] in ("maxpool", "avgpool"):
            layer.setdefault("stride", layer["kernel"])
        for child in layer.get("body", []) + layer.get("shortcut", []):
            fill(child)

    for block in spec["blocks"]:
        block["name"] = "renamed"
        for layer in block["layers"]:
            fill(layer)
    spec["name"] = "a label"
    return spec


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_specs(), st.randoms(use_true_random=False))
def test_random_valid_specs_validate_build_run_and_hash_stably(spec: dict[str, Any], rng: random.Random) -> None:
    parsed = parse_spec(spec)
    model = build_model(parsed, seed=0).eval()
    with torch.no_grad():
        out, boundaries = model(torch.randn(2, *parsed.input_shape), return_boundaries=True)
    assert [tuple(b.shape[1:]) for b in boundaries] == list(model.trace.boundaries)
    assert out.shape[1:] == model.trace.boundaries[-1]

    digest = spec_hash(parsed)
    assert spec_hash(parse_spec(_shuffled(spec, rng))) == digest
    assert spec_hash(parse_spec(json.dumps(_with_explicit_defaults(spec), indent=3))) == digest


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_specs())
def test_auto_head_std_reads_batchnorm_in_the_spec_wherever_the_built_network_has_it(spec: dict[str, Any]) -> None:
    """The engine and the job's key resolve ``output_std`` "auto" from the spec
    (``applied_output_std``); the rule is about the network's BatchNorm layers, so the spec's
    reading must find one exactly where the built network holds one, or the head would get the
    other number."""
    parsed = parse_spec(spec)
    batchnorm = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in build_model(parsed, seed=0).modules())
    expected = HEAD_STD_NORMALIZED if batchnorm else HEAD_STD
    assert applied_output_std(parsed, "auto") == expected
    assert key_options(parsed, {"output_std": "auto", "steps": 3}) == {"output_std": expected, "steps": 3}


_CONV = {"type": "conv2d", "out": 2, "kernel": 3, "padding": "same"}
_BN, _LN = {"type": "batchnorm"}, {"type": "layernorm"}


def _cell(op: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "cell", "nodes": 3, "edges": [{"from": 0, "to": 1, "op": [_CONV, *op]}, {"from": 1, "to": 2}]}


def _residual(body: list[dict[str, Any]], shortcut: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "residual", "body": [_CONV, *body], "shortcut": [_CONV, *shortcut]}


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        (_cell([]), 0.5),
        (_cell([_BN]), 1.0),
        (_residual([], []), 0.5),
        (_residual([_BN], []), 1.0),
        (_residual([], [_BN]), 1.0),
        (_residual([_LN], [_LN]), 0.5),
    ],
    ids=["cell", "bn-in-cell-edge", "residual", "bn-in-body", "bn-in-shortcut", "layernorm"],
)
def test_the_cache_key_finds_batchnorm_at_any_depth_and_leaves_numbers_alone(
    layer: dict[str, Any], expected: float
) -> None:
    spec = {"format": "1.1", "input_shape": [2, 5, 5], "blocks": [{"layers": [layer, {"type": "flatten"}]}]}
    parsed = parse_spec(spec)
    assert applied_output_std(parsed, "auto") == expected
    assert key_options(parsed, {"output_std": "auto"}) == {"output_std": expected}
    assert key_options(parsed, {"output_std": 0.7}) == {"output_std": 0.7}
    assert key_options(parsed, {"output_std": None}) == {"output_std": None}


def test_a_change_of_meaning_changes_the_hash() -> None:
    base = {"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 4}, {"type": "relu"}]}]}
    variants = [
        {"input_shape": [9], "blocks": base["blocks"]},
        {"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 5}, {"type": "relu"}]}]},
        {"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 4, "bias": False}, {"type": "relu"}]}]},
        {"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 4}, {"type": "gelu"}]}]},
        {**base, "init": {"scheme": "geometric"}},
        {**base, "init": {"gain": 1.01}},
        {"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 4}]}, {"layers": [{"type": "relu"}]}]},
    ]
    hashes = {spec_hash(parse_spec(v)) for v in [base, *variants]}
    assert len(hashes) == len(variants) + 1


def test_same_padding_and_its_integer_equal_hash_the_same() -> None:
    def conv(padding: Any) -> dict[str, Any]:
        return {
            "input_shape": [2, 6, 6],
            "blocks": [
                {"layers": [{"type": "conv2d", "out": 2, "kernel": 3, "padding": padding}, {"type": "flatten"}]}
            ],
        }

    assert spec_hash(parse_spec(conv("same"))) == spec_hash(parse_spec(conv(1)))
    assert spec_hash(parse_spec(conv("same"))) != spec_hash(parse_spec(conv(0)))


@pytest.mark.parametrize(
    ("layer_type", "field"),
    [("scale", "factor"), ("dropout", "p"), ("leaky_relu", "slope")],
)
def test_minus_zero_hashes_and_keys_as_zero(layer_type: str, field: str) -> None:
    """-0.0 means what 0 means, but JSON wrote it "-0.0": another hash, another cache key, a
    second job for the same network and options."""
    from nas.canonical import cache_key

    def spec(value: float) -> dict[str, Any]:
        layers = [{"type": "linear", "out": 4}, {"type": layer_type, field: value}]
        return {"input_shape": [8], "blocks": [{"layers": layers}]}

    assert spec_hash(parse_spec(spec(-0.0))) == spec_hash(parse_spec(spec(0)))
    assert cache_key("h", {"kernel_lambda": -0.0, "thresholds": {"score": -0.0}}, "e") == cache_key(
        "h", {"kernel_lambda": 0.0, "thresholds": {"score": 0.0}}, "e"
    )
    assert cache_key("h", {"kernel_lambda": 1e-9}, "e") != cache_key("h", {"kernel_lambda": 0.0}, "e")

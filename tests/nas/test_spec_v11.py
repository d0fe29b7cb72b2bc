"""Spec format 1.1: cells and transformer layers are validated with JSON paths, v1 keeps its
meaning and hash, a cell's hash ignores the order its edges are listed in, and every change of
meaning changes the hash."""

from __future__ import annotations

import copy
import itertools
import random
from typing import Any, cast

import pytest

from nas.canonical import spec_hash
from nas.examples import EXAMPLES
from nas.schema import spec_json_schema
from nas.shapes import trace_shapes
from nas.space import nasbench201_spec, vit_spec
from nas.spec import ArchitectureSpec, SpecError
from nas.validate import SpecLimits, parse_spec

# Hashes of the v1 examples computed by the v1 code (commit 200ede8), before format 1.1 existed.
V1_HASHES = {
    "mlp": "d45932cf0c9f0b569b1643dc0153f96a43421fdbe46c0abe70f61249f70435d7",
    "cnn": "17a25dca782c4368472bd66f28db7544df1c8d0c796633d23ffa5ffa6f9f5b48",
    "resnet": "4b5030c1b1823ed0ad94e8971f880b7bb59d863fe6b14446c5212985acbe8f4e",
}
V1_POOLS: dict[str, Any] = {
    "input_shape": [3, 8, 8],
    "blocks": [
        {
            "layers": [
                {"type": "conv2d", "out": 4, "kernel": 3},
                {"type": "layernorm"},
                {"type": "maxpool", "kernel": 2},
                {"type": "avgpool", "kernel": 2, "stride": 1},
                {"type": "flatten"},
                {"type": "linear", "out": 3},
            ]
        }
    ],
}
V1_POOLS_HASH = "4fe1b858cd1e5f0eb96e46d1d68400b3d60cecfecca81b9d4c6204978e4f7542"


def _cell_spec(edges: list[dict[str, Any]], nodes: int = 4, output: str = "last") -> dict[str, Any]:
    cell = {"type": "cell", "nodes": nodes, "edges": edges, "output": output}
    return {"format": "1.1", "input_shape": [4, 8, 8], "blocks": [{"layers": [cell]}]}


def _conv(k: int = 3, out: int = 4) -> list[dict[str, Any]]:
    return [{"type": "relu"}, {"type": "conv2d", "out": out, "kernel": k, "bias": False}, {"type": "batchnorm"}]


EDGES = [
    {"from": 0, "to": 1, "op": _conv(3)},
    {"from": 0, "to": 2, "op": []},
    {"from": 1, "to": 2, "op": [{"type": "zero"}]},
    {"from": 0, "to": 3, "op": [{"type": "avgpool", "kernel": 3, "stride": 1, "padding": 1}]},
    {"from": 1, "to": 3, "op": _conv(1)},
    {"from": 2, "to": 3, "op": _conv(3)},
]


@pytest.mark.parametrize("name", sorted(V1_HASHES))
def test_v1_specs_keep_their_hash(name: str) -> None:
    assert spec_hash(parse_spec(EXAMPLES[name])) == V1_HASHES[name]


def test_v1_pools_and_layernorm_keep_their_hash_and_a_declared_11_without_new_features_too() -> None:
    assert spec_hash(parse_spec(V1_POOLS)) == V1_POOLS_HASH
    explicit = copy.deepcopy(V1_POOLS)
    explicit["format"] = "1.1"
    explicit["blocks"][0]["layers"][1]["over"] = "all"
    explicit["blocks"][0]["layers"][2]["padding"] = 0
    assert spec_hash(parse_spec(explicit)) == V1_POOLS_HASH


@pytest.mark.parametrize(
    ("layer", "feature"),
    [
        ({"type": "zero"}, "layer type 'zero'"),
        ({"type": "cell", "nodes": 2, "edges": [{"from": 0, "to": 1}]}, "layer type 'cell'"),
        ({"type": "layernorm", "over": "last"}, 'layernorm "over"'),
        ({"type": "avgpool", "kernel": 3, "stride": 1, "padding": 1}, 'avgpool "padding"'),
        ({"type": "patch_embed", "patch": 2, "out": 8}, "layer type 'patch_embed'"),
    ],
)
def test_a_10_spec_using_a_11_feature_is_refused_naming_the_version(layer: dict[str, Any], feature: str) -> None:
    spec = {"input_shape": [4, 8, 8], "blocks": [{"layers": [{"type": "relu"}, layer]}]}
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    (issue,) = caught.value.issues
    assert issue.path == f"blocks[0].layers[1] ({layer['type']})"
    assert feature in issue.message and "format 1.1" in issue.message and '"format": "1.1"' in issue.message
    parse_spec({**spec, "format": "1.1"})  # the same layer is fine in 1.1


def test_a_numeric_format_gets_a_hint() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"format": 1.1, **V1_POOLS})
    assert caught.value.issues[0].path == "format"
    assert '"1.1"' in caught.value.issues[0].message


@pytest.mark.parametrize(
    ("edges", "path", "reason"),
    [
        ([{"from": 0, "to": 1}, {"from": 1, "to": 3}], "blocks[0].layers[0] (cell).edges", "[2] have no incoming edge"),
        ([{"from": 0, "to": 1}, {"from": 1, "to": 1}], "blocks[0].layers[0] (cell).edges[1]", "1 -> 1 is a loop"),
        ([{"from": 0, "to": 1}, {"from": 0, "to": 5}], "blocks[0].layers[0] (cell).edges[1].to", "does not exist"),
        (
            [{"from": 0, "to": 1}, {"from": 0, "to": 1, "op": [{"type": "conv2d", "out": 8, "kernel": 1}]}],
            "blocks[0].layers[0] (cell).edges[1]",
            "the edges into a node must give the same shape",
        ),
        (
            [{"from": 0, "to": 1, "op": [{"type": "linear", "out": 3}]}],
            "blocks[0].layers[0] (cell).edges[0].op[0] (linear)",
            "a vector [D] or a sequence [T, D]",
        ),
        (
            [{"from": 0, "to": 1, "op": [{"type": "conv", "out": 3}]}],
            "blocks[0].layers[0] (cell).edges[0].op[0]",
            "unknown layer type 'conv'",
        ),
        ([{"from": 0, "to": 1, "extra": 1}], "blocks[0].layers[0] (cell).edges[0].extra", "unknown field"),
        # the attribute's name is no key of the format (the published schema refused it, the parser took it)
        ([{"source": 0, "to": 1}], "blocks[0].layers[0] (cell).edges[0].source", "unknown field"),
    ],
)
def test_malformed_cells_are_refused_with_the_json_path(edges: list[dict[str, Any]], path: str, reason: str) -> None:
    nodes = 4 if any(e.get("to") == 3 for e in edges) else 2
    with pytest.raises(SpecError) as caught:
        parse_spec(_cell_spec(edges, nodes=nodes))
    by_path = {issue.path: issue.message for issue in caught.value.issues}
    assert path in by_path, caught.value
    assert reason in by_path[path]


@pytest.mark.parametrize(
    ("layers", "path", "reason"),
    [
        ([{"type": "attention", "heads": 2}], "blocks[0].layers[0] (attention)", "expects a sequence [T, D]"),
        (
            [{"type": "patch_embed", "patch": 3, "out": 8}],
            "blocks[0].layers[0] (patch_embed)",
            "patch=3 must divide the 8x8 input",
        ),
        (
            [{"type": "patch_embed", "patch": 2, "out": 6}, {"type": "attention", "heads": 4}],
            "blocks[0].layers[1] (attention)",
            "heads=4 must divide the width D=6",
        ),
        ([{"type": "token_mean"}], "blocks[0].layers[0] (token_mean)", "expects a sequence"),
        ([{"type": "pos_embed"}], "blocks[0].layers[0] (pos_embed)", "expects a sequence"),
        (
            [{"type": "patch_embed", "patch": 2, "out": 8}, {"type": "conv2d", "out": 4, "kernel": 1}],
            "blocks[0].layers[1] (conv2d)",
            "expects an image input",
        ),
        ([{"type": "maxpool", "kernel": 3, "padding": 2}], "blocks[0].layers[0] (maxpool)", "at most half of kernel"),
    ],
)
def test_malformed_transformer_layers_are_refused_with_the_json_path(
    layers: list[dict[str, Any]], path: str, reason: str
) -> None:
    spec = {"format": "1.1", "input_shape": [4, 8, 8], "blocks": [{"layers": layers}]}
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    by_path = {issue.path: issue.message for issue in caught.value.issues}
    assert path in by_path, caught.value
    assert reason in by_path[path]


def test_shapes_flow_through_cells_and_sequences() -> None:
    trace = trace_shapes(parse_spec(_cell_spec(EDGES)))
    assert trace.boundaries == ((4, 8, 8), (4, 8, 8))
    concat = trace_shapes(parse_spec(_cell_spec(EDGES, output="concat")))
    assert concat.boundaries[-1] == (12, 8, 8)
    vit = trace_shapes(parse_spec(vit_spec(depth=2, width=32, heads=4, patch=4, input_shape=(1, 28, 28))))
    assert vit.boundaries == ((1, 28, 28), (49, 32), (49, 32), (49, 32), (10,))


def test_permuted_edge_listings_hash_equal() -> None:
    reference = spec_hash(parse_spec(_cell_spec(EDGES)))
    rng = random.Random(0)
    for _ in range(20):
        edges = EDGES[:]
        rng.shuffle(edges)
        assert spec_hash(parse_spec(_cell_spec(edges))) == reference
    for permutation in itertools.islice(itertools.permutations(EDGES), 0, 720, 37):
        assert spec_hash(parse_spec(_cell_spec(list(permutation)))) == reference


def _changed(change: str) -> dict[str, Any]:
    edges = copy.deepcopy(EDGES)
    spec = _cell_spec(edges)
    cell = spec["blocks"][0]["layers"][0]
    if change == "op on an edge":
        edges[1]["op"] = [{"type": "zero"}]
    elif change == "edge source":
        edges[4]["from"] = 0
    elif change == "edge dropped":
        del edges[1]
    elif change == "parallel edge added":
        edges.append({"from": 0, "to": 3, "op": []})
    elif change == "output":
        cell["output"] = "concat"
    elif change == "nodes":
        cell["nodes"] = 5
        edges.append({"from": 3, "to": 4, "op": []})
    elif change == "conv kernel":
        edges[5]["op"] = _conv(1)
    elif change == "init":
        spec["init"] = {"scheme": "fan_in", "gain": 2.0}
    return spec


CHANGES = [
    "op on an edge",
    "edge source",
    "edge dropped",
    "parallel edge added",
    "output",
    "nodes",
    "conv kernel",
    "init",
]


def test_every_change_of_a_cells_meaning_changes_its_hash() -> None:
    hashes = {"original": spec_hash(parse_spec(_cell_spec(EDGES)))}
    for change in CHANGES:
        hashes[change] = spec_hash(parse_spec(_changed(change)))
    assert len(set(hashes.values())) == len(hashes), hashes


VIT_CHANGES: list[tuple[str, Any]] = [
    ("heads", lambda s: s["blocks"][1]["layers"][0]["body"][1].update(heads=2)),
    ("causal", lambda s: s["blocks"][1]["layers"][0]["body"][1].update(causal=True)),
    ("attention bias", lambda s: s["blocks"][1]["layers"][0]["body"][1].update(bias=False)),
    ("attention init", lambda s: s["blocks"][1]["layers"][0]["body"][1].update(init={"scheme": "fan_out"})),
    ("layernorm over", lambda s: s["blocks"][1]["layers"][0]["body"][0].update(over="all")),
    ("pos std", lambda s: s["blocks"][0]["layers"][1].update(std=0.1)),
    ("patch", lambda s: s["blocks"][0]["layers"][0].update(patch=7)),
    ("patch bias", lambda s: s["blocks"][0]["layers"][0].update(bias=False)),
    ("mlp width", lambda s: s["blocks"][1]["layers"][1]["body"][1].update(out=96)),
]


def test_every_change_of_a_transformers_meaning_changes_its_hash() -> None:
    base = vit_spec(depth=1, width=32, heads=4, mlp_ratio=4.0, patch=4)
    hashes = {"original": spec_hash(parse_spec(base))}
    for name, change in VIT_CHANGES:
        spec = copy.deepcopy(base)
        change(spec)
        hashes[name] = spec_hash(parse_spec(spec))
    assert len(set(hashes.values())) == len(hashes), hashes


def test_attention_memory_counts_t_squared_per_head_before_anything_is_allocated() -> None:
    def spec(heads: int) -> dict[str, Any]:
        return {
            "format": "1.1",
            "input_shape": [3, 64, 64],
            "blocks": [
                {"layers": [{"type": "patch_embed", "patch": 1, "out": 64}, {"type": "attention", "heads": heads}]}
            ],
        }

    # T = 4096 tokens: each head's score matrix is 4096^2 elements per sample, kept twice (logits, softmax)
    one, eight = (trace_shapes(parse_spec(spec(h), SpecLimits(max_activation_bytes=2**62))) for h in (1, 8))
    assert eight.activation_elements - one.activation_elements == 2 * 7 * 4096**2
    with pytest.raises(SpecError) as caught:
        parse_spec(spec(8))
    assert "PREFLIGHT_SPEC_MAX_ACTIVATION_BYTES" in str(caught.value)


def test_the_published_schema_knows_the_11_types() -> None:
    schema = spec_json_schema()
    text = str(schema)
    for name in ("cell", "zero", "attention", "patch_embed", "pos_embed", "token_mean"):
        assert f"'{name}'" in text
    assert schema["$id"].endswith("v1.1.json")


@pytest.mark.parametrize(
    ("where", "value"),
    [(("input_shape", 0), 0), (("blocks", 0, "layers", 0, "out"), 0), (("blocks", 0, "layers", 0, "out"), 2**31)],
)
def test_the_published_schema_enforces_the_integer_bounds(where: tuple[Any, ...], value: int) -> None:
    """pydantic wrote them as "gt" and "le", which JSON Schema validators ignore: the schema admitted
    a width of 0 that nas.parse_spec refuses."""
    import jsonschema

    spec = copy.deepcopy(EXAMPLES["mlp"])
    validator = jsonschema.Draft202012Validator(spec_json_schema())
    assert validator.is_valid(spec)
    target = spec
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    assert not validator.is_valid(spec)
    with pytest.raises(SpecError):
        parse_spec(spec)
    text = str(spec_json_schema())
    assert "'gt'" not in text and "'le'" not in text


def test_the_nasbench201_network_is_a_valid_11_spec() -> None:
    spec = parse_spec(nasbench201_spec([3] * 6))
    assert spec.format == "1.1" and len(spec.blocks) == 1 + 15 + 2 + 1


def test_every_example_and_space_validates_against_the_published_schema() -> None:
    import jsonschema

    from nas.examples import EXAMPLES

    validator = jsonschema.Draft202012Validator(spec_json_schema())
    specs = [*EXAMPLES.values(), nasbench201_spec([3, 1, 0, 4, 2, 3]), vit_spec(depth=2, width=32, heads=4)]
    for spec in specs:
        validator.validate(spec)
    bad = vit_spec(depth=1, width=32, heads=4)
    bad["blocks"][1]["layers"][0]["body"][1]["heads"] = "4"
    assert not validator.is_valid(bad)
    assert not validator.is_valid({**_cell_spec(EDGES), "format": "1.2"})


def test_an_oversized_spec_is_refused_by_counting_before_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """161,304 layers (a 4 MB spec) are refused from a cheap count that stops one layer past the
    limit (counting the whole list held the event loop for 60 ms), without the seconds pydantic
    would spend validating them."""
    from nas.spec import ArchitectureSpec
    from nas.validate import count_layers

    layers = [{"type": "relu"}] * 161_304
    spec = {"input_shape": [4], "blocks": [{"layers": layers}]}
    assert count_layers(spec, 4096) == 4097  # stops one past the limit, inside a list too
    nested = {
        "input_shape": [4],
        "blocks": [{"layers": [{"type": "residual", "body": [{"type": "relu"}] * 10}]}] * 1000,
    }
    assert count_layers(nested, 4096) == 4097
    assert count_layers(nested, 20_000) == 11_000  # under the limit: every layer, through residual bodies

    def not_called(*args: object, **kwargs: object) -> None:
        raise AssertionError("validated before counting")

    # a cell's edges count, ops or none: 180,000 identity edges counted as 0 layers, passed the
    # limit and were validated and traced on the event loop for 11 s
    chain = [{"from": j - 1, "to": j} for j in range(1, 1024)]
    cell = {"type": "cell", "nodes": 1024, "edges": chain + [{"from": 0, "to": 1}] * 180_000}
    edges = {"format": "1.1", "input_shape": [4], "blocks": [{"layers": [cell, {"type": "linear", "out": 2}]}]}
    assert count_layers(edges, 4096) > 4096
    small = {**edges, "blocks": [{"layers": [{**cell, "edges": chain[:9], "nodes": 10}]}]}
    assert count_layers(small, 4096) == 1 + 9

    monkeypatch.setattr(ArchitectureSpec, "model_validate", not_called)
    for big in (spec, nested, edges):
        with pytest.raises(SpecError) as caught:
            parse_spec(big)
        assert caught.value.issues[0].path == "blocks" and "PREFLIGHT_SPEC_MAX_LAYERS" in str(caught.value)


def _nested_cells(levels: int, parallel: int = 1, leaf_layers: int = 4) -> dict[str, Any]:
    op: list[dict[str, Any]] = [{"type": "relu"}] * leaf_layers
    for _ in range(levels):
        cell = {"type": "cell", "nodes": 2, "edges": [{"from": 0, "to": 1, "op": op}] * parallel}
        op = [cell]
    return {"format": "1.1", "input_shape": [4], "blocks": [{"layers": op}]}


def test_a_spec_nested_too_deep_is_refused_without_naming_its_cells_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Naming a cell's edges took the canonical form of each op, a walk of its whole subtree, at every
    level before the nesting check: 200 nested cells over 3,600 layers took 24 s to refuse (a fuzzing
    pass). Only parallel edges need that form, and a spec the trace refuses needs no names."""
    import nas.shapes

    calls: list[object] = []
    original = nas.shapes.canonical_ops_json

    def counted(*args: Any) -> Any:
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(nas.shapes, "canonical_ops_json", counted)
    with pytest.raises(SpecError, match="nest deeper than 16"):
        parse_spec(_nested_cells(40, leaf_layers=3000))
    parse_spec(_nested_cells(16))  # as deep as allowed, no parallel edges
    assert calls == []
    parse_spec(_nested_cells(3, parallel=2))  # parallel edges are still named by their ops' canonical form
    assert calls


def test_parallel_edges_are_named_alike_however_they_are_listed() -> None:
    from nas.shapes import cell_edge_modules
    from nas.spec import CellLayer, Init

    a: dict[str, Any] = {
        "type": "cell",
        "nodes": 3,
        "edges": [
            {"from": 0, "to": 1, "op": [{"type": "relu"}]},
            {"from": 0, "to": 2, "op": [{"type": "tanh"}]},
            {"from": 1, "to": 2, "op": [{"type": "relu"}]},
            {"from": 0, "to": 2, "op": [{"type": "sigmoid"}]},
        ],
    }
    b = dict(a, edges=[a["edges"][i] for i in (3, 2, 1, 0)])
    named = {
        which: dict(
            zip(
                (str(e["op"]) + str((e["from"], e["to"])) for e in cell["edges"]),
                cell_edge_modules(CellLayer.model_validate(cell), Init()),
                strict=True,
            )
        )
        for which, cell in (("a", a), ("b", b))
    }
    assert named["a"] == named["b"]
    assert sorted(named["a"].values()) == ["e0_1", "e0_2", "e0_2_1", "e1_2"]


def test_a_signed_zero_in_a_parallel_edge_changes_neither_the_hash_nor_which_edge_each_name_holds() -> None:
    """-0.0 hashes as 0.0; a cell's edges were sorted before that, so -0.0 reordered them."""
    from nas import build_model

    def spec(zero: float) -> ArchitectureSpec:
        scaled = [{"type": "conv2d", "out": 4, "kernel": 1}, {"type": "scale", "factor": zero}]
        halved = [{"type": "conv2d", "out": 4, "kernel": 1}, {"type": "scale", "factor": -0.5}]
        edges: list[dict[str, Any]] = [{"from": 0, "to": 1, "op": scaled}, {"from": 0, "to": 1, "op": halved}]
        return parse_spec(_cell_spec(edges, nodes=2))

    plus, minus = spec(0.0), spec(-0.0)
    assert spec_hash(plus) == spec_hash(minus)
    factors = [
        {name: float(edge[1].factor) for name, edge in cast(Any, build_model(s, seed=0)).blocks[0][0].edges.items()}
        for s in (plus, minus)
    ]
    assert factors[0] == factors[1]


def test_a_two_node_cell_hashes_alike_with_either_output() -> None:
    """Its concat is node 1 alone, the last node: one network, so one hash and one job."""
    edges: list[dict[str, Any]] = [{"from": 0, "to": 1, "op": [{"type": "conv2d", "out": 4, "kernel": 3}]}]
    last, concat = (parse_spec(_cell_spec(edges, nodes=2, output=output)) for output in ("last", "concat"))
    assert spec_hash(last) == spec_hash(concat)
    assert trace_shapes(last).boundaries == trace_shapes(concat).boundaries
    three = [*edges, {"from": 1, "to": 2}]
    assert spec_hash(parse_spec(_cell_spec(three, nodes=3))) != spec_hash(
        parse_spec(_cell_spec(three, nodes=3, output="concat"))
    )

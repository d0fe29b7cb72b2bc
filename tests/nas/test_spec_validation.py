"""Spec v1 validation: valid specs parse; malformed ones name the JSON path and the reason."""

from __future__ import annotations

import copy
import math
from typing import Any, cast

import pytest
import torch

from nas import SpecError, SpecLimits, build_model, parse_spec
from nas.examples import EXAMPLE_CNN, EXAMPLE_MLP
from nas.spec import LinearLayer


def _mlp(*layers: dict[str, Any], input_shape: list[int] | None = None) -> dict[str, Any]:
    return {"input_shape": input_shape or [16], "blocks": [{"layers": list(layers)}]}


def _img(*layers: dict[str, Any]) -> dict[str, Any]:
    return _mlp(*layers, input_shape=[4, 8, 8])


LINEAR = {"type": "linear", "out": 8}

# (case id, spec, expected JSON path, expected words of the reason)
MALFORMED: list[tuple[str, Any, str, str]] = [
    ("not an object", [1, 2], "$", "JSON object"),
    ("missing input_shape", {"blocks": [{"layers": [LINEAR]}]}, "input_shape", "required"),
    ("missing blocks", {"input_shape": [4]}, "blocks", "required"),
    ("empty blocks", {"input_shape": [4], "blocks": []}, "blocks", "at least 1"),
    ("empty layers", {"input_shape": [4], "blocks": [{"layers": []}]}, "blocks[0].layers", "at least 1"),
    ("rank-2 input", {"input_shape": [4, 4], "blocks": [{"layers": [LINEAR]}]}, "input_shape", "rank 2"),
    ("zero input size", {"input_shape": [0], "blocks": [{"layers": [LINEAR]}]}, "input_shape[0]", "greater than 0"),
    ("unknown top-level field", {**_mlp(LINEAR), "optimizer": "adam"}, "optimizer", "unknown field"),
    ("unknown layer type", _mlp({"type": "transformer"}), "blocks[0].layers[0]", "unknown layer type 'transformer'"),
    ("layer without type", _mlp({"out": 3}), "blocks[0].layers[0]", 'no "type"'),
    (
        "unknown layer field",
        _mlp({"type": "relu", "inplace": True}),
        "blocks[0].layers[0] (relu).inplace",
        "unknown field",
    ),
    ("non-positive out", _mlp({"type": "linear", "out": 0}), "blocks[0].layers[0] (linear).out", "greater than 0"),
    ("out of wrong type", _mlp({"type": "linear", "out": "wide"}), "blocks[0].layers[0] (linear).out", "integer"),
    ("fractional out", _mlp({"type": "linear", "out": 2.5}), "blocks[0].layers[0] (linear).out", "integer"),
    (
        "linear on an image",
        _img(LINEAR),
        "blocks[0].layers[0] (linear)",
        "expects a vector input but receives [4, 8, 8]; add a flatten",
    ),
    (
        "conv on a vector",
        _mlp({"type": "conv2d", "out": 4, "kernel": 3}),
        "blocks[0].layers[0] (conv2d)",
        "expects an image input",
    ),
    (
        "conv kernel too large",
        _img({"type": "conv2d", "out": 4, "kernel": 9, "padding": 0}),
        "blocks[0].layers[0] (conv2d)",
        "does not fit",
    ),
    (
        "conv groups do not divide input",
        _img({"type": "conv2d", "out": 6, "kernel": 3, "groups": 3}),
        "blocks[0].layers[0] (conv2d)",
        "must divide the 4 input channels",
    ),
    (
        "conv groups do not divide out",
        _img({"type": "conv2d", "out": 6, "kernel": 3, "groups": 4}),
        "blocks[0].layers[0] (conv2d)",
        "must divide out=6",
    ),
    (
        "bad padding word",
        _img({"type": "conv2d", "out": 4, "kernel": 3, "padding": "valid"}),
        "blocks[0].layers[0] (conv2d).padding",
        "",
    ),
    (
        "groupnorm groups do not divide",
        _img({"type": "groupnorm", "groups": 3}),
        "blocks[0].layers[0] (groupnorm)",
        "must divide the 4 channels",
    ),
    (
        "groupnorm on a vector",
        _mlp({"type": "groupnorm", "groups": 2}),
        "blocks[0].layers[0] (groupnorm)",
        "expects an image input",
    ),
    (
        "pool larger than the image",
        _img({"type": "maxpool", "kernel": 16}),
        "blocks[0].layers[0] (maxpool)",
        "larger than the 8x8 input",
    ),
    (
        "pool on a vector",
        _mlp({"type": "avgpool", "kernel": 2}),
        "blocks[0].layers[0] (avgpool)",
        "expects an image input",
    ),
    (
        "global pool on a vector",
        _mlp({"type": "global_avgpool"}),
        "blocks[0].layers[0] (global_avgpool)",
        "expects an image input",
    ),
    ("dropout p = 1", _mlp({"type": "dropout", "p": 1.0}), "blocks[0].layers[0] (dropout).p", "less than 1"),
    (
        "negative dropout",
        _mlp({"type": "dropout", "p": -0.1}),
        "blocks[0].layers[0] (dropout).p",
        "greater than or equal to 0",
    ),
    (
        "non-finite scale",
        _mlp({"type": "scale", "factor": float("inf")}),
        "blocks[0].layers[0] (scale).factor",
        "finite",
    ),
    (
        "residual paths disagree",
        _mlp({"type": "residual", "body": [LINEAR]}),
        "blocks[0].layers[0] (residual)",
        "body gives [8] but shortcut gives [16]",
    ),
    (
        "empty residual body",
        _mlp({"type": "residual", "body": []}),
        "blocks[0].layers[0] (residual).body",
        "at least 1",
    ),
    (
        "nested error inside a residual",
        _mlp({"type": "residual", "body": [{"type": "linear", "out": -1}]}),
        "blocks[0].layers[0] (residual).body[0] (linear).out",
        "greater than 0",
    ),
    ("unknown init scheme", {**_mlp(LINEAR), "init": {"scheme": "orthogonal"}}, "init.scheme", "fan_in"),
    ("normal without std", {**_mlp(LINEAR), "init": {"scheme": "normal"}}, "init", 'needs a positive "std"'),
    (
        "std on another scheme",
        _mlp({"type": "linear", "out": 4, "init": {"scheme": "fan_in", "std": 0.1}}),
        "blocks[0].layers[0] (linear).init",
        "only used by scheme",
    ),
    ("non-positive gain", {**_mlp(LINEAR), "init": {"gain": 0}}, "init.gain", "greater than 0"),
    (
        "batchnorm flag of wrong type",
        _mlp({"type": "linear", "out": 4, "bias": "yes please"}),
        "blocks[0].layers[0] (linear).bias",
        "boolean",
    ),
    (
        "error in a later block",
        {
            "input_shape": [4, 8, 8],
            "blocks": [
                {"layers": [{"type": "conv2d", "out": 32, "kernel": 3}]},
                {"layers": [{"type": "maxpool", "kernel": 2}]},
                {"layers": [{"type": "relu"}]},
                {"layers": [{"type": "relu"}, LINEAR]},
            ],
        },
        "blocks[3].layers[1] (linear)",
        "receives [32, 4, 4]",
    ),
]


@pytest.mark.parametrize(
    ("spec", "path", "reason"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED]
)
def test_malformed_spec_is_rejected_naming_path_and_reason(spec: Any, path: str, reason: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    paths = [issue.path for issue in caught.value.issues]
    assert path in paths, f"expected an issue at {path!r}, got {caught.value}"
    message = next(issue.message for issue in caught.value.issues if issue.path == path)
    assert reason in message
    assert path in str(caught.value)


def test_there_are_at_least_twenty_kinds_of_malformed_spec() -> None:
    assert len({case[0] for case in MALFORMED}) >= 20


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b"\xff\xfe{", "not JSON text"),  # read as UTF-16: was a raw UnicodeDecodeError
        (b"\xff\xff", "not JSON text"),
        ('{"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": ' + "9" * 5000 + "}]}]}", "number"),
    ],
    ids=["utf16-truncated", "not-unicode", "integer-of-5000-digits"],
)
def test_json_text_python_cannot_decode_is_a_spec_error_at_the_root(text: str | bytes, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(text)
    assert caught.value.issues[0].path == "$" and words in str(caught.value)


def test_invalid_json_text_is_rejected_at_the_root() -> None:
    with pytest.raises(SpecError, match=r"^\$: not valid JSON"):
        parse_spec('{"input_shape": [4], ')


@pytest.mark.parametrize(
    ("text", "path", "key"),
    [
        (
            '{"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 8, "out": 16}]}]}',
            "blocks[0].layers[0]",
            "out",
        ),
        ('{"input_shape": [4], "blocks": [], "input_shape": [5]}', "$", "input_shape"),
        ('{"input_shape": [4], "blocks": [{"layers": [{"type": "relu"}], "layers": []}]}', "blocks[0]", "layers"),
    ],
    ids=["layer", "root", "block"],
)
def test_json_text_naming_a_key_twice_is_refused_at_that_object(text: str, path: str, key: str) -> None:
    """json.loads keeps the last value: the first spec was a width of 16, read with no word."""
    with pytest.raises(SpecError) as caught:
        parse_spec(text)
    assert [(i.path, i.message) for i in caught.value.issues] == [
        (path, f"duplicate key {key!r}: name each key of an object once")
    ]


def test_a_spec_given_to_the_client_as_json_text_is_read_as_strictly() -> None:
    from nas.client import spec_payload

    with pytest.raises(SpecError, match=r"^blocks\[0\]\.layers\[0\]: duplicate key 'out'"):
        spec_payload('{"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 8, "out": 16}]}]}')
    assert spec_payload('{"a": {"k": 1}, "b": {"k": 2}}') == {"a": {"k": 1}, "b": {"k": 2}}  # one key per object


@pytest.mark.parametrize("spec", [EXAMPLE_MLP, EXAMPLE_CNN], ids=["mlp", "cnn"])
def test_examples_are_valid(spec: dict[str, Any]) -> None:
    assert parse_spec(spec).input_shape == spec["input_shape"]


def test_every_layer_type_of_the_format_is_accepted() -> None:
    spec = {
        "input_shape": [4, 8, 8],
        "blocks": [
            {
                "layers": [
                    {"type": "conv2d", "out": 8, "kernel": 3, "stride": 1, "padding": 1, "groups": 2, "bias": False},
                    {"type": "batchnorm"},
                    {"type": "relu"},
                    {"type": "groupnorm", "groups": 4},
                    {"type": "gelu"},
                    {"type": "maxpool", "kernel": 2},
                ]
            },
            {
                "layers": [
                    {
                        "type": "residual",
                        "alpha": 0.5,
                        "beta": 0.25,
                        "body": [{"type": "conv2d", "out": 8, "kernel": 3}, {"type": "silu"}],
                        "shortcut": [{"type": "conv2d", "out": 8, "kernel": 1}],
                    },
                    {"type": "avgpool", "kernel": 2, "stride": 1},
                    {"type": "layernorm"},
                ]
            },
            {
                "layers": [
                    {"type": "global_avgpool"},
                    {"type": "tanh"},
                    {"type": "dropout", "p": 0.1},
                    {"type": "flatten"},
                    {"type": "linear", "out": 6},
                    {"type": "sigmoid"},
                    {"type": "leaky_relu", "slope": 0.2},
                    {"type": "scale", "factor": 2.0},
                    {"type": "identity"},
                    {"type": "batchnorm"},
                ]
            },
        ],
    }
    parse_spec(spec)


def test_parsed_spec_is_frozen() -> None:
    spec = parse_spec(EXAMPLE_MLP)
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        (SpecLimits(max_blocks=2), "3 blocks exceed the limit of 2"),
        (SpecLimits(max_parameters=1000), "parameters exceed the limit of 1,000"),
        (SpecLimits(max_activation_bytes=1000), "PREFLIGHT_SPEC_MAX_ACTIVATION_BYTES"),
        (SpecLimits(max_layers=3), "layers exceed the limit of 3"),
    ],
    ids=["blocks", "parameters", "activation memory", "layers"],
)
def test_size_limits_are_enforced_with_the_setting_named(limits: SpecLimits, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_spec(EXAMPLE_MLP, limits=limits)


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_SPEC_MAX_PARAMETERS", "10")
    with pytest.raises(SpecError, match="limit of 10"):
        parse_spec(EXAMPLE_MLP)


def test_more_than_512_blocks_are_rejected_before_building() -> None:
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "relu"}]}] * 513}
    with pytest.raises(SpecError, match="at most 512"):
        parse_spec(spec)


def test_validation_does_not_mutate_the_input() -> None:
    spec = copy.deepcopy(EXAMPLE_MLP)
    parse_spec(spec)
    assert spec == EXAMPLE_MLP


def test_deeply_nested_residuals_are_rejected_clearly() -> None:
    layer: dict[str, Any] = {"type": "relu"}
    for _ in range(40):
        layer = {"type": "residual", "body": [layer]}
    with pytest.raises(SpecError, match="nest deeper than"):
        parse_spec(_mlp(layer))


@pytest.mark.parametrize(
    ("text", "kind"),
    [("null", "null"), ("[1]", "an array"), ('"x"', "a string"), ("1.5", "a number"), ("true", "a boolean")],
)
def test_a_spec_that_is_not_an_object_is_named_by_its_json_kind(text: str, kind: str) -> None:
    """The message named Python's types ("not NoneType", "not list") to a reader of JSON."""
    with pytest.raises(SpecError) as error:
        parse_spec(text)
    assert [(issue.path, issue.message) for issue in error.value.issues] == [
        ("$", f"a spec is a JSON object, not {kind}")
    ]


@pytest.mark.parametrize("depth", [300, 2000])
def test_residuals_nested_past_the_validators_depth_are_one_issue_naming_the_limit(depth: int) -> None:
    """Past about 250 levels pydantic's own "Recursion error - maximum validation depth exceeded
    (got {...})" came out, the whole spec on one line."""
    layer: dict[str, Any] = {"type": "relu"}
    for _ in range(depth):
        layer = {"type": "residual", "body": [layer]}
    with pytest.raises(SpecError) as error:
        parse_spec(_mlp(layer))
    assert [(issue.path, issue.message) for issue in error.value.issues] == [
        ("$", "layers nest too deeply: residual layers and cells nest at most 16 deep")
    ]


@pytest.mark.parametrize("value", ["16", 16.0, True])
def test_a_count_that_is_not_an_integer_is_refused_not_coerced(value: object) -> None:
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": value}]}]}
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    (issue,) = error.value.issues
    assert issue.path == "blocks[0].layers[0] (linear).out" and "expected an integer" in issue.message


def test_an_integral_number_of_any_type_is_an_integer() -> None:
    import numpy as np

    spec = {"input_shape": [np.int64(4)], "blocks": [{"layers": [{"type": "linear", "out": np.int32(16)}]}]}
    parsed = parse_spec(spec)
    assert parsed.input_shape == [4] and type(cast(LinearLayer, parsed.blocks[0].layers[0]).out) is int


def test_an_error_about_a_large_value_quotes_it_cut_short() -> None:
    huge = {"k": "x" * 100_000}
    spec = {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": huge}]}]}
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    (issue,) = error.value.issues
    assert len(issue.message) < 300 and "characters)" in issue.message


def _cell(nodes: int) -> dict[str, Any]:
    cell = {"type": "cell", "nodes": nodes, "edges": [{"from": 0, "to": 1}]}
    return {"format": "1.1", "input_shape": [4], "blocks": [{"layers": [cell]}]}


# values a fuzzer found accepted and then breaking the build, the forward pass or the engine
BREAKING: list[tuple[str, Any, str]] = [
    ("stride 2**63", _mlp({"type": "conv2d", "out": 1, "kernel": 1, "stride": 2**63}, input_shape=[1, 1, 1]), "stride"),
    ("pool stride 2**63", _mlp({"type": "maxpool", "kernel": 1, "stride": 2**63}, input_shape=[1, 1, 1]), "stride"),
    (
        "padding 2**62",
        _mlp({"type": "conv2d", "out": 1, "kernel": 1, "padding": 2**62}, input_shape=[1, 1, 1]),
        "padding",
    ),
    ("slope beyond float32", _mlp({"type": "leaky_relu", "slope": 1e39}), "(leaky_relu).slope"),
    ("std squared overflows", {**_mlp(LINEAR), "init": {"scheme": "normal", "std": 1e155}}, "init.std"),
    ("gain squared overflows", {**_mlp(LINEAR), "init": {"gain": 1e155}}, "init.gain"),
    ("beta squared overflows", _mlp({"type": "residual", "body": [LINEAR], "beta": 1e308}), "(residual).beta"),
    ("alpha below -10**6", _mlp({"type": "residual", "body": [LINEAR], "alpha": -1e7}), "(residual).alpha"),
    ("a cell of 2**31 nodes", _cell(2**31), "(cell).nodes"),
    # a conv backward crashed the process (SIGSEGV) and a pool took seconds per sample
    ("stride 2**16", _mlp({"type": "conv2d", "out": 1, "kernel": 1, "stride": 2**16}, input_shape=[1, 1, 1]), "stride"),
    (
        "pool kernel 2**31 - 1",
        _mlp({"type": "maxpool", "kernel": 2**31 - 1, "padding": 1}, input_shape=[1, 1, 1]),
        "(maxpool).kernel",
    ),
]


@pytest.mark.parametrize(("spec", "field"), [case[1:] for case in BREAKING], ids=[case[0] for case in BREAKING])
def test_a_value_that_would_break_the_build_is_refused_at_its_path(spec: Any, field: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    (issue,) = error.value.issues
    assert issue.path.endswith(field) and ("less than or equal" in issue.message or "greater than" in issue.message)


def test_the_largest_accepted_values_build_run_and_condition_without_overflow() -> None:
    import torch

    from nas import build_model, spec_hash
    from nas.spec import MAX_WINDOW
    from worker.engine.structure import block_log_rho

    window = MAX_WINDOW  # a kernel's, stride's or padding's
    specs = [
        _mlp({"type": "conv2d", "out": 1, "kernel": 1, "stride": window, "padding": window}, input_shape=[1, 1, 1]),
        {
            **_mlp(
                {"type": "maxpool", "kernel": window, "stride": window, "padding": window // 2},
                {"type": "flatten"},
                LINEAR,
                input_shape=[1, 1, 1],
            ),
            "format": "1.1",
        },
        {**_mlp(LINEAR, {"type": "leaky_relu", "slope": 1e6}), "init": {"scheme": "normal", "std": 1e6, "gain": 1e6}},
        _mlp({"type": "residual", "body": [{"type": "linear", "out": 16}], "alpha": -1e6, "beta": 1e6}),
    ]
    for spec in specs:
        parsed = parse_spec(spec)
        assert len(spec_hash(parsed)) == 64
        model = build_model(spec, seed=0)
        out = model(torch.randn(2, *spec["input_shape"]))
        assert out.shape[0] == 2
        out.sum().backward()  # where a stride of 2**16 crashed the process
        assert all(math.isfinite(value) for value in block_log_rho(model))


def test_input_nested_too_deeply_is_refused_not_a_recursion_error() -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(SpecError):
        parse_spec({**_mlp(LINEAR), "name": deep})
    with pytest.raises(SpecError, match=r"^\$: JSON nested too deeply"):
        parse_spec("[" * 100_000)


def test_an_unknown_key_that_is_not_a_name_is_quoted_in_its_path() -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({**_mlp({"type": "relu", "x-y": 1}), "out ": 2})
    paths = {issue.path for issue in error.value.issues}
    assert paths == {'["out "]', 'blocks[0].layers[0] (relu)["x-y"]'}, paths


@pytest.mark.parametrize(
    ("layer", "field", "words"),
    [
        ({"type": "linear", "out": 2, "bias": "no"}, "bias", "true or false"),  # was read as false
        ({"type": "linear", "out": 2, "bias": 0}, "bias", "true or false"),
        ({"type": "linear", "out": 2, "bias": 1.0}, "bias", "true or false"),
        ({"type": "scale", "factor": "1"}, "factor", "a number"),  # was read as 1.0
        ({"type": "scale", "factor": True}, "factor", "a number"),
        ({"type": "leaky_relu", "slope": True}, "slope", "a number"),
        ({"type": "dropout", "p": True}, "p", "a number"),  # was "less than 1 (got True)"
        ({"type": "leaky_relu", "slope": 10**400}, "slope", "a finite number"),  # not an OverflowError (a 500)
    ],
)
def test_a_switch_or_a_number_of_another_type_is_refused_not_coerced(
    layer: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec(_mlp(layer))
    (issue,) = error.value.issues
    assert issue.path == f"blocks[0].layers[0] ({layer['type']}).{field}" and words in issue.message, issue


def test_numpy_numbers_and_switches_are_accepted_as_python_ones() -> None:
    import numpy as np

    layers = [
        {"type": "linear", "out": 2, "bias": np.bool_(False)},
        {"type": "scale", "factor": np.float32(0.5)},
        {"type": "leaky_relu", "slope": 1},
    ]
    parsed = parse_spec(_mlp(*layers)).blocks[0].layers
    assert [getattr(layer, name) for layer, name in zip(parsed, ("bias", "factor", "slope"), strict=True)] == [
        False,
        0.5,
        1.0,
    ]


def test_an_unknown_key_named_like_a_layer_type_is_a_field_in_its_path() -> None:
    """It was shown as a layer's type tag: ``blocks[0] (relu)`` for a block's unknown key ``relu``."""
    edge = {"from": 0, "to": 1, "op": [{"type": "linear", "out": 2}], "linear": 1}
    spec = {
        "format": "1.1",
        "input_shape": [4],
        "blocks": [{"layers": [{"type": "cell", "nodes": 2, "edges": [edge]}], "relu": 1}],
    }
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    paths = {issue.path for issue in error.value.issues}
    assert paths == {"blocks[0].relu", "blocks[0].layers[0] (cell).edges[0].linear"}, paths


def test_a_cell_with_many_unfed_nodes_names_the_first_ten() -> None:
    with pytest.raises(SpecError) as error:
        parse_spec(_cell(1000))
    (issue,) = error.value.issues
    assert "[2, 3, 4, 5, 6, 7, 8, 9, 10, 11] and 988 more" in issue.message and len(issue.message) < 200


def test_an_unknown_layer_type_is_quoted_as_given_and_cut_short() -> None:
    """pydantic's tag showed a lone surrogate as U+FFFD (every other field shows '\\ud800'), and
    a 3 MB type came back whole."""
    from nas.spec import SpecError
    from nas.validate import parse_spec

    for given, shown in [("\ud800", "'\\ud800'"), ("x" * 100_000, "... (100002 characters)")]:
        with pytest.raises(SpecError) as caught:
            parse_spec({"input_shape": [4], "blocks": [{"layers": [{"type": given}]}]})
        message = str(caught.value)
        assert shown in message and len(message) < 1000, message[:200]


DEAD_CELL = {
    "format": "1.1",
    "input_shape": [2],
    "blocks": [
        {
            "layers": [
                {
                    "type": "cell",
                    "nodes": 3,
                    "edges": [
                        {"from": 0, "to": 1, "op": [{"type": "linear", "out": 2}]},
                        {"from": 0, "to": 2, "op": []},
                    ],
                }
            ]
        }
    ],
}


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        (
            _mlp({"type": "conv2d", "out": 2, "kernel": 1}, {"type": "groupnorm", "groups": 2}, input_shape=[2, 1, 1]),
            "blocks[0].layers[1] (groupnorm)",
            "normalizes each of the 2 groups of [2, 1, 1] over 1 value",
        ),
        (_mlp({"type": "layernorm"}, LINEAR, input_shape=[1]), "blocks[0].layers[0] (layernorm)", "over 1 value"),
        (DEAD_CELL, "blocks[0].layers[0] (cell).edges", "node(s) [1] lead to no path into the cell's output"),
        (
            _mlp({"type": "conv2d", "out": 1, "kernel": 2, "stride": 2}, input_shape=[1, 1, 1]),
            "blocks[0].layers[0] (conv2d)",
            'kernel 2 with padding "same" (0 at stride 2) does not fit',
        ),
    ],
    ids=["groupnorm-of-one-value", "layernorm-of-one-value", "cell-node-feeding-nothing", "same-padding-named"],
)
def test_a_valid_shape_that_cannot_train_is_refused_at_its_layer(spec: Any, path: str, words: str) -> None:
    """A fuzzer found them validated: a norm over one value outputs a constant (torch refuses a
    groupnorm of it at batch 1, in eval mode too), and weights in a cell node that reaches no
    output made the engine's backward fail ("does not require grad"), a retryable RuntimeError."""
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    (issue,) = error.value.issues
    assert issue.path == path and words in issue.message, issue


def _dag_cell(*edges: tuple[int, int, list[dict[str, Any]]], nodes: int = 4) -> dict[str, Any]:
    listed = [{"from": a, "to": b, "op": op} for a, b, op in edges]
    return {
        "format": "1.1",
        "input_shape": [2],
        "blocks": [{"layers": [{"type": "cell", "nodes": nodes, "edges": listed}]}],
    }


LINEAR_OP = [{"type": "linear", "out": 2}]


def test_a_cell_node_that_only_feeds_a_dead_node_is_refused_for_its_weights() -> None:
    """Node 1 feeds node 2, which feeds nothing: node 1's weights get no gradient either, though
    node 1 feeds a later node (the rule read only the nodes that feed none)."""
    spec = _dag_cell((0, 1, LINEAR_OP), (1, 2, []), (0, 3, []))
    with pytest.raises(SpecError) as error:
        parse_spec(spec)
    (issue,) = error.value.issues
    assert issue.path == "blocks[0].layers[0] (cell).edges"
    assert "node(s) [1] lead to no path" in issue.message and "edges [0]" in issue.message, issue
    assert "node(s) [2] feed no later node" in issue.message, issue  # where the missing edge goes


def test_a_dead_cell_node_without_weights_is_accepted() -> None:
    """A skip or a pool into a node that feeds nothing wastes a little work and trains nothing
    less: refusing it refused search-space samples that build and train."""
    spec = _dag_cell((0, 1, LINEAR_OP), (1, 3, []), (1, 2, [{"type": "relu"}]))
    model = build_model(parse_spec(spec), seed=0)
    x = torch.randn(4, 2)
    model(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_a_json_literal_is_quoted_as_json_writes_it() -> None:
    """A spec author wrote `true`; the message quoted Python's `True`."""
    with pytest.raises(SpecError, match=r"init\.gain: Input should be a number \(got true\)"):
        parse_spec({"input_shape": [8], "init": {"gain": True}, "blocks": [{"layers": [{"type": "linear", "out": 2}]}]})


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (
            {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}], "\ud800": 1},
            '["\ud800"]',
        ),  # the key as given (the API escapes it)
        (
            {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2, "a\udc00": 1}]}]},
            'blocks[0].layers[0]["a\udc00"]',
        ),
    ],
    ids=["top-level", "in-a-layer"],
)
def test_a_dicts_key_holding_a_lone_surrogate_is_refused_at_that_key_as_in_json_text(
    spec: dict[str, Any], path: str
) -> None:
    """A spec given as a dict was refused at the object holding such a key, in pydantic's words
    ("unable to parse raw data as a unicode string"); JSON text was refused at the key itself."""
    from nas.spec import SpecError
    from nas.validate import parse_spec

    with pytest.raises(SpecError) as caught:
        parse_spec(spec)
    (issue,) = caught.value.issues
    assert issue.path == path
    assert issue.message == "not valid Unicode text (the key holds a lone surrogate): no field is named so"

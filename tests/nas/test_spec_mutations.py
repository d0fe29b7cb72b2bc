"""Hostile edits of the example specs: each is refused with a SpecError (no other exception, no
hang), or it builds and runs. Before the bounds of docs/spec.md, such edits found specs the
validator accepted and PyTorch or the engine then broke on (a stride of 2**63, a residual beta of
1e308), and inputs that raised RecursionError or hung instead of a SpecError."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nas import SpecError, SpecLimits, build_model, parse_spec, spec_hash
from nas.examples import EXAMPLES
from worker.engine.structure import block_log_rho


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: list[Any] = [
    0, -1, 2, 7, 2**31, 2**62, 2**63, -(2**63),
    1e-300, 0.5, 1e39, 1e155, -1e308, float("inf"), float("nan"),
    None, True, "", "16", "x" * 10_000, [], {}, [1, 2], {"type": "relu"},
    "DEEP",  # a list nested 200 deep, made afresh for each edit (deeper: test_spec_validation's own test)
]  # fmt: skip

KEYS = ["x-y", "out ", "bias\x00", "type", "beta", "nodes", "stride"]


def _hostile(draw: st.DrawFn) -> Any:
    value = draw(st.sampled_from(HOSTILE))
    return _nested(200) if value == "DEEP" else copy.deepcopy(value)


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every dict and list in the spec, with its path, down to 30 levels (not into a DEEP value)."""
    if len(path) > 30:
        return []
    if isinstance(value, dict):
        found: list[tuple[tuple[Any, ...], Any]] = [(path, value)]
        for key, item in value.items():
            found += _containers(item, (*path, key))
        return found
    if isinstance(value, list):
        found = [(path, value)]
        for i, item in enumerate(value):
            found += _containers(item, (*path, i))
        return found
    return []


def _numbers(spec: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every number in the spec: where the validator's bounds matter."""
    return [
        (container, key)
        for _, container in _containers(spec)
        for key, item in (container.items() if isinstance(container, dict) else enumerate(container))
        if isinstance(item, int | float) and not isinstance(item, bool)
    ]


@st.composite
def _mutated_spec(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(EXAMPLES[draw(st.sampled_from(sorted(EXAMPLES)))])
    for _ in range(draw(st.integers(1, 2))):
        edit = draw(st.sampled_from(["number", "number", "number", "set", "delete", "add"]))
        if edit == "number":  # the bugs were numbers valid for the format's types and out of PyTorch's range
            container, key = draw(st.sampled_from(_numbers(spec)))
            huge = [2**31, 2**62, 2**63] if isinstance(container[key], int) else [1e39, 1e155, 1e308, -1e308]
            container[key] = draw(st.sampled_from(huge))
            continue
        _, target = draw(st.sampled_from(_containers(spec)))
        if isinstance(target, dict) and edit == "add":
            target[draw(st.sampled_from(KEYS))] = _hostile(draw)
        elif isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)))
            if edit == "delete":
                del target[key]
            else:
                target[key] = _hostile(draw)
        elif isinstance(target, list) and target:
            i = draw(st.integers(0, len(target) - 1))
            if edit == "delete":
                del target[i]
            else:
                target[i] = _hostile(draw)
    return spec


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_mutated_spec())
def test_a_hostile_edit_is_refused_where_it_is_or_the_spec_builds_and_runs(spec: dict[str, Any]) -> None:
    try:
        parsed = parse_spec(spec, SpecLimits(max_parameters=5_000_000))
    except SpecError as error:
        assert error.issues and all(issue.path and issue.message for issue in error.issues)
        return
    assert len(spec_hash(parsed)) == 64
    model = build_model(parsed, seed=0)
    with torch.no_grad():
        out = model(torch.randn(2, *parsed.input_shape))
    assert out.shape[0] == 2
    assert all(math.isfinite(value) for value in block_log_rho(model))  # the engine's first reading

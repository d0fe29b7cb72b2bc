"""The NAS-Bench-201 search space: 15,625 cells of 4 nodes, one of 5 ops on each of 6 edges.

Dong & Yang, "NAS-Bench-201: Extending the Scope of Reproducible Neural Architecture Search"
(ICLR 2020). The ops, in the benchmark's index order, are ``none`` (a ``zero`` op),
``skip_connect`` (identity), ``nor_conv_1x1`` and ``nor_conv_3x3`` (ReLU, conv without bias,
BatchNorm) and ``avg_pool_3x3`` (stride 1, padding 1, the border averaging only real inputs).
The edges, in the benchmark's order (that of its architecture strings
``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``), are 0->1, 0->2, 1->2, 0->3, 1->3, 2->3.

The macro skeleton is the benchmark's: a 3x3 conv stem and BatchNorm; three stages of
``cells_per_stage`` cells at C, 2C and 4C channels, joined by ResNet basic blocks of stride 2
(two ReLU-conv-BN, an average-pool-and-1x1-conv shortcut); BatchNorm, ReLU, global average
pooling and a linear head. The benchmark trains from PyTorch's default initialization, which is
the default ``init`` here. Every cell, the stem, each reduction and the head is its own block.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from nas._numbers import is_integral
from nas.shapes import trace_shapes
from nas.space.chains import Layer, Spec, _check_fits_format, _count, _Trial
from nas.spec import ArchitectureSpec, SpecError, issues_from_validation_error

__all__ = [
    "NB201_EDGES",
    "NB201_OPS",
    "NASBench201Space",
    "nasbench201_arch_string",
    "nasbench201_cell",
    "nasbench201_cells",
    "nasbench201_spec",
    "parse_nasbench201_arch",
]

NB201_OPS: tuple[str, ...] = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
NB201_EDGES: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3))


def _op(name: str, channels: int) -> list[Layer]:
    if name == "none":
        return [{"type": "zero"}]
    if name == "skip_connect":
        return []
    if name in ("nor_conv_1x1", "nor_conv_3x3"):
        kernel = 1 if name == "nor_conv_1x1" else 3
        conv = {"type": "conv2d", "out": channels, "kernel": kernel, "bias": False}
        return [{"type": "relu"}, conv, {"type": "batchnorm"}]
    if name == "avg_pool_3x3":
        return [{"type": "avgpool", "kernel": 3, "stride": 1, "padding": 1}]
    raise ValueError(f"unknown NAS-Bench-201 op {name!r}; expected one of {list(NB201_OPS)}")


def _op_names(ops: Sequence[int | str] | str) -> tuple[str, ...]:
    if isinstance(ops, str):
        return parse_nasbench201_arch(ops)
    if len(ops) != len(NB201_EDGES):
        raise ValueError(f"a NAS-Bench-201 cell has {len(NB201_EDGES)} edges, got {len(ops)} ops: {list(ops)}")
    names = []
    for op in ops:
        if isinstance(op, str):
            names.append(op)
        elif is_integral(op) and 0 <= op < len(NB201_OPS):  # a numpy integer too, as everywhere
            names.append(NB201_OPS[int(op)])
        else:
            raise ValueError(f"an op is a name or an index in 0..{len(NB201_OPS) - 1}, got {op!r}")
    return tuple(names)


def parse_nasbench201_arch(arch: str) -> tuple[str, ...]:
    """``|nor_conv_3x3~0|+|none~0|skip_connect~1|+|...|`` to the 6 op names in edge order. Each op
    goes to the edge its entry names (``op~source`` under its target node), so entries in another
    order are read as written; an edge missing, repeated or under the wrong node is refused."""
    if not isinstance(arch, str):
        raise TypeError(f"a NAS-Bench-201 architecture string is a str, but got {type(arch).__name__}")
    found: dict[tuple[int, int], str] = {}
    nodes = arch.strip("|").split("|+|")
    for target, node in enumerate(nodes, start=1):
        for entry in node.split("|"):
            name, _, source = entry.partition("~")
            edge = (int(source), target) if source.isascii() and source.isdigit() else None
            if name not in NB201_OPS or edge not in NB201_EDGES:
                raise ValueError(f"not a NAS-Bench-201 architecture string: {arch!r} (at {entry!r})")
            if edge in found:
                raise ValueError(f"not a NAS-Bench-201 architecture string: {arch!r} (edge {source}->{target} twice)")
            found[edge] = name
    missing = [f"{s}->{t}" for s, t in NB201_EDGES if (s, t) not in found]
    if missing:
        raise ValueError(f"not a NAS-Bench-201 architecture string: {arch!r} (no op on edge {', '.join(missing)})")
    return tuple(found[edge] for edge in NB201_EDGES)


def nasbench201_arch_string(ops: Sequence[int | str]) -> str:
    """The benchmark's architecture string of a cell (the inverse of :func:`parse_nasbench201_arch`)."""
    names = _op_names(ops)
    nodes = [[f"{names[e]}~{s}" for e, (s, t) in enumerate(NB201_EDGES) if t == target] for target in (1, 2, 3)]
    return "+".join("|" + "|".join(node) + "|" for node in nodes)


def nasbench201_cell(ops: Sequence[int | str] | str, channels: int) -> Layer:
    """One cell as a v1.1 ``cell`` layer, from 6 op indices (or names, or an architecture string)."""
    names = _op_names(ops)
    edges = [{"from": s, "to": t, "op": _op(name, channels)} for (s, t), name in zip(NB201_EDGES, names, strict=True)]
    return {"type": "cell", "nodes": 4, "edges": edges}


def _reduction(channels_in: int, channels_out: int) -> list[Layer]:
    """NAS-Bench-201's ResNet basic block of stride 2."""
    body = [
        {"type": "relu"},
        {"type": "conv2d", "out": channels_out, "kernel": 3, "stride": 2, "bias": False},
        {"type": "batchnorm"},
        {"type": "relu"},
        {"type": "conv2d", "out": channels_out, "kernel": 3, "bias": False},
        {"type": "batchnorm"},
    ]
    shortcut = [{"type": "avgpool", "kernel": 2}, {"type": "conv2d", "out": channels_out, "kernel": 1, "bias": False}]
    return [{"type": "residual", "body": body, "shortcut": shortcut}]


def nasbench201_spec(
    ops: Sequence[int | str] | str,
    channels: int = 16,
    cells_per_stage: int = 5,
    n_classes: int = 10,
    input_shape: Sequence[int] = (3, 32, 32),
    init: dict[str, Any] | None = None,
) -> Spec:
    """A NAS-Bench-201 network (format 1.1) in the benchmark's macro skeleton.

    >>> import nas
    >>> nas.parse_spec(nasbench201_spec("|nor_conv_3x3~0|+|none~0|none~1|+|skip_connect~0|none~1|none~2|")).format
    '1.1'
    """
    names = _op_names(ops)
    stem = [{"type": "conv2d", "out": channels, "kernel": 3, "bias": False}, {"type": "batchnorm"}]
    blocks: list[dict[str, Any]] = [{"name": "stem", "layers": stem}]
    for stage in range(3):
        width = channels * 2**stage
        if stage:
            blocks.append({"name": f"reduction{stage}", "layers": _reduction(width // 2, width)})
        for i in range(cells_per_stage):
            blocks.append({"name": f"stage{stage}.cell{i}", "layers": [nasbench201_cell(names, width)]})
    head = [{"type": "batchnorm"}, {"type": "relu"}, {"type": "global_avgpool"}, {"type": "linear", "out": n_classes}]
    blocks.append({"name": "head", "layers": head})
    return {
        "format": "1.1",
        "name": nasbench201_arch_string(names),
        "input_shape": list(input_shape),
        "init": init or {"scheme": "torch_default"},
        "blocks": blocks,
    }


def nasbench201_cells() -> Iterator[tuple[int, ...]]:
    """All 15,625 cells as op-index 6-tuples, in lexicographic order."""
    return itertools.product(range(len(NB201_OPS)), repeat=len(NB201_EDGES))


@dataclass(frozen=True)
class NASBench201Space:
    """The NAS-Bench-201 space for an Optuna objective: one categorical parameter per edge
    (``edge_0_1`` ... ``edge_2_3``, over the op names), the skeleton fixed."""

    channels: int = 16
    cells_per_stage: int = 5
    n_classes: int = 10
    input_shape: tuple[int, ...] = (3, 32, 32)

    def __post_init__(self) -> None:
        for name in ("channels", "cells_per_stage", "n_classes"):
            if not _count(getattr(self, name), 1):
                raise ValueError(f"{name} must be an integer of at least 1, but got {name}={getattr(self, name)!r}.")
        if len(self.input_shape) != 3 or not all(_count(size, 1) for size in self.input_shape):
            raise ValueError(f"input_shape must be [C, H, W], but got input_shape={list(self.input_shape)}.")
        _check_fits_format(self)
        try:  # the skeleton's shapes do not depend on the ops: one that fails here fails every trial (no size limits)
            trace_shapes(
                ArchitectureSpec.model_validate(nasbench201_spec(["none"] * len(NB201_EDGES), *self._skeleton()))
            )
        except ValidationError as exc:  # a size past the format's bounds (channels of 2**30 double past 2**31)
            issue = issues_from_validation_error(exc)[0]
            raise ValueError(f"the skeleton is not a valid spec: {issue.path}: {issue.message}") from None
        except SpecError as exc:
            raise ValueError(f"the skeleton cannot take input_shape={list(self.input_shape)}: {exc}") from None

    def __call__(self, trial: _Trial) -> Spec:
        ops = [trial.suggest_categorical(f"edge_{s}_{t}", list(NB201_OPS)) for s, t in NB201_EDGES]
        return nasbench201_spec(ops, *self._skeleton())

    def _skeleton(self) -> tuple[int, int, int, tuple[int, ...]]:
        return self.channels, self.cells_per_stage, self.n_classes, tuple(self.input_shape)

"""Spec to PyTorch model: deterministic, with documented parameter names and block boundaries.

Parameter names follow the spec's structure: layer ``j`` of block ``i`` is module
``blocks.i.j`` (so ``blocks.0.0.weight``); inside a residual layer its paths are ``body.k``
and ``shortcut.k`` (``blocks.1.0.body.0.weight``). A ``scale`` layer keeps its factor as
the buffer ``blocks.i.j.factor``. These names are the keys of ``scales``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, cast, overload

import torch
from torch import Tensor, nn

from nas.shapes import LayerInfo, ShapeTrace, conv_padding
from nas.spec import (
    ActivationLayer,
    ArchitectureSpec,
    Conv2dLayer,
    DropoutLayer,
    FlattenLayer,
    GlobalAvgPoolLayer,
    GroupNormLayer,
    Init,
    Layer,
    LeakyReluLayer,
    LinearLayer,
    NormLayer,
    PoolLayer,
    ResidualLayer,
    ScaleLayer,
)
from nas.validate import parse_and_trace

__all__ = ["GlobalAvgPool", "PreflightNet", "Residual", "Scale", "SameConv2d", "build_model", "init_variance"]


class Scale(nn.Module):
    """A fixed, untrained multiplier; the factor is a buffer so ``scales`` can reach it."""

    factor: Tensor

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.register_buffer("factor", torch.tensor(float(factor)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.factor


class GlobalAvgPool(nn.Module):
    """[N, C, H, W] -> [N, C]."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(-2, -1))


class Residual(nn.Module):
    """``y = alpha * shortcut(x) + beta * body(x)`` (an empty shortcut is the identity)."""

    def __init__(self, body: nn.Sequential, shortcut: nn.Sequential, alpha: float, beta: float) -> None:
        super().__init__()
        self.body = body
        self.shortcut = shortcut
        self.alpha = alpha
        self.beta = beta

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.alpha * self.shortcut(x) + self.beta * self.body(x)
        return out

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}"


class SameConv2d(nn.Conv2d):
    """A stride-1 conv with an even kernel and "same" padding, padded asymmetrically as
    PyTorch's ``padding="same"`` does, without its per-call warning and input copy."""

    def forward(self, x: Tensor) -> Tensor:
        total = self.kernel_size[0] - 1
        x = nn.functional.pad(x, (total // 2, total - total // 2, total // 2, total - total // 2))
        return super().forward(x)


class PreflightNet(nn.Module):
    """A network built from a v1 spec: a list of blocks, each an ``nn.Sequential``."""

    def __init__(self, spec: ArchitectureSpec, trace: ShapeTrace, blocks: nn.ModuleList) -> None:
        super().__init__()
        self.spec = spec
        self.trace = trace
        self.blocks: nn.ModuleList = blocks

    @overload
    def forward(self, x: Tensor, return_boundaries: Literal[False] = False) -> Tensor: ...
    @overload
    def forward(self, x: Tensor, return_boundaries: Literal[True]) -> tuple[Tensor, list[Tensor]]: ...

    def forward(self, x: Tensor, return_boundaries: bool = False) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Run the network; with ``return_boundaries`` also return every block boundary
        (index 0 is the input, the last is the output)."""
        boundaries = [x]
        for block in self.blocks:
            x = block(x)
            boundaries.append(x)
        return (x, boundaries) if return_boundaries else x

    def weighted_layers(self) -> list[tuple[LayerInfo, nn.Linear | nn.Conv2d]]:
        """(shape info, module) for every linear and conv2d layer, in forward order."""
        return [
            (info, cast(nn.Linear | nn.Conv2d, self.get_submodule(info.module)))
            for info in self.trace.layers
            if info.fan_in is not None
        ]


def init_variance(init: Init, fan_in: int, fan_out: int) -> float:
    """Weight variance of a scheme (spec-format.md), gain included; ``torch_default``:
    PyTorch's uniform default, variance ``1 / (3 fan_in)``."""
    base = {
        "fan_in": 2.0 / fan_in,
        "fan_out": 2.0 / fan_out,
        "arithmetic": 2.0 / ((fan_in + fan_out) / 2.0),
        "geometric": 2.0 / math.sqrt(fan_in * fan_out),
        "torch_default": 1.0 / (3.0 * fan_in),
        "normal": (init.std or 0.0) ** 2,
    }[init.scheme]
    return base * init.gain**2


def build_model(
    spec: ArchitectureSpec | dict[str, Any] | str,
    scales: Mapping[str, float] | None = None,
    seed: int | None = None,
) -> PreflightNet:
    """Build the model a spec describes, initialized by its init schemes.

    ``scales`` maps parameter (or ``scale``-layer buffer) names to multipliers applied to
    the initial values, as the conditioning report returns them. The same ``seed`` gives
    the same weights; ``None`` draws from torch's global generator.

    >>> net = build_model({"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}, seed=0)
    >>> net(torch.zeros(3, 4)).shape
    torch.Size([3, 2])
    """
    spec, trace = parse_and_trace(spec)
    if seed is None:
        return _build(spec, trace, scales)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _build(spec, trace, scales)


def _build(spec: ArchitectureSpec, trace: ShapeTrace, scales: Mapping[str, float] | None) -> PreflightNet:
    infos = trace.by_module()
    blocks = nn.ModuleList(
        _sequence(block.layers, f"blocks.{b}", infos, spec.init) for b, block in enumerate(spec.blocks)
    )
    model = PreflightNet(spec, trace, blocks)
    if scales:
        apply_scales_(model, scales)
    return model


def _sequence(layers: list[Layer], prefix: str, infos: dict[str, LayerInfo], default_init: Init) -> nn.Sequential:
    return nn.Sequential(
        *(_module(layer, infos[f"{prefix}.{i}"], infos, default_init) for i, layer in enumerate(layers))
    )


_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "identity": nn.Identity,
}


def _module(layer: Layer, info: LayerInfo, infos: dict[str, LayerInfo], default_init: Init) -> nn.Module:
    x = info.in_shape
    if isinstance(layer, LinearLayer):
        linear = nn.Linear(x[0], layer.out, bias=layer.bias)
        _init_weighted_(linear, layer.init or default_init)
        return linear
    if isinstance(layer, Conv2dLayer):
        padding = conv_padding(layer)
        even_same = padding == "same" and layer.kernel % 2 == 0
        conv = (SameConv2d if even_same else nn.Conv2d)(
            x[0],
            layer.out,
            layer.kernel,
            stride=layer.stride,
            padding=0 if even_same else padding,
            groups=layer.groups,
            bias=layer.bias,
        )
        _init_weighted_(conv, layer.init or default_init)
        return conv
    if isinstance(layer, NormLayer):
        if layer.type == "layernorm":
            return nn.LayerNorm(list(x))
        return nn.BatchNorm1d(x[0]) if len(x) == 1 else nn.BatchNorm2d(x[0])
    if isinstance(layer, GroupNormLayer):
        return nn.GroupNorm(layer.groups, x[0])
    if isinstance(layer, ActivationLayer):
        return _ACTIVATIONS[layer.type]()
    if isinstance(layer, LeakyReluLayer):
        return nn.LeakyReLU(layer.slope)
    if isinstance(layer, PoolLayer):
        pool = nn.MaxPool2d if layer.type == "maxpool" else nn.AvgPool2d
        return pool(layer.kernel, stride=layer.effective_stride)
    if isinstance(layer, GlobalAvgPoolLayer):
        return GlobalAvgPool()
    if isinstance(layer, FlattenLayer):
        return nn.Flatten()
    if isinstance(layer, DropoutLayer):
        return nn.Dropout(layer.p)
    if isinstance(layer, ScaleLayer):
        return Scale(layer.factor)
    if isinstance(layer, ResidualLayer):
        return Residual(
            _sequence(layer.body, f"{info.module}.body", infos, default_init),
            _sequence(layer.shortcut, f"{info.module}.shortcut", infos, default_init),
            layer.alpha,
            layer.beta,
        )
    raise TypeError(f"unsupported layer {layer.type!r}")  # unreachable: the union is closed


def _fans(weight: Tensor) -> tuple[int, int]:
    """Fan-in and fan-out of a linear [out, in] or conv [out, in/groups, k, k] weight."""
    receptive = math.prod(weight.shape[2:])
    return weight.shape[1] * receptive, weight.shape[0] * receptive


@torch.no_grad()
def _init_weighted_(layer: nn.Linear | nn.Conv2d, init: Init) -> None:
    if init.scheme == "torch_default":
        layer.reset_parameters()  # PyTorch's own uniform weight and bias
        layer.weight.mul_(init.gain)
        return
    fan_in, fan_out = _fans(layer.weight)
    layer.weight.normal_(0.0, math.sqrt(init_variance(init, fan_in, fan_out)))
    if layer.bias is not None:
        layer.bias.zero_()


@torch.no_grad()
def apply_scales_(model: nn.Module, scales: Mapping[str, float]) -> None:
    """Multiply named parameters / buffers by their factors, in place."""
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    unknown = sorted(set(scales) - set(tensors))
    if unknown:
        raise KeyError(
            f"scales name {unknown[:5]} which are not parameters of this model; "
            f"valid names look like {sorted(tensors)[:3]}"
        )
    for name, factor in scales.items():
        if not math.isfinite(factor):
            raise ValueError(f"scale for {name!r} must be finite, got {factor!r}")
        tensors[name].mul_(factor)

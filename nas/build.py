"""Spec to PyTorch model: deterministic, with documented parameter names and block boundaries.

Parameter names follow the spec's structure: layer ``j`` of block ``i`` is module
``blocks.i.j`` (so ``blocks.0.0.weight``); inside a residual layer its paths are ``body.k``
and ``shortcut.k`` (``blocks.1.0.body.0.weight``). A ``scale`` layer keeps its factor as
the buffer ``blocks.i.j.factor``. A cell's edge from node i to node j is ``edges.e{i}_{j}``
(``blocks.0.0.edges.e0_3.1.weight``; parallel edges ``e0_3_1``...), an attention layer's
projections ``q``, ``k``, ``v`` and ``o``, a ``patch_embed`` its conv ``proj``, a ``pos_embed`` its
tensor ``embedding``. These names
are the keys of ``scales``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast, overload

import torch
from torch import Tensor, nn

from nas.shapes import LayerInfo, ShapeTrace, cell_edge_modules, conv_padding
from nas.spec import (
    ActivationLayer,
    ArchitectureSpec,
    AttentionLayer,
    CellLayer,
    Conv2dLayer,
    DropoutLayer,
    FlattenLayer,
    GlobalAvgPoolLayer,
    GroupNormLayer,
    Init,
    Layer,
    LayerNormLayer,
    LeakyReluLayer,
    LinearLayer,
    NormLayer,
    PatchEmbedLayer,
    PoolLayer,
    PosEmbedLayer,
    ResidualLayer,
    ScaleLayer,
    TokenMeanLayer,
    ZeroLayer,
)
from nas.validate import parse_and_trace

Draw = Literal["gaussian", "orthogonal"]
DRAWS: tuple[Draw, ...] = ("gaussian", "orthogonal")

__all__ = [
    "DRAWS",
    "Cell",
    "Draw",
    "GlobalAvgPool",
    "PatchEmbed",
    "PosEmbed",
    "PreflightNet",
    "Residual",
    "Scale",
    "SameConv2d",
    "SelfAttention",
    "TokenMean",
    "Zero",
    "apply_bias_shifts_",
    "build_model",
    "init_variance",
    "orthogonal_draw_",
]


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


class Zero(nn.Module):
    """Zeros of the input's shape, as ``x * 0`` (NAS-Bench-201's ``none``): the output stays in
    the autograd graph, so a cell whose paths are all zero has a zero Jacobian, not a missing one."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mul(0.0)


class Cell(nn.Module):
    """A DAG cell: node 0 is the input; node j > 0 sums ``edges[name](node i)`` over its incoming
    edges; the output is the last node or the concatenation of nodes 1.. along channels."""

    def __init__(self, nodes: int, plan: list[tuple[int, int, str]], edges: nn.ModuleDict, output: str) -> None:
        super().__init__()
        self.nodes = nodes
        self.plan = sorted(plan, key=lambda e: (e[1], e[0], e[2]))  # (from, to, module name), by target node
        self.edges = edges
        self.output = output

    def forward(self, x: Tensor) -> Tensor:
        values: list[Tensor | None] = [x] + [None] * (self.nodes - 1)
        for source, target, name in self.plan:
            contribution = self.edges[name](values[source])
            current = values[target]
            values[target] = contribution if current is None else current + contribution
        if self.output == "last":
            return cast(Tensor, values[-1])
        return torch.cat([cast(Tensor, v) for v in values[1:]], dim=1)

    def extra_repr(self) -> str:
        return f"nodes={self.nodes}, output={self.output!r}"


class SelfAttention(nn.Module):
    """Multi-head self-attention on [N, T, D]: ``o(softmax(q k^T / sqrt(D / heads)) v)`` per head,
    written out (not ``scaled_dot_product_attention``) so every function transform of the engine
    (vjp, functional_call) sees plain operations."""

    def __init__(self, width: int, heads: int, causal: bool, bias: bool) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.q = nn.Linear(width, width, bias=bias)
        self.k = nn.Linear(width, width, bias=bias)
        self.v = nn.Linear(width, width, bias=bias)
        self.o = nn.Linear(width, width, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        n, t, d = x.shape
        h = self.heads

        def split(y: Tensor) -> Tensor:
            return y.reshape(n, t, h, d // h).transpose(1, 2)  # [N, heads, T, D / heads]

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        logits = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            logits = logits.masked_fill(future, float("-inf"))
        mixed = torch.softmax(logits, dim=-1) @ v
        return cast(Tensor, self.o(mixed.transpose(1, 2).reshape(n, t, d)))

    def extra_repr(self) -> str:
        return f"heads={self.heads}, causal={self.causal}"


class PatchEmbed(nn.Module):
    """[N, C, H, W] to [N, T, out]: ``proj``, a conv with kernel = stride = patch, then the
    positions as tokens (row-major). The conv is a module of its own so that the weighted-layer
    machinery (fans, init, scales, the engine's measurements) sees a plain conv on an image."""

    def __init__(self, channels: int, out: int, patch: int, bias: bool) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, out, patch, stride=patch, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.proj(x)
        return out.flatten(2).transpose(1, 2)


class PosEmbed(nn.Module):
    """Adds a learned [T, D] tensor, drawn N(0, std^2)."""

    def __init__(self, shape: tuple[int, ...], std: float) -> None:
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(shape).normal_(0.0, std))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.embedding


class TokenMean(nn.Module):
    """[N, T, D] -> [N, D]."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=1)


class SameConv2d(nn.Conv2d):
    """A stride-1 conv with an even kernel and "same" padding, padded asymmetrically as
    PyTorch's ``padding="same"`` does, without its per-call warning and input copy."""

    def forward(self, x: Tensor) -> Tensor:
        total = self.kernel_size[0] - 1
        x = nn.functional.pad(x, (total // 2, total - total // 2, total // 2, total - total // 2))
        return super().forward(x)


class PreflightNet(nn.Module):
    """A network built from a spec: a list of blocks, each an ``nn.Sequential``."""

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
        """(shape info, module) for every linear and conv2d layer (an attention layer's projections
        and a patch embedding included), in forward order."""
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
    draw: Draw = "gaussian",
    bias_shifts: Mapping[str, Sequence[float]] | None = None,
) -> PreflightNet:
    """Build the model a spec describes, initialized by its init schemes.

    ``scales`` maps parameter (or ``scale``-layer buffer) names to multipliers applied to
    the initial values, as the conditioning report returns them. The same ``seed`` gives
    the same weights; ``None`` draws from torch's global generator. ``draw``: ``"gaussian"``
    (the schemes as written) or ``"orthogonal"``: each weight replaced by the orthogonal
    factor of its Gaussian draw, at the same Frobenius norm (``orthogonal_draw_``); a report
    names the draw its scales were tuned on (``report.environment.draw``). ``bias_shifts`` maps
    bias names to per-channel values added after the scales (``report.bias_shifts``, the engine's
    centering); ``report.build_model(spec)`` passes all four.

    >>> net = build_model({"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}, seed=0)
    >>> net(torch.zeros(3, 4)).shape
    torch.Size([3, 2])
    """
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {list(DRAWS)}, got {draw!r}")
    if seed is not None:
        seed = _checked_seed(seed)
    spec, trace = parse_and_trace(spec)
    if seed is None:
        model = _build(spec, trace, scales, draw)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = _build(spec, trace, scales, draw)
    if bias_shifts:
        apply_bias_shifts_(model, bias_shifts)
    return model


def _build(spec: ArchitectureSpec, trace: ShapeTrace, scales: Mapping[str, float] | None, draw: Draw) -> PreflightNet:
    infos = trace.by_module()
    blocks = nn.ModuleList(
        _sequence(block.layers, f"blocks.{b}", infos, spec.init) for b, block in enumerate(spec.blocks)
    )
    model = PreflightNet(spec, trace, blocks)
    if draw == "orthogonal":
        orthogonal_draw_(model)
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
        linear = nn.Linear(x[-1], layer.out, bias=layer.bias)
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
        return nn.BatchNorm1d(x[0]) if len(x) == 1 else nn.BatchNorm2d(x[0])
    if isinstance(layer, LayerNormLayer):
        return nn.LayerNorm(x[-1] if layer.over == "last" else list(x))
    if isinstance(layer, GroupNormLayer):
        return nn.GroupNorm(layer.groups, x[0])
    if isinstance(layer, ActivationLayer):
        return _ACTIVATIONS[layer.type]()
    if isinstance(layer, LeakyReluLayer):
        return nn.LeakyReLU(layer.slope)
    if isinstance(layer, PoolLayer):
        if layer.type == "maxpool":
            return nn.MaxPool2d(layer.kernel, stride=layer.effective_stride, padding=layer.padding)
        return nn.AvgPool2d(layer.kernel, stride=layer.effective_stride, padding=layer.padding, count_include_pad=False)
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
    if isinstance(layer, ZeroLayer):
        return Zero()
    if isinstance(layer, AttentionLayer):
        attention = SelfAttention(x[-1], layer.heads, layer.causal, layer.bias)
        for projection in (attention.q, attention.k, attention.v, attention.o):
            _init_weighted_(projection, layer.init or default_init)
        return attention
    if isinstance(layer, PatchEmbedLayer):
        patch = PatchEmbed(x[0], layer.out, layer.patch, layer.bias)
        _init_weighted_(patch.proj, layer.init or default_init)
        return patch
    if isinstance(layer, PosEmbedLayer):
        return PosEmbed(x, layer.std)
    if isinstance(layer, TokenMeanLayer):
        return TokenMean()
    if isinstance(layer, CellLayer):
        names = cell_edge_modules(layer, default_init)
        edges = nn.ModuleDict(
            {
                name: _sequence(edge.op, f"{info.module}.edges.{name}", infos, default_init)
                for name, edge in sorted(zip(names, layer.edges, strict=True), key=lambda p: p[0])
            }
        )
        plan = [(edge.source, edge.to, name) for name, edge in zip(names, layer.edges, strict=True)]
        return Cell(layer.nodes, plan, edges, layer.output)
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
def orthogonal_draw_(model: PreflightNet) -> None:
    """Replace every weight W (flattened to [out, fan_in]) by its orthogonal polar factor U V^T,
    rescaled to W's own Frobenius norm: all singular values equal, the scheme's scale kept.

    The polar factor of a Gaussian matrix is Haar-distributed, so this is the orthogonal
    initialization of Saxe et al. (2014) at the scheme's variance, drawn from the same seed
    with no further random numbers; the tuner's multipliers then mean what they mean on the
    Gaussian draw (a second moment), while the spectrum is flat (the isometry LSUV starts from).
    """
    for _, layer in model.weighted_layers():
        w = layer.weight
        flat = w.reshape(w.shape[0], -1).double()
        u, _, vh = torch.linalg.svd(flat, full_matrices=False)
        polar = u @ vh
        factor = flat.norm() / polar.norm().clamp_min(1e-300)
        w.copy_((polar * factor).reshape(w.shape).to(w.dtype))


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


def _checked_seed(seed: Any) -> int:
    """``seed`` as an int in torch's range [0, 2**64), or a ValueError: torch would take -1 as
    2**64 - 1 and 1.5 or "3" would fail deep inside it (numpy's integers are integers)."""
    try:
        value = operator.index(seed) if not isinstance(seed, bool) else None
    except TypeError:
        value = None
    if value is None or not 0 <= value < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
    return value


@torch.no_grad()
def apply_bias_shifts_(model: nn.Module, shifts: Mapping[str, Sequence[float]]) -> None:
    """Add per-channel values to named biases, in place (after the scales: the centering's
    shifts are measured on the scaled network). A name must end in ``bias``: a norm's weight is a
    vector too, and shifting it would rescale the layer."""
    tensors = {n: t for n, t in model.named_parameters() if n.rsplit(".", 1)[-1] == "bias" and t.dim() == 1}
    for name, values in shifts.items():
        bias = tensors.get(name)
        if bias is None:
            raise KeyError(
                f"bias_shifts name {name!r}, which is not a bias of this model; "
                f"valid names look like {sorted(tensors)[:3]}"
            )
        if len(values) != bias.numel():
            raise ValueError(f"bias_shifts[{name!r}] has {len(values)} values for {bias.numel()} channels")
        shift = torch.tensor([float(v) for v in values], dtype=torch.float64)
        if not bool(torch.isfinite(shift).all()):
            raise ValueError(f"bias_shifts[{name!r}] must be finite")
        bias.add_(shift.to(device=bias.device, dtype=bias.dtype))  # the model may live on a GPU

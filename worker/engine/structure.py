"""What AutoInit may tune in a spec, and which block boundaries it tunes between.

A *gain* is one layer whose output a scalar multiplier scales: a linear or conv layer
(a_W, with a_b = a_W so the layer's bias-to-weight ratio is the spec's), a norm layer's
affine (weight and bias together) or a ``scale`` layer's factor. Three structural facts
decide how the tuner treats them (issue 3, "Pitfalls"):

* **Scale invariance.** A gain whose output reaches a normalization layer through only
  positively homogeneous, parameter-free layers (ReLU, leaky ReLU, identity, dropout,
  pooling, flatten) or other gains changes no Jacobian: BatchNorm / LayerNorm / GroupNorm
  divide the scale out. Its multiplier is held at 1 instead of drifting on noise.
* **Parameter-free reductions.** Average pooling over k x k has APJN 1/k^2 and global
  average pooling over H x W has 1/(H W), whatever the initialization; max pooling and
  flatten have exactly 1. A block's APJN target is that reduction factor rho, not 1.
* **Block-cut invariance.** Blocks without a tunable gain (``[relu]``, ``[maxpool]``) are
  merged with the preceding tunable block (or the next one, at the start) into one tuning
  *unit*, whose APJN is the product of its blocks' (factorisation, AutoInit eq. 6). The
  same layers cut into blocks differently then give units with the same targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nas.build import PreflightNet
from nas.spec import Layer, ResidualLayer

__all__ = ["Gain", "TuningUnit", "analyse", "block_log_rho"]

_WEIGHTED = ("linear", "conv2d")
_NORMS = ("batchnorm", "layernorm", "groupnorm")
_HOMOGENEOUS_FREE = ("relu", "leaky_relu", "identity", "dropout", "maxpool", "avgpool", "global_avgpool", "flatten")
_NON_HOMOGENEOUS = ("gelu", "silu", "tanh", "sigmoid")


@dataclass(frozen=True)
class Gain:
    """One tunable layer: its tensors share one multiplier ``exp(fraction * u_unit)``."""

    module: str
    kind: str  # "weighted", "norm" or "scale"
    tensors: tuple[str, ...]
    invariant: bool
    fraction: float  # share of the unit's log-gain u carried by this layer (0 if invariant)


@dataclass(frozen=True)
class TuningUnit:
    """Consecutive blocks tuned by one log-gain ``u`` (J scales as exp(2u) when exact)."""

    blocks: tuple[int, ...]
    gains: tuple[Gain, ...]
    depth: int  # non-invariant gains in series (max over residual paths)
    exact: bool  # J_unit(u) = exp(2u) J_unit(0) exactly: positively homogeneous, equal path depths
    log_rho: float  # log APJN of the unit's parameter-free reductions
    resets_scale: bool  # contains a top-level normalization: the forward scale restarts here
    pools: tuple[str, ...] = ()  # top-level pooling modules: their effect on K is measured
    homogeneous: bool = True  # only positively homogeneous activations: J's elasticity <= 2

    @property
    def tunable(self) -> bool:
        return self.depth > 0


@dataclass
class _Walk:
    """Per-layer facts gathered in one pass."""

    gains: list[tuple[int, str, str, tuple[str, ...], bool, float]]  # block, module, kind, tensors, inv, frac
    log_rho: list[float]
    exact: list[bool]
    resets: list[bool]
    pools: list[list[str]] = field(default_factory=list)
    nonhom: list[bool] = field(default_factory=list)


def analyse(model: PreflightNet) -> list[TuningUnit]:
    """Gains, invariances, reduction factors and tuning units of a built spec model."""
    walk, depth = _walk(model)
    return _units(walk, depth, len(model.spec.blocks))


def block_log_rho(model: PreflightNet) -> list[float]:
    """Per block: log APJN of its parameter-free reductions (0 where it has none)."""
    return _walk(model)[0].log_rho


def _walk(model: PreflightNet) -> tuple[_Walk, list[int]]:
    names = set(dict(model.named_parameters())) | set(dict(model.named_buffers()))
    spec = model.spec
    n = len(spec.blocks)
    walk = _Walk(gains=[], log_rho=[0.0] * n, exact=[True] * n, resets=[False] * n, pools=[[] for _ in range(n)])
    flat = [
        (b, f"blocks.{b}.{j}", layer) for b, block in enumerate(spec.blocks) for j, layer in enumerate(block.layers)
    ]
    infos = model.trace.by_module()
    invariant = _invariant_flags([layer for _, _, layer in flat])
    per_block_depth = [0] * n
    per_block_residual_unequal = [False] * n
    for (b, module, layer), inv in zip(flat, invariant, strict=True):
        walk.log_rho[b] += _log_rho(layer, infos[module].in_shape)
        if layer.type in _NON_HOMOGENEOUS:
            walk.exact[b] = False
        if layer.type in _NORMS:
            walk.resets[b] = True
        if layer.type in ("avgpool", "maxpool", "global_avgpool"):
            walk.pools[b].append(module)
        if isinstance(layer, ResidualLayer):
            d, unequal, sub = _residual(layer, module, names, infos)
            per_block_depth[b] += d
            per_block_residual_unequal[b] |= unequal
            walk.gains.extend((b, *g) for g in sub)
            continue
        gain = _gain(layer, module, names, inv)
        if gain is not None:
            walk.gains.append((b, *gain))
            per_block_depth[b] += 0 if inv else 1
    walk.nonhom = [_has_non_homogeneous_nested(spec.blocks[b].layers) for b in range(n)]
    for b in range(n):
        walk.exact[b] = walk.exact[b] and not per_block_residual_unequal[b] and not walk.nonhom[b]
    return walk, per_block_depth


def _units(walk: _Walk, depth: list[int], n: int) -> list[TuningUnit]:
    groups: list[list[int]] = []
    pending: list[int] = []
    for b in range(n):
        if depth[b] > 0:
            groups.append(pending + [b])
            pending = []
        elif groups:
            groups[-1].append(b)
        else:
            pending.append(b)
    if pending:  # nothing tunable at all: one untunable unit
        groups.append(pending)
    units = []
    for blocks in groups:
        total = sum(depth[b] for b in blocks)
        gains = tuple(
            Gain(module, kind, tensors, inv, 0.0 if inv or total == 0 else frac / total)
            for b, module, kind, tensors, inv, frac in walk.gains
            if b in blocks
        )
        units.append(
            TuningUnit(
                blocks=tuple(blocks),
                gains=gains,
                depth=total,
                exact=all(walk.exact[b] for b in blocks),
                log_rho=sum(walk.log_rho[b] for b in blocks),
                resets_scale=any(walk.resets[b] for b in blocks),
                pools=tuple(m for b in blocks for m in walk.pools[b]),
                homogeneous=not any(walk.nonhom[b] for b in blocks),
            )
        )
    return units


def _invariant_flags(layers: list[Layer]) -> list[bool]:
    """A gain is scale-invariant when the next layer that is neither a gain nor a positively
    homogeneous parameter-free layer is a normalization."""
    flags = [False] * len(layers)
    for i, layer in enumerate(layers):
        if not _is_gain(layer):
            continue
        for nxt in layers[i + 1 :]:
            if nxt.type in _NORMS:
                flags[i] = True
                break
            if nxt.type in _HOMOGENEOUS_FREE or _is_gain(nxt):
                continue
            break
    return flags


def _is_gain(layer: Layer) -> bool:
    return layer.type in _WEIGHTED or layer.type in _NORMS or layer.type == "scale"


def _gain(
    layer: Layer, module: str, names: set[str], invariant: bool
) -> tuple[str, str, tuple[str, ...], bool, float] | None:
    if not _is_gain(layer):
        return None
    kind = "weighted" if layer.type in _WEIGHTED else "norm" if layer.type in _NORMS else "scale"
    suffixes = ("factor",) if kind == "scale" else ("weight", "bias")
    tensors = tuple(f"{module}.{s}" for s in suffixes if f"{module}.{s}" in names)
    return (module, kind, tensors, invariant, 1.0)


def _residual(
    layer: ResidualLayer, module: str, names: set[str], infos: dict
) -> tuple[int, bool, list[tuple[str, str, tuple[str, ...], bool, float]]]:
    """Depth of a residual layer (the max of its paths' depths) and its gains, weighted so
    that every path sums to that depth: a projection shortcut scales with the body."""
    paths: list[tuple[float, list[tuple[str, str, tuple[str, ...], bool, float]]]] = []
    unequal = False
    for path_name, layers in (("body", layer.body), ("shortcut", layer.shortcut)):
        inv = _invariant_flags(layers)
        gains: list[tuple[str, str, tuple[str, ...], bool, float]] = []
        depth = 0.0
        for k, (sub, sub_inv) in enumerate(zip(layers, inv, strict=True)):
            sub_module = f"{module}.{path_name}.{k}"
            if isinstance(sub, ResidualLayer):
                d, sub_unequal, nested = _residual(sub, sub_module, names, infos)
                unequal |= sub_unequal
                gains.extend(nested)
                depth += d
                continue
            g = _gain(sub, sub_module, names, sub_inv)
            if g is not None:
                gains.append(g)
                depth += 0.0 if sub_inv else 1.0
        paths.append((depth, gains))
    top = max(d for d, _ in paths)
    out = [(m, kd, t, i, 0.0 if i or d == 0 else w * top / d) for d, gains in paths for m, kd, t, i, w in gains]
    unequal |= paths[0][0] != paths[1][0]
    return int(round(top)), unequal and top > 0, out


def _log_rho(layer: Layer, in_shape: tuple[int, ...]) -> float:
    """log APJN of a parameter-free reduction (1/k^2 for average pooling, 1/(H W) for global
    average pooling); 0 for everything else, max pooling included."""
    if layer.type == "avgpool":
        return -2.0 * math.log(layer.kernel)  # type: ignore[union-attr]
    if layer.type == "global_avgpool":
        return -math.log(in_shape[1] * in_shape[2])
    if isinstance(layer, ResidualLayer):
        a2, b2 = layer.alpha**2, layer.beta**2
        rs = math.exp(sum(_log_rho(s, in_shape) for s in layer.shortcut))
        rb = math.exp(sum(_log_rho(s, in_shape) for s in layer.body))
        return math.log((a2 * rs + b2 * rb) / (a2 + b2)) if a2 + b2 > 0 else 0.0
    return 0.0


def _has_non_homogeneous_nested(layers: list[Layer]) -> bool:
    for layer in layers:
        if layer.type in _NON_HOMOGENEOUS:
            return True
        if isinstance(layer, ResidualLayer) and (
            _has_non_homogeneous_nested(layer.body) or _has_non_homogeneous_nested(layer.shortcut)
        ):
            return True
    return False

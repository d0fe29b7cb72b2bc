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
from nas.shapes import cell_edge_modules
from nas.spec import CellLayer, Init, Layer, ResidualLayer

__all__ = ["Gain", "TuningUnit", "analyse", "block_log_rho"]

_WEIGHTED = ("linear", "conv2d", "patch_embed")
_NORMS = ("batchnorm", "layernorm", "groupnorm")
_HOMOGENEOUS_FREE = (
    "relu",
    "leaky_relu",
    "identity",
    "dropout",
    "maxpool",
    "avgpool",
    "global_avgpool",
    "flatten",
    "token_mean",
    "zero",
)
_NON_HOMOGENEOUS = ("gelu", "silu", "tanh", "sigmoid", "attention")
# (module, kind, tensors, invariant, weight): a gain found in a walk, before its unit's fractions
_Found = tuple[str, str, tuple[str, ...], bool, float]


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
    # a unit whose branch scale ignores its input's (``_stream``): d log(branch^2) / du, else 0,
    # and the APJN of its parameter-free routes (1: the identity of a pre-norm residual; 0: none)
    stream: float = 0.0
    stream_floor: float = 1.0

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
    stream: list[tuple[float, float]] = field(default_factory=list)


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
    infos = model.trace.by_module()
    per_block_depth = [0] * n
    # invariance looks across block boundaries: a gain whose output reaches the next block's
    # normalization through homogeneous layers and gains is scale-invariant too
    flat = _invariant_flags([layer for block in spec.blocks for layer in block.layers])
    offsets = [0]
    for block in spec.blocks:
        offsets.append(offsets[-1] + len(block.layers))
    for b, block in enumerate(spec.blocks):
        for j, layer in enumerate(block.layers):
            module = f"blocks.{b}.{j}"
            walk.log_rho[b] += _log_rho(layer, infos[module].in_shape)
            if layer.type in _NON_HOMOGENEOUS:
                walk.exact[b] = False
            if layer.type in _NORMS:
                walk.resets[b] = True
            if layer.type in ("avgpool", "maxpool", "global_avgpool"):
                walk.pools[b].append(module)
        path = _sequence(block.layers, f"blocks.{b}", names, spec.init, flat[offsets[b] : offsets[b + 1]])
        per_block_depth[b] = int(round(path.depth))
        walk.gains.extend((b, *g) for g in path.gains)
        walk.exact[b] = walk.exact[b] and not (path.unequal and path.depth > 0)
    walk.nonhom = [_has_non_homogeneous_nested(spec.blocks[b].layers) for b in range(n)]
    walk.stream = [_stream(spec.blocks[b].layers, per_block_depth[b]) for b in range(n)]
    for b in range(n):
        walk.exact[b] = walk.exact[b] and not walk.nonhom[b]
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
                stream=walk.stream[blocks[0]][0] if len(blocks) == 1 else 0.0,
                stream_floor=walk.stream[blocks[0]][1] if len(blocks) == 1 else 1.0,
            )
        )
    return units


def _invariant_flags(layers: list[Layer]) -> list[bool]:
    """A gain is scale-invariant when the next layer that is neither a gain nor a positively
    homogeneous parameter-free layer is a normalization. An attention layer's own gains (its
    value and output projections) follow the rule; a gain before it does not see through it
    (the softmax of its logits is not homogeneous in its input)."""
    flags = [False] * len(layers)
    for i, layer in enumerate(layers):
        if not (_is_gain(layer) or layer.type == "attention"):
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


def _gains(layer: Layer, module: str, names: set[str], invariant: bool) -> list[_Found]:
    """A layer's own gains: one for a weighted, norm or scale layer (a patch embedding's is its
    conv ``proj``); two in series for attention, its value and output projections (the output is
    linear in each); none otherwise. Attention's query and key projections set the softmax's
    temperature, not the branch's scale: they are not gains and stay at the spec's init."""
    if layer.type == "attention":
        return [
            (f"{module}.{p}", "weighted", _tensors(f"{module}.{p}", ("weight", "bias"), names), invariant, 1.0)
            for p in ("v", "o")
        ]
    if not _is_gain(layer):
        return []
    kind = "weighted" if layer.type in _WEIGHTED else "norm" if layer.type in _NORMS else "scale"
    owner = f"{module}.proj" if layer.type == "patch_embed" else module
    suffixes = ("factor",) if kind == "scale" else ("weight", "bias")
    return [(owner, kind, _tensors(owner, suffixes, names), invariant, 1.0)]


def _tensors(module: str, suffixes: tuple[str, ...], names: set[str]) -> tuple[str, ...]:
    return tuple(f"{module}.{s}" for s in suffixes if f"{module}.{s}" in names)


@dataclass
class _Path:
    """Layers in series: non-invariant gains along the deepest route, and whether parallel routes
    (residual paths, cell edges) differ in depth (then J is not exactly exp(2u) J(0))."""

    depth: float
    unequal: bool
    gains: list[_Found]


def _sequence(layers: list[Layer], prefix: str, names: set[str], init: Init, flags: list[bool] | None = None) -> _Path:
    path = _Path(0.0, False, [])
    flags = _invariant_flags(layers) if flags is None else flags
    for k, (layer, invariant) in enumerate(zip(layers, flags, strict=True)):
        module = f"{prefix}.{k}"
        if isinstance(layer, (ResidualLayer, CellLayer)):
            sub = (
                _residual(layer, module, names, init)
                if isinstance(layer, ResidualLayer)
                else _cell(layer, module, names, init)
            )
            path.depth += sub.depth
            path.unequal |= sub.unequal
            path.gains.extend(sub.gains)
            continue
        for gain in _gains(layer, module, names, invariant):
            path.gains.append(gain)
            path.depth += 0.0 if invariant else 1.0
        if layer.type == "attention":
            path.gains.extend(_temperature_compensation(layers[:k], prefix, module, names))
    return path


def _temperature_compensation(before: list[Layer], prefix: str, module: str, names: set[str]) -> list[_Found]:
    """Gains right before an attention layer (a pre-LN branch's LayerNorm affine, a projection),
    reached through positively homogeneous layers, scale its input, and so its logits twice over.
    Its query and key projections get the opposite share of the unit's log-gain, so the tuned
    temperature (``worker.engine.attention``) holds whatever u becomes: the logits are unchanged
    while the values and the output move with the unit."""
    flags = _invariant_flags(before)
    weight = 0.0
    for k in range(len(before) - 1, -1, -1):
        layer = before[k]
        if _is_gain(layer):
            weight += 0.0 if flags[k] else 1.0
        elif layer.type not in _HOMOGENEOUS_FREE:
            break
    if weight == 0.0:
        return []
    return [
        (f"{module}.{p}", "weighted", _tensors(f"{module}.{p}", ("weight", "bias"), names), False, -weight)
        for p in ("q", "k")
    ]


def _reweighted(path: _Path, depth: float) -> list[_Found]:
    """A route's gains, weighted so that the route carries ``depth`` of the log-gain in all."""
    return [(m, k, t, inv, 0.0 if inv or path.depth == 0 else w * depth / path.depth) for m, k, t, inv, w in path.gains]


def _residual(layer: ResidualLayer, module: str, names: set[str], init: Init) -> _Path:
    """Depth of a residual layer (the max of its paths' depths) and its gains, weighted so
    that every path sums to that depth: a projection shortcut scales with the body."""
    paths = [
        _sequence(layer.body, f"{module}.body", names, init),
        _sequence(layer.shortcut, f"{module}.shortcut", names, init),
    ]
    top = max(p.depth for p in paths)
    unequal = any(p.unequal for p in paths) or paths[0].depth != paths[1].depth
    return _Path(float(round(top)), unequal and top > 0, [g for p in paths for g in _reweighted(p, top)])


def _cell(cell: CellLayer, module: str, names: set[str], init: Init) -> _Path:
    """A cell's nodes sum their edges, so their second moments (and Jacobians) add. Each node j
    gets a potential phi_j, the deepest live route from the input; an edge i -> j carries
    phi_j - phi_i of the log-gain over its own gains, so every live route to the output scales
    alike. Zero edges, and edges out of a node only zero edges feed, carry no signal: their
    gains change no Jacobian and are held at 1 (as invariant), and they do not count as routes."""
    labels = cell_edge_modules(cell, init)
    edges = [
        (e.source, e.to, _sequence(e.op, f"{module}.edges.{label}", names, init), any(op.type == "zero" for op in e.op))
        for e, label in zip(cell.edges, labels, strict=True)
    ]
    live = [True] + [False] * (cell.nodes - 1)
    phi = [0.0] * cell.nodes
    for j in range(1, cell.nodes):
        into = [(i, p) for i, t, p, zero in edges if t == j and live[i] and not zero]
        live[j] = bool(into)
        phi[j] = max((phi[i] + p.depth for i, p in into), default=0.0)
    gains: list[_Found] = []
    unequal = False
    for i, j, p, zero in edges:
        if zero or not live[i]:
            gains.extend((m, k, t, True, 0.0) for m, k, t, _, _ in p.gains)
            continue
        need = phi[j] - phi[i]
        unequal |= p.unequal or (p.depth == 0 and need > 0)
        gains.extend(_reweighted(p, need))
    outputs = [cell.nodes - 1] if cell.output == "last" else [j for j in range(1, cell.nodes) if live[j]]
    depth = max((phi[j] for j in outputs if live[j]), default=0.0)
    unequal |= len({phi[j] for j in outputs if live[j]}) > 1
    return _Path(float(round(depth)), unequal and depth > 0, gains)


def _log_rho(layer: Layer, in_shape: tuple[int, ...]) -> float:
    """log APJN of a parameter-free reduction (1/k^2 for average pooling, 1/(H W) for global
    average pooling); 0 for everything else, max pooling included."""
    if layer.type == "avgpool":
        return -2.0 * math.log(layer.kernel)  # type: ignore[union-attr]
    if layer.type == "global_avgpool":
        return -math.log(in_shape[1] * in_shape[2])
    if layer.type == "token_mean":
        return -math.log(in_shape[0])  # the mean over T tokens, as global average pooling over H W
    if isinstance(layer, ResidualLayer):
        a2, b2 = layer.alpha**2, layer.beta**2
        rs = math.exp(sum(_log_rho(s, in_shape) for s in layer.shortcut))
        rb = math.exp(sum(_log_rho(s, in_shape) for s in layer.body))
        return math.log((a2 * rs + b2 * rb) / (a2 + b2)) if a2 + b2 > 0 else 0.0
    return 0.0


def _stream(layers: list[Layer], depth: int) -> tuple[float, float]:
    """Blocks whose added branch does not depend on the scale of their input: J = A + B e^(c u) /
    K_in, so J depends on every upstream gain through K_in, and tuning all units at once (a
    Jacobi step) chases its own tail. The tuner then uses that model (``worker.engine.autoinit``).
    Returns (c, A), or (0, 1) for any other block:

    * a block of pre-norm residual layers ``x + f(x)``, ``f`` starting with a normalization (a
      pre-LN transformer block): A = 1 (the identity), c = 2 x the branches' share of the depth;
    * a cell whose every live edge out of its input starts with a normalization before any
      non-homogeneous layer (NAS-Bench-201's ReLU-conv-BN edges): its output ignores the input's
      scale, A = 0, and c = 2 (route potentials give every route the whole log-gain).

    Only for these format 1.1 structures: post-norm and BatchNorm residual CNNs follow the same
    model but keep the Jacobi step until the benchmark has measured the change on them."""
    if depth == 0:
        return 0.0, 1.0
    if len(layers) == 1 and isinstance(layers[0], CellLayer):
        cell = layers[0]
        out_of_input = [e for e in cell.edges if e.source == 0 and not any(op.type == "zero" for op in e.op)]
        return (2.0, 0.0) if out_of_input and all(_normalizes(e.op) for e in out_of_input) else (0.0, 1.0)
    if not any(layer.type == "attention" for r in layers if isinstance(r, ResidualLayer) for layer in r.body):
        return 0.0, 1.0
    shares = []
    for layer in layers:
        if not (isinstance(layer, ResidualLayer) and not layer.shortcut and layer.body[0].type in _NORMS):
            return 0.0, 1.0
        gains = sum(2.0 if sub.type == "attention" else 1.0 if _is_gain(sub) else 0.0 for sub in layer.body)
        shares.append(gains / depth)
    return 2.0 * sum(shares) / len(shares), 1.0


def _normalizes(layers: list[Layer]) -> bool:
    """The sequence's output ignores its input's scale: a normalization comes before anything
    that is neither a gain nor a positively homogeneous parameter-free layer."""
    for layer in layers:
        if layer.type in _NORMS:
            return True
        if not (_is_gain(layer) or layer.type in _HOMOGENEOUS_FREE):
            return False
    return False


def _has_non_homogeneous_nested(layers: list[Layer]) -> bool:
    for layer in layers:
        if layer.type in _NON_HOMOGENEOUS:
            return True
        if isinstance(layer, ResidualLayer) and (
            _has_non_homogeneous_nested(layer.body) or _has_non_homogeneous_nested(layer.shortcut)
        ):
            return True
        if isinstance(layer, CellLayer) and any(_has_non_homogeneous_nested(e.op) for e in layer.edges):
            return True
    return False

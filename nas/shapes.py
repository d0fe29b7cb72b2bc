"""Shape inference through every layer of a spec, with parameter and MAC counts.

One walk serves validation (impossible specs are rejected with the JSON path), the limits
check (done before anything is allocated), the model summary and the builder (which reads
each layer's input shape from here instead of inferring it again).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from nas.canonical import canonical_ops_json
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
    SpecError,
    TokenMeanLayer,
    ZeroLayer,
    needs_v11,
)

__all__ = ["ATTENTION_PROJECTIONS", "LayerInfo", "ShapeTrace", "cell_edge_modules", "conv_padding", "trace_shapes"]

Shape = tuple[int, ...]

# An attention layer's projections, as child modules of the layer (q, k, v: D -> D; o: the output);
# a patch embedding's conv is its child "proj"
ATTENTION_PROJECTIONS = ("q", "k", "v", "o")
# Nested residuals and cells deeper than this are almost certainly a malformed generator, and would
# make every recursive walk (pydantic, this one, the builder) deep.
MAX_NESTING = 16


@dataclass(frozen=True)
class LayerInfo:
    """What one layer does to shapes, where it sits in the JSON and in the module tree."""

    path: str  # JSON path, e.g. "blocks[2].layers[0] (residual).body[1]"
    module: str  # module name in the built model, e.g. "blocks.2.0.body.1"
    type: str
    block: int
    in_shape: Shape
    out_shape: Shape
    parameters: int
    macs: int  # multiply-accumulates for one sample
    fan_in: int | None  # weighted layers only
    fan_out: int | None
    internal_elements: int = 0  # per sample, kept for backward beyond the output (attention scores, cell nodes)


@dataclass(frozen=True)
class ShapeTrace:
    """Every layer in forward order (residual containers before their children)."""

    layers: tuple[LayerInfo, ...]
    boundaries: tuple[Shape, ...]  # boundary 0 is the input, the last is the output

    @property
    def parameters(self) -> int:
        return sum(info.parameters for info in self.layers)

    @property
    def macs(self) -> int:
        return sum(info.macs for info in self.layers)

    @property
    def activation_elements(self) -> int:
        """Elements one sample keeps alive for a backward pass (every layer's output)."""
        return math.prod(self.boundaries[0]) + sum(math.prod(i.out_shape) + i.internal_elements for i in self.layers)

    def by_module(self) -> dict[str, LayerInfo]:
        return {info.module: info for info in self.layers}


# a normalization over one value outputs 0 (then its bias) whatever its input: the network cannot learn
_CONSTANT_NORM = "normalizes {what} over 1 value, so its output is constant and nothing before it can learn; {fewer}"


def conv_padding(layer: Conv2dLayer) -> int | str:
    """The padding a conv layer uses (``Conv2dLayer.effective_padding``)."""
    return layer.effective_padding


@dataclass(frozen=True)
class _Context:
    v11: bool  # the spec says format 1.1
    init: Init  # the spec-wide init, which the canonical form of a cell's ops resolves
    too_deep: bool = False  # the trace will refuse the nesting: a cell's edge names are not worth computing


def cell_edge_modules(cell: CellLayer, default_init: Init) -> list[str]:
    """The module name of each edge of a cell, in the spec's listing order: ``e{from}_{to}``,
    with ``_1``, ``_2``... for parallel edges, numbered in a canonical order of their ops, so that
    the names (the keys of ``scales``) do not depend on the order the edges are listed in, as the
    canonical hash does not."""
    parallel = Counter((e.source, e.to) for e in cell.edges)
    keys = [  # only parallel edges need their ops' canonical form, which walks each op's whole subtree
        (
            e.source,
            e.to,
            canonical_ops_json(e.op, default_init) if parallel[e.source, e.to] > 1 else "",
        )
        for e in cell.edges
    ]
    names: list[str] = [""] * len(keys)
    seen: dict[tuple[int, int], int] = {}
    for i in sorted(range(len(keys)), key=lambda i: keys[i]):
        pair = keys[i][:2]
        n = seen.get(pair, 0)
        seen[pair] = n + 1
        names[i] = f"e{pair[0]}_{pair[1]}" + (f"_{n}" if n else "")
    return names


def trace_shapes(spec: ArchitectureSpec) -> ShapeTrace:
    """Infer every layer's shapes; raise SpecError naming the first impossible layer (or the
    first layer that needs format 1.1 in a 1.0 spec)."""
    layers: list[LayerInfo] = []
    shape: Shape = tuple(spec.input_shape)
    boundaries = [shape]
    ctx = _Context(v11=spec.format == "1.1", init=spec.init, too_deep=_nesting(spec) > MAX_NESTING)
    for b, block in enumerate(spec.blocks):
        shape = _trace_sequence(block.layers, shape, f"blocks[{b}].layers", f"blocks.{b}", b, layers, 0, ctx)
        boundaries.append(shape)
    return ShapeTrace(layers=tuple(layers), boundaries=tuple(boundaries))


def _nesting(spec: ArchitectureSpec) -> int:
    """How many cells and residual layers the deepest layer sits in (0: none), walked without
    recursion: a spec nested past MAX_NESTING is refused by the trace, and naming its cells' edges
    first cost seconds (each level's names walked the whole subtree below it)."""
    deepest = 0
    stack: list[tuple[list[Layer], int]] = [(block.layers, 0) for block in spec.blocks]
    while stack:
        sequence, depth = stack.pop()
        for layer in sequence:
            if isinstance(layer, CellLayer):
                deepest = max(deepest, depth + 1)
                stack.extend((edge.op, depth + 1) for edge in layer.edges)
            elif isinstance(layer, ResidualLayer):
                deepest = max(deepest, depth + 1)
                stack.extend(((layer.body, depth + 1), (layer.shortcut, depth + 1)))
    return deepest


def _trace_sequence(
    sequence: list[Layer],
    shape: Shape,
    path: str,
    module: str,
    block: int,
    out: list[LayerInfo],
    depth: int,
    ctx: _Context,
) -> Shape:
    for i, layer in enumerate(sequence):
        shape = _trace_layer(layer, shape, f"{path}[{i}]", f"{module}.{i}", block, out, depth, ctx)
    return shape


def _trace_layer(
    layer: Layer, x: Shape, path: str, module: str, block: int, out: list[LayerInfo], depth: int, ctx: _Context
) -> Shape:
    label = f"{path} ({layer.type})"

    def fail(reason: str) -> SpecError:
        return SpecError.at(label, reason)

    if not ctx.v11 and (feature := needs_v11(layer)):
        raise fail(f'{feature} needs spec format 1.1; add "format": "1.1" at the top of the spec')

    def record(y: Shape, parameters: int = 0, macs: int = 0, fans: tuple[int, int] | None = None) -> Shape:
        fan_in, fan_out = fans if fans else (None, None)
        out.append(LayerInfo(label, module, layer.type, block, x, y, parameters, macs, fan_in, fan_out))
        return y

    if isinstance(layer, LinearLayer):
        if len(x) == 2 and not ctx.v11:
            raise fail('a linear layer on a sequence [T, D] needs spec format 1.1; add "format": "1.1"')
        if len(x) not in (1, 2):
            accepted = "a vector [D] or a sequence [T, D]" if ctx.v11 else "a vector input"
            raise fail(f"expects {accepted} but receives {list(x)}; add a flatten or global_avgpool")
        d, tokens = x[-1], (x[0] if len(x) == 2 else 1)
        params = d * layer.out + (layer.out if layer.bias else 0)
        return record((*x[:-1], layer.out), params, tokens * d * layer.out, (d, layer.out))

    if isinstance(layer, Conv2dLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        c, h, w = x
        if c % layer.groups:
            raise fail(f"groups={layer.groups} must divide the {c} input channels")
        pad = conv_padding(layer)
        if pad == "same":
            oh, ow = h, w
        else:
            assert isinstance(pad, int)
            oh = (h + 2 * pad - layer.kernel) // layer.stride + 1
            ow = (w + 2 * pad - layer.kernel) // layer.stride + 1
        if oh < 1 or ow < 1:
            given = f'padding "same" ({pad} at stride {layer.stride})' if layer.padding == "same" else f"padding {pad}"
            raise fail(f"kernel {layer.kernel} with {given} does not fit the {h}x{w} input")
        k2 = layer.kernel * layer.kernel
        per_out = (c // layer.groups) * k2
        params = layer.out * per_out + (layer.out if layer.bias else 0)
        return record((layer.out, oh, ow), params, layer.out * oh * ow * per_out, (per_out, layer.out * k2))

    if isinstance(layer, NormLayer):
        if len(x) not in (1, 3):
            raise fail(f"needs a [D] or [C, H, W] input but receives {list(x)}")
        return record(x, 2 * x[0])

    if isinstance(layer, LayerNormLayer):
        normalized = x[-1] if layer.over == "last" else math.prod(x)
        if normalized == 1:
            raise fail(_CONSTANT_NORM.format(what=f"each sample's {list(x)} input", fewer="normalize over more values"))
        return record(x, 2 * normalized)

    if isinstance(layer, GroupNormLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        if x[0] % layer.groups:
            raise fail(f"groups={layer.groups} must divide the {x[0]} channels")
        if x[0] // layer.groups * x[1] * x[2] == 1:  # torch also refuses it at a batch of 1, in eval mode too
            raise fail(
                _CONSTANT_NORM.format(what=f"each of the {layer.groups} groups of {list(x)}", fewer="use fewer groups")
            )
        return record(x, 2 * x[0])

    if isinstance(layer, (ActivationLayer, LeakyReluLayer, DropoutLayer, ScaleLayer, ZeroLayer)):
        return record(x)

    if isinstance(layer, PoolLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        c, h, w = x
        p = layer.padding
        if layer.kernel > h + 2 * p or layer.kernel > w + 2 * p:
            raise fail(f"kernel {layer.kernel} is larger than the {h}x{w} input (padding {p})")
        s = layer.effective_stride
        return record((c, (h + 2 * p - layer.kernel) // s + 1, (w + 2 * p - layer.kernel) // s + 1))

    if isinstance(layer, AttentionLayer):
        if len(x) != 2:
            raise fail(f"expects a sequence [T, D] but receives {list(x)}; start with a patch_embed")
        t, d = x
        if d % layer.heads:
            raise fail(f"heads={layer.heads} must divide the width D={d}")
        bias = d if layer.bias else 0
        out.append(
            LayerInfo(
                label,
                module,
                layer.type,
                block,
                x,
                x,
                0,
                2 * t * t * d,
                None,
                None,
                3 * t * d + 2 * layer.heads * t * t,
            )
        )
        for name in ATTENTION_PROJECTIONS:  # q, k, v, o: linear D -> D on every token
            out.append(
                LayerInfo(f"{label}.{name}", f"{module}.{name}", "linear", block, x, x, d * d + bias, t * d * d, d, d)
            )
        return x

    if isinstance(layer, PatchEmbedLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        c, h, w = x
        p = layer.patch
        if h % p or w % p:
            raise fail(f"patch={p} must divide the {h}x{w} input")
        tokens = (h // p) * (w // p)
        params = layer.out * c * p * p + (layer.out if layer.bias else 0)
        y = record((tokens, layer.out))
        conv = (layer.out, h // p, w // p)  # its conv, module "proj": a plain conv on the image
        fans = (c * p * p, layer.out * p * p)
        out.append(
            LayerInfo(
                f"{label}.proj", f"{module}.proj", "conv2d", block, x, conv, params, tokens * fans[0] * layer.out, *fans
            )
        )
        return y

    if isinstance(layer, PosEmbedLayer):
        if len(x) != 2:
            raise fail(f"expects a sequence [T, D] but receives {list(x)}; start with a patch_embed")
        return record(x, math.prod(x))

    if isinstance(layer, TokenMeanLayer):
        if len(x) != 2:
            raise fail(f"expects a sequence [T, D] but receives {list(x)}")
        return record((x[1],))

    if isinstance(layer, CellLayer):
        if depth >= MAX_NESTING:
            raise fail(f"cells and residual layers nest deeper than {MAX_NESTING}")
        return _trace_cell(layer, x, label, module, block, out, depth, ctx)

    if isinstance(layer, GlobalAvgPoolLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        return record((x[0],))

    if isinstance(layer, FlattenLayer):
        return record((math.prod(x),))

    if isinstance(layer, ResidualLayer):
        if depth >= MAX_NESTING:
            raise fail(f"residual layers nest deeper than {MAX_NESTING}")
        index = len(out)
        out.append(LayerInfo(label, module, layer.type, block, x, x, 0, 0, None, None))  # placeholder
        body = _trace_sequence(layer.body, x, f"{label}.body", f"{module}.body", block, out, depth + 1, ctx)
        short = _trace_sequence(
            layer.shortcut, x, f"{label}.shortcut", f"{module}.shortcut", block, out, depth + 1, ctx
        )
        if body != short:
            raise fail(f"body gives {list(body)} but shortcut gives {list(short)}; both paths must give the same shape")
        out[index] = LayerInfo(label, module, layer.type, block, x, body, 0, 0, None, None)
        return body

    raise fail(f"unsupported layer type {layer.type!r}")  # unreachable: the union is closed


def _listed(nodes: list[int]) -> str:
    """Node numbers for a message, the first 10 and a count of the rest (a cell has up to 1,024)."""
    return f"{nodes}" if len(nodes) <= 10 else f"{nodes[:10]} and {len(nodes) - 10} more"


def _refuse_untrainable_edges(cell: CellLayer, weighted: set[int], label: str) -> None:
    """With the last node as the output, a node from which no path of edges leads to it computes
    nothing the network uses: weights on an edge into such a node get no gradient and could never
    train (when they were the network's only weights, the engine's backward failed). Edges
    without weights into it (a skip, a pool) only waste work, and are accepted."""
    useful = {cell.nodes - 1}
    for edge in sorted(cell.edges, key=lambda e: -e.source):  # from the highest source down
        if edge.to in useful:
            useful.add(edge.source)
    wasted = sorted(k for k in weighted if cell.edges[k].to not in useful)
    if wasted:
        dead = sorted({cell.edges[k].to for k in wasted})
        ends = [j for j in range(1, cell.nodes - 1) if j not in useful and all(e.source != j for e in cell.edges)]
        raise SpecError.at(
            f"{label}.edges",
            f"node(s) {_listed(dead)} lead to no path into the cell's output (its last node), so the weights of "
            f"edges {_listed(wasted)} into them could never train; node(s) {_listed(ends)} feed no later node: add "
            'an edge from them towards the output, or use output "concat"',
        )


def _trace_cell(
    cell: CellLayer, x: Shape, label: str, module: str, block: int, out: list[LayerInfo], depth: int, ctx: _Context
) -> Shape:
    """Nodes in order (edges go from a lower node to a higher one): node 0 is ``x``; every node
    j > 0 needs an incoming edge, and all of its incoming edges must give the same shape."""
    n = cell.nodes
    for k, edge in enumerate(cell.edges):
        where = f"{label}.edges[{k}]"
        if edge.to >= n:
            raise SpecError.at(f"{where}.to", f"node {edge.to} does not exist: the cell has nodes 0..{n - 1}")
        if edge.source >= edge.to:
            how = "is a loop" if edge.source == edge.to else "goes backwards"
            raise SpecError.at(
                where, f"edge {edge.source} -> {edge.to} {how}; edges go from a lower node to a higher one"
            )
    fed = {edge.to for edge in cell.edges}
    if missing := [j for j in range(1, n) if j not in fed]:
        raise SpecError.at(
            f"{label}.edges", f"node(s) {_listed(missing)} have no incoming edge; every node after 0 needs one"
        )
    index = len(out)
    out.append(LayerInfo(label, module, cell.type, block, x, x, 0, 0, None, None))  # placeholder
    names = [f"e{e.source}_{e.to}" for e in cell.edges] if ctx.too_deep else cell_edge_modules(cell, ctx.init)
    into: list[list[int]] = [[] for _ in range(n)]  # each node's incoming edges, in listing order
    for k, edge in enumerate(cell.edges):
        into[edge.to].append(k)
    nodes: list[Shape] = [x]
    weighted: set[int] = set()  # edges whose op holds parameters
    for j in range(1, n):
        incoming: list[tuple[int, Shape]] = []
        for k in into[j]:
            edge = cell.edges[k]
            path, sub = f"{label}.edges[{k}].op", f"{module}.edges.{names[k]}"
            before = len(out)
            y = _trace_sequence(edge.op, nodes[edge.source], path, sub, block, out, depth + 1, ctx)
            if any(info.parameters for info in out[before:]):
                weighted.add(k)
            incoming.append((k, y))
        first_k, shape = incoming[0]
        for k, y in incoming[1:]:
            if y != shape:
                raise SpecError.at(
                    f"{label}.edges[{k}]",
                    f"gives {list(y)} into node {j} but edges[{first_k}] gives {list(shape)}; "
                    "the edges into a node must give the same shape",
                )
        nodes.append(shape)
    if cell.output == "last":
        _refuse_untrainable_edges(cell, weighted, label)
        y = nodes[-1]
    else:
        inner = nodes[1:]
        if any(s[1:] != inner[0][1:] for s in inner):
            raise SpecError.at(
                f"{label}.output", f'"concat" needs nodes 1.. to agree beyond dim 0, got {[list(s) for s in inner]}'
            )
        y = (sum(s[0] for s in inner), *inner[0][1:])
    internal = sum(math.prod(s) for s in nodes[1:])
    out[index] = LayerInfo(label, module, cell.type, block, x, y, 0, 0, None, None, internal)
    return y

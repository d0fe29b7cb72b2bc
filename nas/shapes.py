"""Shape inference through every layer of a spec, with parameter and MAC counts.

One walk serves validation (impossible specs are rejected with the JSON path), the limits
check (done before anything is allocated), the model summary and the builder (which reads
each layer's input shape from here instead of inferring it again).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nas.spec import (
    ActivationLayer,
    ArchitectureSpec,
    Conv2dLayer,
    DropoutLayer,
    FlattenLayer,
    GlobalAvgPoolLayer,
    GroupNormLayer,
    Layer,
    LeakyReluLayer,
    LinearLayer,
    NormLayer,
    PoolLayer,
    ResidualLayer,
    ScaleLayer,
    SpecError,
)

__all__ = ["LayerInfo", "ShapeTrace", "conv_padding", "trace_shapes"]

Shape = tuple[int, ...]

# Nested residuals deeper than this are almost certainly a malformed generator, and would
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
        return math.prod(self.boundaries[0]) + sum(math.prod(i.out_shape) for i in self.layers)

    def by_module(self) -> dict[str, LayerInfo]:
        return {info.module: info for info in self.layers}


def conv_padding(layer: Conv2dLayer) -> int | str:
    """The padding a conv layer uses: ``"same"`` keeps H, W at stride 1; with a larger
    stride it pads ``(kernel - 1) // 2`` on each side (output ``ceil(H / stride)`` for odd
    kernels), since PyTorch's ``padding="same"`` refuses strides above 1."""
    if layer.padding != "same":
        return layer.padding
    return "same" if layer.stride == 1 else (layer.kernel - 1) // 2


def trace_shapes(spec: ArchitectureSpec) -> ShapeTrace:
    """Infer every layer's shapes; raise SpecError naming the first impossible layer."""
    layers: list[LayerInfo] = []
    shape: Shape = tuple(spec.input_shape)
    boundaries = [shape]
    for b, block in enumerate(spec.blocks):
        shape = _trace_sequence(block.layers, shape, f"blocks[{b}].layers", f"blocks.{b}", b, layers, depth=0)
        boundaries.append(shape)
    return ShapeTrace(layers=tuple(layers), boundaries=tuple(boundaries))


def _trace_sequence(
    sequence: list[Layer],
    shape: Shape,
    path: str,
    module: str,
    block: int,
    out: list[LayerInfo],
    depth: int,
) -> Shape:
    for i, layer in enumerate(sequence):
        shape = _trace_layer(layer, shape, f"{path}[{i}]", f"{module}.{i}", block, out, depth)
    return shape


def _trace_layer(layer: Layer, x: Shape, path: str, module: str, block: int, out: list[LayerInfo], depth: int) -> Shape:
    label = f"{path} ({layer.type})"

    def fail(reason: str) -> SpecError:
        return SpecError.at(label, reason)

    def record(y: Shape, parameters: int = 0, macs: int = 0, fans: tuple[int, int] | None = None) -> Shape:
        fan_in, fan_out = fans if fans else (None, None)
        out.append(LayerInfo(label, module, layer.type, block, x, y, parameters, macs, fan_in, fan_out))
        return y

    if isinstance(layer, LinearLayer):
        if len(x) != 1:
            raise fail(f"expects a vector input but receives {list(x)}; add a flatten or global_avgpool")
        (d,) = x
        params = d * layer.out + (layer.out if layer.bias else 0)
        return record((layer.out,), params, d * layer.out, (d, layer.out))

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
            raise fail(f"kernel {layer.kernel} with padding {pad} does not fit the {h}x{w} input")
        k2 = layer.kernel * layer.kernel
        per_out = (c // layer.groups) * k2
        params = layer.out * per_out + (layer.out if layer.bias else 0)
        return record((layer.out, oh, ow), params, layer.out * oh * ow * per_out, (per_out, layer.out * k2))

    if isinstance(layer, NormLayer):
        if layer.type == "batchnorm" and len(x) not in (1, 3):
            raise fail(f"needs a [D] or [C, H, W] input but receives {list(x)}")
        affine = x[0] if layer.type == "batchnorm" else math.prod(x)
        return record(x, 2 * affine)

    if isinstance(layer, GroupNormLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        if x[0] % layer.groups:
            raise fail(f"groups={layer.groups} must divide the {x[0]} channels")
        return record(x, 2 * x[0])

    if isinstance(layer, (ActivationLayer, LeakyReluLayer, DropoutLayer, ScaleLayer)):
        return record(x)

    if isinstance(layer, PoolLayer):
        if len(x) != 3:
            raise fail(f"expects an image input [C, H, W] but receives {list(x)}")
        c, h, w = x
        if layer.kernel > h or layer.kernel > w:
            raise fail(f"kernel {layer.kernel} is larger than the {h}x{w} input")
        s = layer.effective_stride
        return record((c, (h - layer.kernel) // s + 1, (w - layer.kernel) // s + 1))

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
        body = _trace_sequence(layer.body, x, f"{label}.body", f"{module}.body", block, out, depth + 1)
        short = _trace_sequence(layer.shortcut, x, f"{label}.shortcut", f"{module}.shortcut", block, out, depth + 1)
        if body != short:
            raise fail(f"body gives {list(body)} but shortcut gives {list(short)}; both paths must give the same shape")
        out[index] = LayerInfo(label, module, layer.type, block, x, body, 0, 0, None, None)
        return body

    raise fail(f"unsupported layer type {layer.type!r}")  # unreachable: the union is closed

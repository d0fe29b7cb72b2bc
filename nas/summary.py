"""A built model at a glance: parameters, fans, output shape, multiply-accumulates."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from nas.shapes import trace_shapes
from nas.spec import ArchitectureSpec
from nas.validate import parse_spec

__all__ = ["LayerSummary", "ModelSummary", "summarize"]


class LayerSummary(BaseModel):
    module: str  # name prefix of this layer's parameters in the built model
    path: str  # JSON path in the spec
    type: str
    block: int
    in_shape: list[int]
    out_shape: list[int]
    parameters: int
    macs: int
    fan_in: int | None = None
    fan_out: int | None = None


class ModelSummary(BaseModel):
    name: str | None
    input_shape: list[int]
    output_shape: list[int]
    boundary_shapes: list[list[int]]  # boundary 0 is the input
    parameters: int
    macs: int  # multiply-accumulates for one sample (linear and conv layers)
    layers: list[LayerSummary]

    def to_text(self) -> str:
        """A fixed-width table for terminals."""
        lines = [
            f"{_printable(self.name) if self.name else 'unnamed'}: {self.input_shape} -> {self.output_shape}, "
            f"{self.parameters:,} parameters, {self.macs:,} MACs per sample, "
            f"{len(self.boundary_shapes) - 1} blocks",
            f"{'module':<28} {'type':<15} {'output':<16} {'params':>10} {'fan_in':>7} {'fan_out':>7}",
        ]
        for layer in self.layers:
            lines.append(
                f"{layer.module:<28} {layer.type:<15} {str(layer.out_shape):<16} "
                f"{layer.parameters:>10,} {layer.fan_in or '':>7} {layer.fan_out or '':>7}"
            )
        return "\n".join(lines)


def _printable(text: str) -> str:
    """``text`` with what a terminal would act on (an escape sequence, a bell, a line break) written
    as its escape: a spec's name is anyone's text, and a table is read on a terminal."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def summarize(spec: ArchitectureSpec | dict[str, Any] | str) -> ModelSummary:
    """Summarize what ``build_model(spec)`` builds, without allocating it."""
    spec = parse_spec(spec)
    trace = trace_shapes(spec)
    return ModelSummary(
        name=spec.name,
        input_shape=list(spec.input_shape),
        output_shape=list(trace.boundaries[-1]),
        boundary_shapes=[list(shape) for shape in trace.boundaries],
        parameters=trace.parameters,
        macs=trace.macs,
        layers=[
            LayerSummary(
                module=info.module,
                path=info.path,
                type=info.type,
                block=info.block,
                in_shape=list(info.in_shape),
                out_shape=list(info.out_shape),
                parameters=info.parameters,
                macs=info.macs,
                fan_in=info.fan_in,
                fan_out=info.fan_out,
            )
            for info in trace.layers
        ],
    )

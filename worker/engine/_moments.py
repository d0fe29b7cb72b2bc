"""Shared measurement plumbing for ``scaling``, ``hessian`` and ``bnp``.

Forward capture at weighted layers, the random losses of the scaling-calculus paper, the
per-sample weight-gradient second moment, and a guard that leaves a model's buffers (BatchNorm
running statistics) as they were. All reductions are in float64.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.build import SameConv2d

__all__ = [
    "Capture",
    "capture",
    "forward_hooks",
    "per_sample_weight_grad_sq",
    "preserved_buffers",
    "random_quadratic_loss",
    "receptive_field",
    "task_loss",
]

# Largest per-sample-gradient tensor materialised at once (elements), per chunk of samples.
_CHUNK_ELEMENTS = 1 << 24


@dataclass
class Capture:
    """What one module saw in the last forward pass: its input and its output."""

    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)

    @property
    def x(self) -> Tensor:
        return self.inputs[-1]

    @property
    def y(self) -> Tensor:
        return self.outputs[-1]


@contextmanager
def capture(modules: Sequence[nn.Module]) -> Iterator[list[Capture]]:
    """Record each module's (first positional) input and output during forward passes."""
    records = [Capture() for _ in modules]

    def recorder(record: Capture) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], None]:
        def hook(_m: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> None:
            record.inputs.append(args[0])
            record.outputs.append(out)

        return hook

    with forward_hooks([(module, recorder(record)) for module, record in zip(modules, records, strict=True)]):
        yield records


# what a forward hook may be: it observes (returns None) or replaces the module's output
ForwardHook = Callable[[nn.Module, tuple[Tensor, ...], Tensor], Tensor | None]


@contextmanager
def forward_hooks(hooks: Sequence[tuple[nn.Module, ForwardHook]] | Mapping[nn.Module, ForwardHook]) -> Iterator[None]:
    """Each (module, hook) registered as a forward hook inside the block, all removed after it."""
    pairs = list(hooks.items()) if isinstance(hooks, Mapping) else list(hooks)
    handles = [module.register_forward_hook(hook) for module, hook in pairs]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def preserved_buffers(model: nn.Module) -> Iterator[None]:
    """Measurements must not move BatchNorm running statistics: restore every buffer after."""
    saved = {name: buf.detach().clone() for name, buf in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, buf in model.named_buffers():
                if name in saved:
                    buf.copy_(saved[name])


def random_matrix(size: int, generator: torch.Generator | None, like: Tensor) -> Tensor:
    """An i.i.d. N(0, 1) ``size x size`` matrix drawn from ``generator`` (global RNG if None)."""
    device = generator.device if generator is not None else like.device
    r = torch.randn(size, size, generator=generator, device=device, dtype=torch.float64)
    return r.to(device=like.device, dtype=like.dtype)


def random_quadratic_loss(
    out: Tensor,
    generator: torch.Generator | None,
    *,
    reduction: str = "sum",
    r: Tensor | None = None,
) -> Tensor:
    """The scaling-calculus paper's random loss ``y^T R y`` (section 5.1, Fig. 1), R i.i.d. N(0, 1).

    ``y`` is the channel (feature) vector of each sample, and of each spatial position when the
    output is an image: ``sum_{b, p} y_{b,:,p}^T R y_{b,:,p}`` (``reduction="sum"``, per-sample
    semantics) or that sum divided by the batch size (``"mean"``).
    """
    channels = out.shape[1]
    if r is None:
        r = random_matrix(channels, generator, out)
    flat = out.reshape(out.shape[0], channels, -1)  # [B, C, P]
    total = torch.einsum("bcp,cd,bdp->", flat, r, flat)
    return total / out.shape[0] if reduction == "mean" else total


def task_loss(out: Tensor, targets: Tensor, *, reduction: str = "sum") -> Tensor:
    """Cross-entropy for integer class targets, ``0.5 * ||y - t||^2`` for float targets."""
    if not targets.is_floating_point():
        return F.cross_entropy(out, targets, reduction=reduction)
    if targets.shape != out.shape:
        if targets.numel() != out.numel():
            raise ValueError(
                f"float targets of shape {list(targets.shape)} do not match the output's {list(out.shape)}"
            )
        # [N] targets against an [N, 1] output would broadcast to [N, N]
        targets = targets.reshape(out.shape)
    per_sample = 0.5 * (out - targets).pow(2).reshape(out.shape[0], -1).sum(dim=1)
    return per_sample.sum() if reduction == "sum" else per_sample.mean()


def receptive_field(weight: Tensor) -> int:
    """k^2 of a conv weight [out, in/groups, kh, kw]; 1 for a linear weight."""
    return math.prod(weight.shape[2:])


def _conv_pads(conv: nn.Conv2d) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) zero padding the convolution applies, as F.pad takes it."""
    if isinstance(conv, SameConv2d):  # pads in forward, before its own (zero) padding
        (kh, kw), (ph, pw) = conv.kernel_size, cast(tuple[int, int], conv.padding)
        return (
            (kw - 1) // 2 + pw,
            kw - 1 - (kw - 1) // 2 + pw,
            (kh - 1) // 2 + ph,
            kh - 1 - (kh - 1) // 2 + ph,
        )
    if isinstance(conv.padding, str):
        if conv.padding == "valid":
            return (0, 0, 0, 0)
        pads = []  # PyTorch's "same": total = dilation * (k - 1), the extra one on the right
        for k, d in zip(reversed(conv.kernel_size), reversed(conv.dilation), strict=True):
            total = d * (k - 1)
            pads += [total // 2, total - total // 2]
        return (pads[0], pads[1], pads[2], pads[3])
    ph, pw = conv.padding
    return (pw, pw, ph, ph)


def per_sample_weight_grad_sq(module: nn.Module, x: Tensor, dy: Tensor) -> float:
    """``E[dW_b^2]``: mean over samples b and weight entries of the per-sample weight gradient.

    ``dW_b = dy_b x_b^T`` (linear) or ``sum_p dy_b(p) patch_b(p)`` (conv), where ``dy`` is the
    gradient of a summed loss with respect to the layer's output: batch-size-1 semantics
    (scaling paper, section 2). For a linear layer the mean factorises exactly.
    """
    if isinstance(module, nn.Linear) and x.dim() == 3:
        return _sequence_linear_grad_sq(x, dy, module.weight.numel())
    if isinstance(module, nn.Linear):
        x64, dy64 = x.detach().double().flatten(1), dy.detach().double().flatten(1)
        return float((dy64.pow(2).mean(1) * x64.pow(2).mean(1)).mean())
    if not isinstance(module, nn.Conv2d):
        raise TypeError(f"expected nn.Linear or nn.Conv2d, got {type(module).__name__}")
    groups, batch = module.groups, x.shape[0]
    weight_elems = module.weight.numel()
    chunk = max(1, _CHUNK_ELEMENTS // max(weight_elems, 1))
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    kh, kw = module.kernel_size
    sh, sw = module.stride
    for start in range(0, batch, chunk):
        xs = F.pad(x[start : start + chunk].detach(), _conv_pads(module)).double()
        if module.dilation == (1, 1):  # a strided view; F.unfold's im2col is slow on CPU
            patches = xs.unfold(2, kh, sh).unfold(3, kw, sw)  # [n, C, Ho, Wo, kh, kw]
            patches = patches.permute(0, 1, 4, 5, 2, 3).reshape(xs.shape[0], xs.shape[1] * kh * kw, -1)
        else:
            patches = F.unfold(xs, module.kernel_size, dilation=module.dilation, stride=module.stride)
        n = patches.shape[0]
        cols = patches.reshape(n, groups, -1, patches.shape[-1])  # [n, G, Cg*kh*kw, P]
        g = dy[start : start + chunk].detach().double().reshape(n, groups, -1, cols.shape[-1])
        per_sample = torch.einsum("bgop,bgkp->bgok", g, cols)  # [n, G, Og, Cg*kh*kw]
        total = total + per_sample.pow(2).sum()
    return float(total / (batch * weight_elems))


def _sequence_linear_grad_sq(x: Tensor, dy: Tensor, weight_elems: int) -> float:
    """``E[dW_b^2]`` of a linear layer on [N, T, D]: ``dW_b = sum_t dy_bt x_bt^T``, summed over the
    sample's tokens as a conv sums over positions (the mean no longer factorises)."""
    batch = x.shape[0]
    chunk = max(1, _CHUNK_ELEMENTS // max(weight_elems, 1))
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for start in range(0, batch, chunk):
        xs, g = x[start : start + chunk].detach().double(), dy[start : start + chunk].detach().double()
        total = total + torch.einsum("bto,bti->boi", g, xs).pow(2).sum()
    return float(total / (batch * weight_elems))


def float64_copy(model: nn.Module) -> nn.Module:
    """A float64 deep copy (for exact references and eigen-decompositions)."""
    return copy.deepcopy(model).double()

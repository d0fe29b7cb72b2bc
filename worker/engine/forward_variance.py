"""LSUV's data-dependent forward-variance target, on every weighted layer, in one forward pass.

LSUV (Mishkin & Matas 2016, Algorithm 1) rescales each linear or conv layer in turn until its
output variance on a batch is 1, re-running the network for every layer and every round (10
forwards per layer at worst). Rescaling a layer's weight and bias together by ``c`` multiplies its
output by exactly ``c``, so the same target is reached in a single pass: a forward hook on each
layer measures its output variance, multiplies the output by ``c = target / std`` before the next
layer sees it, and records ``c``. Every later layer is then measured on inputs that already carry
the earlier layers' corrections, which is what LSUV's sequential loop converges to, for one forward
pass (``FORWARD_COST``) instead of up to ``10 x layers``. (LSUV scales the weight alone and keeps
the bias at 0; with a non-zero bias scaling both keeps the pass exact.)

The head (the last weighted layer the pass reaches) gets ``head_std`` instead of 1 when given:
the logits' scale is AutoInit's ``output_std`` target (scaling paper, section 10), not LSUV's.
Nothing here is from the five papers' equations: it is the Jacobian target's data-dependent
counterpart, an option of the engine (``options.forward_variance``; docs/conditioning.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from nas.build import PreflightNet
from worker.engine._moments import forward_hooks, preserved_buffers
from worker.engine.autoinit import conditioning_mode

__all__ = ["unit_forward_variance_scales", "weighted_layers"]


def weighted_layers(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """Every linear or conv layer of ``model`` with the names of its tensors (weight, bias)."""
    return {
        name: tuple(f"{name}.{t}" for t, p in module.named_parameters(recurse=False) if p is not None)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d)
    }


def unit_forward_variance_scales(
    model: PreflightNet, x: Tensor, head_std: float | None = None, layers: Iterable[str] | None = None
) -> dict[str, float]:
    """Multipliers (keyed as ``nas.build_model`` takes them) that put every weighted layer's output
    variance at 1 on ``x`` (the head's std at ``head_std`` when given), found in one forward pass.
    ``layers`` restricts the target to those modules (default: all weighted layers). A layer whose
    variance is zero or non-finite keeps its scale; a layer called twice in one pass reuses the
    factor of its first call, as a shared weight must."""
    modules = dict(model.named_modules())
    tensors = weighted_layers(model)
    chosen = [name for name in (tensors if layers is None else layers) if name in tensors]
    factors: dict[str, float] = {}
    order: list[str] = []

    def rescale(name: str) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], Tensor]:
        def hook(_module: nn.Module, _args: tuple[Tensor, ...], out: Tensor) -> Tensor:
            if name not in factors:
                var = float(out.detach().double().var())
                factors[name] = 1.0 / math.sqrt(var) if math.isfinite(var) and var > 0 else 1.0
                order.append(name)
            return out * factors[name]

        return hook

    hooks = [(modules[name], rescale(name)) for name in chosen]
    with forward_hooks(hooks), conditioning_mode(model), preserved_buffers(model), torch.no_grad():
        model(x)
    if head_std is not None and order:
        # the head saw unit-variance-corrected inputs; its own output std is 1 / factor before it
        factors[order[-1]] *= head_std
    return {t: factor for name, factor in factors.items() for t in tensors[name] if factor != 1.0}

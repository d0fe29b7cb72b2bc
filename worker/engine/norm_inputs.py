"""LSUV's unit-variance target on the weights that feed a normalization.

A weight whose output reaches a BatchNorm, LayerNorm or GroupNorm through positively homogeneous
layers only is scale-invariant: multiplying it (and its bias) by c changes nothing the network
computes, so AutoInit's Jacobian target cannot see it and holds it at 1 (``structure``). What its
scale does set is how fast it learns: under SGD the effective step of a scale-invariant weight is
``lr / ||w||^2``. The spec's own scale is often arbitrary there (a ``normal`` scheme with a tiny std, a
bad gain), and LSUV (Mishkin & Matas 2016, Algorithm 1), which trained better than the tuned init
on most normalized networks of benchmark v2's development set, puts every layer's output variance
at 1 on the data. This stage does that for the invariant layers alone, where it is free of any
conflict with the Jacobian target: one forward pass measures them all at once, because rescaling
one of them does not change what the others see. (Invariant up to the norm's eps: where the spec's
scale is so small that eps matters, the normalized output was being damped, and this undoes it;
later layers were then measured on damped inputs, and land within LSUV's own tolerance of 1, 0.1,
rather than on it.)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from nas.build import PreflightNet
from worker.engine._moments import forward_hooks, preserved_buffers
from worker.engine.autoinit import AutoInitResult, conditioning_mode

__all__ = ["unit_variance_scales"]


def unit_variance_scales(model: PreflightNet, x: Tensor, tuned: AutoInitResult) -> dict[str, float]:
    """Multipliers (keyed as ``nas.build_model`` takes them) that put the output variance of every
    scale-invariant linear or conv layer at 1 on ``x``; weight and bias move together, so the
    network's function is unchanged. A layer whose variance is zero or non-finite is left alone."""
    modules = dict(model.named_modules())
    targets = {
        gain.module: gain.tensors
        for unit in tuned.units
        for gain in unit.gains
        if gain.invariant and isinstance(modules.get(gain.module), nn.Linear | nn.Conv2d)
    }
    if not targets:
        return {}
    variances: dict[str, float] = {}

    def record(name: str) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], None]:
        def hook(_module: nn.Module, _args: tuple[Tensor, ...], out: Tensor) -> None:
            variances[name] = float(out.detach().double().var())

        return hook

    hooks = [(modules[name], record(name)) for name in targets]
    with forward_hooks(hooks), conditioning_mode(model), preserved_buffers(model), torch.no_grad():
        model(x)
    scales: dict[str, float] = {}
    for name, tensors in targets.items():
        var = variances.get(name, math.nan)
        if math.isfinite(var) and var > 0:
            scales |= dict.fromkeys(tensors, 1.0 / math.sqrt(var))
    return scales

"""Zero-mean outputs: every weighted layer's bias shifted so that its output has zero mean per
channel on the batch, in one forward pass.

AutoInit's Jacobian target and LSUV's variance target both set scales; neither looks at the mean.
In a network without normalization the mean does not stay at zero: after a ReLU every feature
is positive, so the next layer's outputs carry a per-channel offset (the sum of its weights times
the input means), and a unit whose offset is far below zero is dead for most inputs from the first
step. Shifting each layer's bias by minus its per-channel batch mean is what a BatchNorm does at
its first step, and what the data-dependent inits of Kraehenbuehl et al. 2016 and Salimans &
Kingma 2016 do (not one of the five papers; docs/conditioning.md, sections 2c and 8). A bias shift
moves the output by exactly that much, so a forward hook can subtract each layer's mean before
the next layer sees it and record it: later layers are measured on the corrected inputs, one
forward pass for the whole network (``FORWARD_COST``).

The shifts are additive, applied after the report's multipliers (``nas.apply_bias_shifts_``);
the channel is a conv's dimension 1 and a linear layer's last dimension (tokens keep their
features last). A layer without a bias is left as it is; a layer called twice keeps the shift of
its first call, as a shared bias must.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from nas.build import PreflightNet
from worker.engine._moments import forward_hooks, preserved_buffers
from worker.engine.autoinit import conditioning_mode

__all__ = ["centering_shifts"]

_CONV = nn.Conv1d | nn.Conv2d | nn.Conv3d


def centering_shifts(model: PreflightNet, x: Tensor) -> dict[str, list[float]]:
    """Per-channel additive shifts, keyed by bias parameter name (``nas.build_model``'s
    ``bias_shifts``), that put every biased linear or conv layer's output at zero mean per
    channel on ``x``; ``model`` is not changed. Non-finite means give no shift."""
    means: dict[str, Tensor] = {}

    def center(name: str, channel_dim: int) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], Tensor]:
        def hook(_module: nn.Module, _args: tuple[Tensor, ...], out: Tensor) -> Tensor:
            dim = channel_dim % out.dim()
            if name not in means:
                mean = out.detach().double().mean(dim=[d for d in range(out.dim()) if d != dim])
                means[name] = torch.where(torch.isfinite(mean), mean, torch.zeros_like(mean)).to(out.dtype)
            shape = [1] * out.dim()
            shape[dim] = -1
            return out - means[name].view(shape)

        return hook

    hooks = [
        (module, center(name, 1 if isinstance(module, _CONV) else -1))
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear | _CONV) and module.bias is not None
    ]
    with forward_hooks(hooks), conditioning_mode(model), preserved_buffers(model), torch.no_grad():
        model(x)
    return {f"{name}.bias": (-mean).cpu().tolist() for name, mean in means.items() if bool(mean.abs().sum() > 0)}

"""The BNP gradient preconditioner (Algorithms 2 and 3 of ``batch-normalization-preconditioning.txt``).

Usage::

    opt = BNP(torch.optim.SGD(model.parameters(), lr=0.1), model)
    for x, t in batches:
        opt.zero_grad()
        loss_fn(model(x), t).backward()   # the forward pass updates the running statistics
        opt.step()                        # precondition the gradients, then the inner step

Every ``nn.Linear`` / ``nn.Conv2d`` of ``model`` is preconditioned; other parameters pass through.
Forward pre-hooks record the batch mean and variance of each layer's input on every forward
pass made in training mode with gradients enabled (step 1) and update the running statistics
``mu <- rho mu + (1 - rho) mu_H``, ``sigma^2 <- rho sigma^2 + (1 - rho) sigma_H^2`` (step 2; one
update per forward pass, so call the model once per step). ``step`` then transforms the gradients
in place (steps 3-5) and calls the inner optimizer. Schedulers attach to ``opt.optimizer``.

With a bias (the paper's case), per output unit ``i`` (dense) or channel ``d`` (conv)::

    sigma~^2 = sigma^2 + epsilon_1 max(sigma^2) + epsilon_2
    q^2 = max(n_in / N, 1)                 (dense, Algorithm 2)
    q^2 = max(c k^2 / N, sqrt(r s))       (conv, Algorithm 3; c k^2 the fan-in, r x s the input map)
    G_w <- (G_w - mu G_b) / (q^2 sigma~^2)
    G_b <- G_b / q^2 - sum_j G_w mu

i.e. ``[G_b; G_w] <- (1/q^2) P P^T [G_b; G_w]`` with ``P = U diag(1, 1/sigma~)`` (eq. 15, 23). Without
a bias the centering has no parameter to act on; the extension used here scales by the uncentered
second moment instead, ``G_w <- G_w / (q^2 (E[h^2] + ...))`` (the column norms of ``H``).
Inputs of a batch of one use ``(h - mu)^2`` with the running mean as the variance (section 3.3).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["BNP", "bnp_transform_"]


def bnp_transform_(
    weight_grad: Tensor,
    bias_grad: Tensor | None,
    mu: Tensor,
    var: Tensor,
    q2: float,
    *,
    groups: int = 1,
    epsilon_1: float = 1e-2,
    epsilon_2: float = 1e-4,
) -> None:
    """Steps 3-5 of Algorithms 2 / 3 on one layer's gradients, in place.

    ``mu``, ``var``: per input feature / channel (running) statistics; for a layer without bias,
    ``var`` should be the uncentered second moment and ``mu`` is ignored.
    """
    var_t = var + epsilon_1 * var.max() + epsilon_2
    mu_w, var_w = _per_weight(mu, weight_grad, groups), _per_weight(var_t, weight_grad, groups)
    if bias_grad is None:
        weight_grad.div_(q2 * var_w)
        return
    gb = bias_grad.reshape(-1, *([1] * (weight_grad.dim() - 1)))
    weight_grad.sub_(mu_w * gb).div_(q2 * var_w)
    correction = (weight_grad * mu_w).flatten(1).sum(1)
    bias_grad.div_(q2).sub_(correction)


def _per_weight(stat: Tensor, weight: Tensor, groups: int) -> Tensor:
    """Broadcast a per-input-channel statistic to the weight layout [out, in/groups, (k, k)]."""
    out_ch, in_per_group = weight.shape[0], weight.shape[1]
    group_of_out = torch.arange(out_ch, device=weight.device) // (out_ch // groups)
    index = group_of_out[:, None] * in_per_group + torch.arange(in_per_group, device=weight.device)[None, :]
    per = stat.to(weight.dtype)[index]  # [out, in/groups]
    return per.reshape(out_ch, in_per_group, *([1] * (weight.dim() - 2)))


class _LayerStats:
    """Running mean / variance of one layer's input (Algorithm 2 / 3, step 2; mu = 0, sigma = 1)."""

    def __init__(self, channels: int, device: torch.device, dtype: torch.dtype) -> None:
        self.mu = torch.zeros(channels, device=device, dtype=dtype)
        self.var = torch.ones(channels, device=device, dtype=dtype)
        self.batch = 1
        self.positions = 1


class BNP:
    """torch.optim-style wrapper applying BNP to the gradients of ``model``'s dense and conv layers.

    ``rho``, ``epsilon_1``, ``epsilon_2`` as in Algorithms 2 and 3 (defaults 0.99, 1e-2, 1e-4).
    ``remove()`` detaches the hooks. ``state_dict`` holds the inner optimizer's state and the
    running statistics.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        *,
        rho: float = 0.99,
        epsilon_1: float = 1e-2,
        epsilon_2: float = 1e-4,
    ) -> None:
        if not 0.0 <= rho < 1.0:
            raise ValueError(f"rho must be in [0, 1), but got {rho=}.")
        if epsilon_1 < 0 or epsilon_2 < 0:
            raise ValueError(f"epsilons must be non-negative, but got {epsilon_1=}, {epsilon_2=}.")
        self.optimizer = optimizer
        self.rho, self.epsilon_1, self.epsilon_2 = rho, epsilon_1, epsilon_2
        self._layers: dict[str, tuple[nn.Linear | nn.Conv2d, _LayerStats]] = {}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear | nn.Conv2d):
                w = module.weight
                stats = _LayerStats(
                    w.shape[1] * (module.groups if isinstance(module, nn.Conv2d) else 1),
                    w.device,
                    w.dtype,
                )
                self._layers[name] = (module, stats)
                self._handles.append(module.register_forward_pre_hook(self._make_hook(stats, module.bias is not None)))

    def _make_hook(self, stats: _LayerStats, centered: bool):  # type: ignore[no-untyped-def]
        def hook(module: nn.Module, args: tuple[Tensor, ...]) -> None:
            if not (module.training and torch.is_grad_enabled()):
                return
            h = args[0].detach()
            if isinstance(module, nn.Linear) and h.dim() > 2:  # [N, T, D]: N x T samples of D features
                h = h.reshape(-1, h.shape[-1])
            dims = (0,) if h.dim() == 2 else (0, 2, 3)
            with torch.no_grad():
                mean = h.mean(dim=dims).to(stats.mu.dtype)
                shape = (1, -1, *([1] * (h.dim() - 2)))
                if not centered:
                    var = h.pow(2).mean(dim=dims)
                elif h.shape[0] == 1 and h.dim() == 2:
                    var = (h - stats.mu.reshape(shape)).pow(2).mean(dim=dims)
                else:
                    var = (h - mean.reshape(shape)).pow(2).mean(dim=dims)
                stats.mu.mul_(self.rho).add_(mean, alpha=1 - self.rho)
                stats.var.mul_(self.rho).add_(var.to(stats.var.dtype), alpha=1 - self.rho)
                stats.batch = h.shape[0]
                stats.positions = math.prod(h.shape[2:]) if h.dim() > 2 else 1

        return hook

    def precondition_(self) -> None:
        """Transform the current gradients in place (steps 3-5), without stepping."""
        for module, stats in self._layers.values():
            w = module.weight
            if w.grad is None:
                continue
            if isinstance(module, nn.Conv2d):
                q2 = max(w[0].numel() / stats.batch, math.sqrt(stats.positions))
                groups = module.groups
            else:
                q2 = max(w.shape[1] / stats.batch, 1.0)
                groups = 1
            bias_grad = module.bias.grad if module.bias is not None else None
            if module.bias is not None and bias_grad is None:
                bias_grad = torch.zeros_like(module.bias)
                module.bias.grad = bias_grad
            bnp_transform_(
                w.grad,
                bias_grad,
                stats.mu,
                stats.var,
                q2,
                groups=groups,
                epsilon_1=self.epsilon_1,
                epsilon_2=self.epsilon_2,
            )

    def step(self, closure: Any = None) -> Any:
        """Evaluate ``closure`` (if given) once, precondition, then step the inner optimizer."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.precondition_()
        self.optimizer.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def state_dict(self) -> dict[str, Any]:
        stats = {name: {"mu": s.mu.clone(), "var": s.var.clone()} for name, (_, s) in self._layers.items()}
        return {"optimizer": self.optimizer.state_dict(), "bnp": stats}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        for name, saved in state["bnp"].items():
            _, stats = self._layers[name]
            stats.mu.copy_(saved["mu"])
            stats.var.copy_(saved["var"])

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

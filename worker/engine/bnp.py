"""Batch Normalization Preconditioning (Lange, Helfrich, Ye; ``batch-normalization-preconditioning.txt``).

For a dense layer with input activations ``H`` (rows ``h_j``, batch size N) and a neuron's
parameters ``w_hat = [b_i, w_i]``, the Hessian of the mean loss is ``H_hat^T S H_hat`` with
``H_hat = [e, H]`` (Prop. 2, eq. 10-11). BNP changes variables ``w_hat = P z`` with

    P = U D,   U = [[1, -mu^T], [0, I]],   D = diag(1, sigma)^-1          (eq. 12)

(``mu``, ``sigma^2`` the per-feature batch mean and variance, eq. 13), which centres and scales
the columns of ``H_hat``: ``kappa(H_hat U D)`` can be smaller than ``kappa(H_hat)`` by up to
``kappa(D)``, and the Hessian's condition number by up to ``kappa(D)^2`` (Theorem 4, section 5.1).
For convolutions the statistics are per input channel over batch and positions (eq. 21-22),
repeated over the k x k kernel entries (eq. 23).

- ``kappa_d``: ``kappa(D) = max(d) / min(d)`` of ``d = (1, 1 / sigma_1, ..., 1 / sigma_n)`` at every
  dense and conv layer's input.
- ``neuron_hessian_condition``: the exact (autograd, float64) Hessian of one neuron's ``[b, w]``
  and the condition numbers of it and of ``P^T H P`` (section 5.1's experiment).
- ``BNP``: the gradient transform of Algorithms 2 (dense) and 3 (conv) around any torch optimizer.

NaN policy: a feature with zero variance makes ``kappa_d`` inf (D is unbounded); non-finite
activations give NaN. Condition numbers are ``max |lambda| / min |lambda|`` over eigenvalues with
``|lambda| > 1e-10 max |lambda|`` (the paper's smallest *nonzero* singular value); NaN when the
matrix is non-finite or zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call

from worker.engine._bnp_optim import BNP, bnp_transform_
from worker.engine._moments import (
    capture,
    float64_copy,
    preserved_buffers,
    random_quadratic_loss,
    task_loss,
)

__all__ = [
    "BNP",
    "NeuronHessianCondition",
    "bnp_transform_",
    "input_statistics",
    "kappa_d",
    "neuron_hessian_condition",
]

_RELATIVE_RANK_TOL = 1e-10


def input_statistics(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-feature (dense ``[N, n]``; a sequence ``[N, T, n]`` pools its tokens with the samples)
    or per-channel (conv ``[N, C, H, W]``, eq. 21-22) mean and biased variance of a layer input,
    in float64."""
    x64 = x.detach().double()
    if x64.dim() == 3:
        x64 = x64.reshape(-1, x64.shape[-1])
    dims = (0,) if x64.dim() == 2 else (0, 2, 3)
    mean = x64.mean(dim=dims)
    var = (x64 - mean.reshape(1, -1, *([1] * (x64.dim() - 2)))).pow(2).mean(dim=dims)
    return mean, var


def _kappa_from_var(var: Tensor) -> float:
    if not bool(torch.isfinite(var).all()):
        return math.nan
    sigma = var.clamp_min(0).sqrt()
    if float(sigma.min()) == 0.0:
        return math.inf
    d = torch.cat([sigma.new_ones(1), 1.0 / sigma])
    return float(d.max() / d.min())


def kappa_d(model: nn.Module, x: Tensor, *, epsilon_1: float = 0.0, epsilon_2: float = 0.0) -> dict[str, float]:
    """``kappa(D)`` (eq. 12) at the input of every ``nn.Linear`` / ``nn.Conv2d``, keyed by module name.

    ``epsilon_1, epsilon_2`` regularise the variance as Algorithm 2, step 3 does
    (``sigma^2 + epsilon_1 max sigma^2 + epsilon_2``); the defaults give the exact ``kappa(D)``.
    The model runs in its current mode; buffers are restored.
    """
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear | nn.Conv2d)]
    modules = [model.get_submodule(name) for name in names]
    with preserved_buffers(model), capture(modules) as records, torch.no_grad():
        model(x)
    result = {}
    for name, rec in zip(names, records, strict=True):
        if not rec.inputs:
            result[name] = math.nan
            continue
        _, var = input_statistics(rec.x)
        if bool(torch.isfinite(var).all()):
            var = var + epsilon_1 * var.max() + epsilon_2
        result[name] = _kappa_from_var(var)
    return result


@dataclass(frozen=True)
class NeuronHessianCondition:
    """Section 5.1: condition numbers of one neuron's Hessian before and after BNP."""

    layer: str
    neuron: int
    kappa_before: float
    kappa_after: float
    kappa_d: float

    @property
    def improvement(self) -> float:
        """``kappa_before / kappa_after``; the paper expects up to about ``kappa_d^2``."""
        return self.kappa_before / self.kappa_after if self.kappa_after else math.nan


def condition_number(matrix: Tensor) -> float:
    """``max |lambda| / min |lambda|`` over the non-negligible eigenvalues of a symmetric matrix."""
    if not bool(torch.isfinite(matrix).all()):
        return math.nan
    ev = torch.linalg.eigvalsh(0.5 * (matrix + matrix.T)).abs()
    top = float(ev.max())
    if top == 0.0:
        return math.nan
    kept = ev[ev > _RELATIVE_RANK_TOL * top]
    return top / float(kept.min())


def neuron_hessian_condition(
    model: nn.Module,
    x: Tensor,
    layer: str,
    neuron: int = 0,
    y: Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
) -> NeuronHessianCondition:
    """Condition number of ``d^2 L / d w_hat^2`` for ``w_hat = [b_i, w_i]`` of neuron ``i`` of
    ``layer`` (a linear or conv module name), before and after ``P = U D`` built from the
    layer input's exact batch statistics (eq. 12, 23). Exact Hessian, float64 copy of the model;
    cost: ``fan_in + 1`` Hessian-vector products. Loss as in ``worker.engine.hessian`` (mean over the
    batch; random ``y^T R y`` when ``y`` is None). The layer needs a bias (P acts on ``[b, w]``).
    """
    net = float64_copy(model)
    module = net.get_submodule(layer)
    if not isinstance(module, nn.Linear | nn.Conv2d) or module.bias is None:
        raise ValueError(f"layer {layer!r} must be a linear or conv module with a bias, got {module}")
    if not 0 <= neuron < module.weight.shape[0]:
        raise ValueError(f"neuron must be in [0, {module.weight.shape[0]}), but got {neuron=}.")
    x64 = x.detach().double()
    with preserved_buffers(net), capture([module]) as records, torch.no_grad():
        net(x64)
    mean, var = input_statistics(records[0].x)
    kd = _kappa_from_var(var)

    weight_name, bias_name = f"{layer}.weight", f"{layer}.bias"
    params = {k: v.detach() for k, v in net.named_parameters()}
    buffers = {k: v.detach() for k, v in net.named_buffers()}
    w0, b0 = params[weight_name], params[bias_name]
    channels_per_group = w0.shape[1]
    r = None
    if y is None:
        with preserved_buffers(net), torch.no_grad():
            out_dim = net(x64).shape[1]
        device = generator.device if generator is not None else x64.device
        r = torch.randn(out_dim, out_dim, generator=generator, device=device, dtype=torch.float64).to(x64.device)

    def loss_of(w_hat: Tensor) -> Tensor:
        w = torch.cat([w0[:neuron], w_hat[1:].reshape(1, *w0.shape[1:]), w0[neuron + 1 :]])
        b = torch.cat([b0[:neuron], w_hat[:1], b0[neuron + 1 :]])
        out = functional_call(net, {**params, **buffers, weight_name: w, bias_name: b}, (x64,))
        return (
            random_quadratic_loss(out, None, reduction="mean", r=r)
            if y is None
            else task_loss(out, y, reduction="mean")
        )

    w_hat0 = torch.cat([b0[neuron : neuron + 1], w0[neuron].flatten()])
    with preserved_buffers(net):
        hessian = torch.autograd.functional.hessian(loss_of, w_hat0)
    # P = U D (eq. 12 / 23): mu and sigma of the input channels this neuron reads, per weight entry
    group = neuron // (w0.shape[0] // (module.groups if isinstance(module, nn.Conv2d) else 1))
    channels = torch.arange(group * channels_per_group, (group + 1) * channels_per_group, device=mean.device)
    kernel_area = w0[0].numel() // channels_per_group
    mu = mean[channels].repeat_interleave(kernel_area)
    sigma = var[channels].sqrt().repeat_interleave(kernel_area)
    n = w_hat0.numel()
    u = torch.eye(n, dtype=torch.float64, device=hessian.device)
    u[0, 1:] = -mu
    p = u @ torch.diag(torch.cat([sigma.new_ones(1), 1.0 / sigma]))
    return NeuronHessianCondition(
        layer=layer,
        neuron=neuron,
        kappa_before=condition_number(hessian),
        kappa_after=condition_number(p.T @ hessian @ p),
        kappa_d=kd,
    )

"""Initialization peers of Preflight's tuned initialization.

Each peer re-initializes a freshly built model in place and returns it:

- ``torch_default``: ``reset_parameters()`` of every ``nn.Linear`` / ``nn.Conv2d``
  (uniform, variance ``1 / (3 fan_in)``, PyTorch's default bias);
- ``kaiming``: He et al. 2015, eq. 10: ``N(0, 2 / fan_in)``, zero bias;
- ``xavier``: Glorot & Bengio 2010, eq. 16 (normal form): ``N(0, 2 / (fan_in + fan_out))``;
- ``orthogonal``: Saxe et al. 2014: a random orthogonal matrix (of the weight flattened to
  ``[out, fan_in]``) times the ReLU gain ``sqrt(2)``, zero bias (benchmark v2 only);
- ``lsuv``: Mishkin & Matas 2016, Algorithm 1: orthonormal weights, then, layer by layer in
  forward order, ``W <- W / sqrt(Var(B_l))`` until ``|Var(B_l) - 1| < 0.1`` (10 rounds max);
- ``gradinit``: Zhu et al. 2021, Algorithm 1 (SGD form): one scalar ``alpha`` per parameter
  tensor, starting from the spec's weights; ``T`` Adam steps on
  ``L(S'; theta_alpha - eta g(S; theta_alpha))`` while ``||g||_2 <= gamma``, else on ``||g||_2``;
  ``alpha >= alpha_min``;
- ``lsuv_centered``: LSUV, then the bias shifts of Preflight's centering
  (``worker.engine.centering``: every biased layer's output zero-mean per channel on the batch);
  the peer that tells the tuning's share of the tuned init's gain from the centering's
  (benchmark v2 only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn import functional as F

if TYPE_CHECKING:
    from nas.build import PreflightNet

__all__ = ["ALL_PEERS", "PEERS", "gradinit_", "initialize", "lsuv_", "lsuv_centered_", "lsuv_counted_", "orthogonal_"]

_WEIGHTED = (nn.Linear, nn.Conv2d)
LSUV_TOLERANCE = 0.1  # |Var(B_l) - 1| below it ends a layer's rounds
LSUV_ROUNDS = 10  # at most, per layer


def _weighted(model: nn.Module) -> list[nn.Linear | nn.Conv2d]:
    return [m for m in model.modules() if isinstance(m, _WEIGHTED)]


@torch.no_grad()
def torch_default_(model: nn.Module, x: Tensor, y: Tensor) -> nn.Module:
    for m in _weighted(model):
        m.reset_parameters()
    return model


@torch.no_grad()
def kaiming_(model: nn.Module, x: Tensor, y: Tensor) -> nn.Module:
    for m in _weighted(model):
        nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
        if m.bias is not None:
            m.bias.zero_()
    return model


@torch.no_grad()
def xavier_(model: nn.Module, x: Tensor, y: Tensor) -> nn.Module:
    for m in _weighted(model):
        nn.init.xavier_normal_(m.weight)
        if m.bias is not None:
            m.bias.zero_()
    return model


@torch.no_grad()
def orthogonal_(model: nn.Module, x: Tensor, y: Tensor) -> nn.Module:
    for m in _weighted(model):
        nn.init.orthogonal_(m.weight, gain=math.sqrt(2.0))
        if m.bias is not None:
            m.bias.zero_()
    return model


@torch.no_grad()
def lsuv_(
    model: nn.Module, x: Tensor, y: Tensor, tolerance: float = LSUV_TOLERANCE, rounds: int = LSUV_ROUNDS
) -> nn.Module:
    """LSUV (Mishkin & Matas 2016, Algorithm 1) on the batch ``x``."""
    _lsuv_passes(model, x, tolerance, rounds)
    return model


@torch.no_grad()
def _lsuv_passes(model: nn.Module, x: Tensor, tolerance: float, rounds: int) -> int:
    """LSUV in place; the forward passes of the network it ran (one per round of each layer, the
    round that finds the layer within ``tolerance`` included)."""
    layers = _weighted(model)
    for m in layers:
        nn.init.orthogonal_(m.weight)
        if m.bias is not None:
            m.bias.zero_()
    model.train()
    passes = 0
    for m in layers:
        seen: list[Tensor] = []
        handle = m.register_forward_hook(lambda _m, _i, out, seen=seen: seen.append(out.detach()))
        try:
            for _ in range(rounds):
                seen.clear()
                model(x)
                passes += 1
                var = float(seen[0].double().var())
                if not math.isfinite(var) or var <= 0 or abs(var - 1.0) < tolerance:
                    break
                m.weight.div_(math.sqrt(var))
        finally:
            handle.remove()
    return passes


def lsuv_counted_(model: nn.Module, x: Tensor, seed: int = 0) -> int:
    """``initialize("lsuv", model, x, y, seed)`` (the same weights), returning the forward passes
    LSUV ran: its counted cost is a third of a training step each, as it ran, not at its worst case."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _lsuv_passes(model, x, LSUV_TOLERANCE, LSUV_ROUNDS)


def gradinit_(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    steps: int = 25,
    eta: float = 0.03,
    gamma: float = 1.0,
    tau: float = 0.01,
    alpha_min: float = 0.01,
) -> nn.Module:
    """GradInit (Zhu et al. 2021, Algorithm 1, SGD variant with the 2-norm constraint).

    ``x`` is split in two halves, S and S'. ``eta`` is the middle of the protocol's
    learning-rate grid, ``gamma`` the gradient-norm bound, ``tau`` Adam's step on alpha.
    """
    model.train()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    base = {n: p.detach().clone() for n, p in model.named_parameters() if n in names}
    log_alpha = {n: torch.zeros((), requires_grad=True) for n in names}
    optimizer = torch.optim.Adam(log_alpha.values(), lr=tau)
    xs, xq = x.chunk(2)
    ys, yq = y.chunk(2)
    floor = math.log(alpha_min)
    for _ in range(steps):
        theta = {n: base[n] * log_alpha[n].exp() for n in names}
        loss = F.cross_entropy(functional_call(model, theta, (xs,)), ys)
        grads = torch.autograd.grad(loss, list(theta.values()), create_graph=True)
        norm = torch.sqrt(cast(Tensor, sum((g**2).sum() for g in grads)))
        if not torch.isfinite(norm):
            break
        if norm > gamma:
            objective = norm
        else:
            stepped = {n: t - eta * g for (n, t), g in zip(theta.items(), grads, strict=True)}
            objective = F.cross_entropy(functional_call(model, stepped, (xq,)), yq)
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
        with torch.no_grad():
            for a in log_alpha.values():
                a.clamp_(min=floor)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for n in names:
            params[n].copy_(base[n] * log_alpha[n].exp())
    return model


PEERS: dict[str, Callable[[nn.Module, Tensor, Tensor], nn.Module]] = {
    "torch_default": torch_default_,
    "kaiming": kaiming_,
    "xavier": xavier_,
    "lsuv": lsuv_,
    "gradinit": gradinit_,
}


def lsuv_centered_(model: nn.Module, x: Tensor, y: Tensor) -> nn.Module:
    from nas.build import apply_bias_shifts_
    from worker.engine.centering import centering_shifts

    lsuv_(model, x, y)
    apply_bias_shifts_(model, centering_shifts(cast("PreflightNet", model), x))
    return model


# benchmark v2's peers: v1's, the orthogonal init and LSUV with the engine's centering
ALL_PEERS = {**PEERS, "orthogonal": orthogonal_, "lsuv_centered": lsuv_centered_}


def initialize(name: str, model: nn.Module, x: Tensor, y: Tensor, seed: int = 0) -> nn.Module:
    """Peer ``name`` on ``model``, with the global random generator it draws from
    (``reset_parameters``, ``nn.init``) seeded and restored afterwards: unseeded, a peer's
    weights depended on what the process had drawn before, i.e. on the order in which a
    stage's workers took the candidates, and ``make bench`` did not reproduce its figures."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ALL_PEERS[name](model, x, y)

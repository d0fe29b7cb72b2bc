"""Diagonal Hessian blocks of every weighted layer (``hessian-weight-initialization.txt``, scaling calculus Prop. 4).

For the weight ``W_l`` of each linear / conv layer, with the loss ``L`` averaged over the batch:

- ``top_eigenvalue``: the eigenvalue of largest magnitude of the block ``H_ll = d^2 L / dW_l^2``,
  by power iteration on Hessian-vector products (double backward through one retained graph);
  the Rayleigh quotient of the last iterate, so it carries the sign.
- ``chain_rule_estimate``: the same for the chain-rule (Gauss-Newton) block of Skorski et al.,
  Theorem 1: ``H_w[g, g] ~ v^T H_z v`` with ``v = D_w z . g`` (Remark 4), i.e. the block
  ``J_l^T H_z J_l`` with ``J_l = dz / dW_l`` and ``H_z`` the loss Hessian in the output ``z``.
  Products ``J v`` use the double-vjp identity ``J v = d/du <J^T u, v>``. For ReLU networks the two
  are equal (Remark 5; scaling calculus appendix F): the curvature term ``D_z L . D_w^2 z``
  vanishes because ``z`` is piecewise linear in ``W_l``.
- ``mean_sq_singular_value``: ``tr(H_ll^2) / P`` (P entries of ``W_l``), the average squared
  singular value that the scaling calculus's gamma_l approximates (Prop. 4, appendix G), by
  Hutchinson's estimator ``E ||H r||^2 = tr(H^2)`` with ``probes`` Gaussian vectors.

Loss: with ``y=None`` the scaling paper's random quadratic ``y^T R y`` (R i.i.d. N(0, 1), drawn
from ``generator``), averaged over the batch; integer ``y``: cross-entropy; float ``y``: half
squared error per sample. Biases are left out of the blocks (as in the scaling paper's Fig. 2).

Cost: one forward and one first-order backward with ``create_graph``, then per layer
``iterations`` HVPs, ``iterations`` Gauss-Newton products (three vjps each) and ``probes`` HVPs.
Bound it with ``iterations``, ``probes`` and the batch you pass.

NaN policy: nothing raises on non-finite values. A non-finite loss gives NaN for every figure;
a product that turns non-finite gives NaN for that figure; an all-zero block gives 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch
from torch import Tensor

from nas.build import PreflightNet
from worker.engine._moments import preserved_buffers, random_quadratic_loss, task_loss

__all__ = ["LayerHessian", "hessian_figures", "power_iteration", "spread_order"]


@dataclass(frozen=True)
class LayerHessian:
    """Hessian-block figures of one weighted layer (``name`` as in ``model.trace``)."""

    name: str
    parameters: int
    top_eigenvalue: float
    chain_rule_estimate: float
    mean_sq_singular_value: float


def spread_order(n: int) -> list[int]:
    """0..n-1 in an order whose every prefix is spread evenly over the depth: the two ends
    first, then midpoints (``worker.engine.condition`` takes a prefix when the budget is short)."""
    if n <= 2:
        return list(range(n))
    order, spans = [0, n - 1], [(0, n - 1)]
    while spans:
        lo, hi = spans.pop(0)
        if hi - lo > 1:
            mid = (lo + hi) // 2
            order.append(mid)
            spans += [(lo, mid), (mid, hi)]
    return order


def power_iteration(op: Callable[[Tensor], Tensor], start: Tensor, iterations: int) -> float:
    """Rayleigh quotient ``v^T A v`` of the last iterate of ``v <- A v / ||A v||`` (float64).

    Converges to the eigenvalue of largest magnitude of a symmetric ``A`` at rate
    ``|lambda_2 / lambda_1|`` per step. Non-finite products give NaN; ``A v = 0`` gives 0.0.
    """
    v = start / start.norm()
    value = math.nan
    for _ in range(iterations):
        av = op(v)
        if not bool(torch.isfinite(av).all()):
            return math.nan
        value = float((v.double() * av.double()).sum())
        norm = av.norm()
        if float(norm) == 0.0:
            return 0.0
        v = av / norm
    return value


def hessian_figures(
    model: PreflightNet,
    x: Tensor,
    y: Tensor | None = None,
    *,
    iterations: int = 20,
    probes: int = 4,
    generator: torch.Generator | None = None,
    chain_rule: bool = True,
    layers: Collection[str] | None = None,
) -> list[LayerHessian]:
    """Top eigenvalue, chain-rule (Gauss-Newton) estimate and mean squared singular value of
    every weighted layer's diagonal Hessian block (module doc for definitions and cost).

    Cost bounds: ``iterations``, ``probes``, the batch passed, ``chain_rule=False`` (skips the
    Gauss-Newton power iteration, about half the cost; ``chain_rule_estimate`` is then NaN) and
    ``layers`` (module names to compute; the others are left out of the result).

    >>> from nas import build_model
    >>> net = build_model({"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 3}]}]}, seed=0)
    >>> len(hessian_figures(net, torch.randn(8, 4), iterations=5, generator=torch.Generator().manual_seed(0)))
    1
    """
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, but got {iterations=}.")
    if probes < 1:
        raise ValueError(f"probes must be at least 1, but got {probes=}.")
    wanted = None if layers is None else set(layers)
    chosen = [(info, m) for info, m in model.weighted_layers() if wanted is None or info.module in wanted]
    weights: list[Tensor] = [module.weight for _, module in chosen]  # type: ignore[misc]
    with preserved_buffers(model), torch.enable_grad():
        out = model(x)
        loss = (
            random_quadratic_loss(out, generator, reduction="mean")
            if y is None
            else task_loss(out, y, reduction="mean")
        )
        if not bool(torch.isfinite(loss)):
            return [
                LayerHessian(info.module, w.numel(), math.nan, math.nan, math.nan)
                for (info, _), w in zip(chosen, weights, strict=True)
            ]
        first = torch.autograd.grad(loss, [out, *weights], create_graph=True, allow_unused=True)
        g_out, g_weights = first[0], first[1:]
        result = []
        for (info, _), w, g_w in zip(chosen, weights, g_weights, strict=True):
            start = _gaussian(w, generator)
            hvp = _block_hvp(g_w, w)
            result.append(
                LayerHessian(
                    name=info.module,
                    parameters=w.numel(),
                    top_eigenvalue=power_iteration(hvp, start, iterations),
                    chain_rule_estimate=(
                        power_iteration(_gauss_newton_product(out, g_out, w), start, iterations)
                        if chain_rule
                        else math.nan
                    ),
                    mean_sq_singular_value=_mean_sq_singular(hvp, w, probes, generator),
                )
            )
    return result


def _gaussian(like: Tensor, generator: torch.Generator | None) -> Tensor:
    device = generator.device if generator is not None else like.device
    return torch.randn(like.shape, generator=generator, device=device, dtype=like.dtype).to(like.device)


def _vjp(output: Tensor | None, inputs: Tensor, v: Tensor) -> Tensor:
    """``(d output / d inputs)^T v``, zero where ``output`` does not depend on ``inputs``."""
    if output is None or not output.requires_grad:
        return torch.zeros_like(inputs)
    (g,) = torch.autograd.grad(output, inputs, grad_outputs=v, retain_graph=True, allow_unused=True)
    return torch.zeros_like(inputs) if g is None else g


def _block_hvp(g_w: Tensor | None, w: Tensor) -> Callable[[Tensor], Tensor]:
    """``v -> H_ll v``: differentiate the first-order gradient ``g_w`` once more, along ``v``."""
    return lambda v: _vjp(g_w, w, v)


def _gauss_newton_product(out: Tensor, g_out: Tensor, w: Tensor) -> Callable[[Tensor], Tensor]:
    """``v -> J^T H_z J v`` (Theorem 1), ``J = d out / d w``, ``H_z`` the loss Hessian in ``out``."""
    u = torch.zeros_like(out, requires_grad=True)
    (jt_u,) = torch.autograd.grad(out, w, grad_outputs=u, create_graph=True, allow_unused=True)

    def product(v: Tensor) -> Tensor:
        jv = _vjp(jt_u, u, v)  # J v: J^T u is linear in u
        hz_jv = _vjp(g_out, out, jv)
        return _vjp(out, w, hz_jv)

    return product


def _mean_sq_singular(
    hvp: Callable[[Tensor], Tensor], w: Tensor, probes: int, generator: torch.Generator | None
) -> float:
    total = 0.0
    for _ in range(probes):
        hr = hvp(_gaussian(w, generator))
        total += float(hr.double().pow(2).sum())
    value = total / (probes * w.numel())
    return value if math.isfinite(value) else math.nan

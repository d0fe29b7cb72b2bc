"""GR scaling of every weighted layer, measured (Defazio & Bottou, ``scaling-calculus-relu-networks.txt``).

For a linear or conv layer ``y_l = W_l * x_l`` with fan-in ``n_l k_l^2`` and fan-out
``n_{l+1} k_l^2``, from one forward and one backward pass of a loss:

- activation scaling factor, eq. (1): ``s_l = n_l rho_l^2 E[dx_l^2] E[x_l^2]``, where
  ``n_l rho_l^2`` is the number of input elements per sample and ``dx_l`` the gradient that
  flows into ``x_l`` *through this layer* (a residual shortcut's share is not counted);
- layer scaling factor, eq. (2), intrinsic form: ``gamma_l = s_l / (n_{l+1} n_l k_l^2 E[W_l^2]^2)``
  (with groups, ``n_l n_{l+1}`` counts the connected channel pairs: ``fan_in * fan_out / k^2``);
- extrinsic form (section 4, appendix C): ``gamma_l = n_l k_l^2 rho_{l+1}^2 E[x_l^2]^2 E[dy_l^2] / E[y_l^2]``
  with ``rho_{l+1}^2`` the output positions and ``y_l`` the pre-bias output;
- weight-to-gradient ratio (section 5): ``nu_l = E[dW_l^2] / E[W_l^2]`` with the per-sample
  gradient ``dW_b`` (batch-size-1 semantics, section 2); Prop. 3 / appendix D: ``nu_l = gamma_l``;
- bias scaling, eq. (7): ``gamma_l^b = rho_{l+1}^2 E[dy_l^2] / E[y_l^2]``.

The loss is the paper's random ``y^T R y`` (R i.i.d. normal, Fig. 1) unless ``targets`` are
given (cross-entropy for integer targets, half squared error for float targets); it is summed
over the batch so that every gradient is a per-sample gradient. Second moments are uncentered
means over the batch and all elements, in float64.

NaN policy: nothing raises on non-finite values; a layer whose moments are non-finite or zero
gets NaN / inf figures (``0 / 0`` is NaN, ``x / 0`` is inf), exactly as float64 division gives.

Balancing (geometric re-initialization plus the fixed multipliers) is
``worker.engine.balancing.balance``; it builds on this module, which does not import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from nas.build import PreflightNet
from worker.engine._moments import (
    capture,
    per_sample_weight_grad_sq,
    preserved_buffers,
    random_quadratic_loss,
    receptive_field,
    task_loss,
)

__all__ = ["LayerScaling", "measure_scaling", "spread"]


@dataclass(frozen=True)
class LayerScaling:
    """Scaling figures of one weighted layer (``name`` is its module name in ``model.trace``)."""

    name: str
    fan_in: int
    fan_out: int
    kernel_area: int  # k_l^2 (1 for linear)
    activation_scaling: float  # eq. (1), at the layer's input
    gamma_intrinsic: float  # eq. (2)
    gamma_extrinsic: float  # section 4 / appendix C
    nu: float  # E[dW^2] / E[W^2], per-sample gradients
    gamma_bias: float  # eq. (7)
    x_sq: float  # E[x_l^2]
    dx_sq: float  # E[dx_l^2] through this layer
    y_sq: float  # E[y_l^2], pre-bias output
    dy_sq: float  # E[dy_l^2]
    w_sq: float  # E[W_l^2]
    dw_sq: float  # E[dW_b^2], per sample

    @property
    def gamma(self) -> float:
        """The figure balancing equalises: the extrinsic form, which Prop. 4 ties to the mean
        squared singular value of the layer's Hessian block."""
        return self.gamma_extrinsic


def spread(values: list[float]) -> float:
    """``max log v - min log v`` over the finite positive values (NaN if fewer than one)."""
    logs = [math.log(v) for v in values if math.isfinite(v) and v > 0]
    return max(logs) - min(logs) if logs else math.nan


def _div(a: float, b: float) -> float:
    return float(torch.tensor(a, dtype=torch.float64) / torch.tensor(b, dtype=torch.float64))


def _mean_sq(t: Tensor) -> float:
    return float(t.detach().double().pow(2).mean())


def measure_scaling(
    model: PreflightNet,
    x: Tensor,
    *,
    targets: Tensor | None = None,
    generator: torch.Generator | None = None,
    r: Tensor | None = None,
) -> list[LayerScaling]:
    """Measure eq. (1), eq. (2) both forms, nu and eq. (7) for every weighted layer.

    ``generator`` draws the random loss matrix R (torch's global RNG when None); ``r`` passes R
    itself, to repeat a measurement with the same loss. The model runs in its current mode,
    and its buffers (BatchNorm running statistics) are restored afterwards.

    >>> from nas import build_model
    >>> net = build_model({"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 4}]}]}, seed=0)
    >>> [s.name for s in measure_scaling(net, torch.randn(16, 8), generator=torch.Generator().manual_seed(0))]
    ['blocks.0.0']
    """
    layers = model.weighted_layers()
    modules = [module for _, module in layers]
    with preserved_buffers(model), capture(modules) as records:
        x_in = x.detach().clone().requires_grad_(True)
        out = model(x_in)
        if targets is None:
            loss = random_quadratic_loss(out, generator, reduction="sum", r=r)
        else:
            loss = task_loss(out, targets, reduction="sum")
        ys = [rec.y for rec in records]
        dys = torch.autograd.grad(loss, ys, retain_graph=True, allow_unused=True)
        result = []
        for (info, module), rec, dy in zip(layers, records, dys, strict=True):
            dy = torch.zeros_like(rec.y) if dy is None else dy
            (dx,) = torch.autograd.grad(rec.y, rec.x, grad_outputs=dy, retain_graph=True, allow_unused=True)
            dx = torch.zeros_like(rec.x) if dx is None else dx
            result.append(
                _layer_figures(info.module, info.fan_in or 0, info.fan_out or 0, module, rec.x, rec.y, dx, dy)
            )
    return result


def _layer_figures(
    name: str,
    fan_in: int,
    fan_out: int,
    module: torch.nn.Linear | torch.nn.Conv2d,
    x: Tensor,
    y: Tensor,
    dx: Tensor,
    dy: Tensor,
) -> LayerScaling:
    weight = module.weight
    bias = module.bias
    batch = x.shape[0]
    dw_sq = per_sample_weight_grad_sq(module, x, dy) if batch else math.nan
    if isinstance(module, torch.nn.Linear) and x.dim() == 3:
        # a linear layer on a sequence [N, T, D] is a 1x1 conv over T positions: channels first
        x, y, dx, dy = (t.transpose(1, 2) for t in (x, y, dx, dy))
    z = y if bias is None else y - bias.reshape(1, -1, *([1] * (y.dim() - 2)))
    k2 = receptive_field(weight)
    in_elems = x[0].numel()  # n_l rho_l^2
    out_positions = y[0].numel() // y.shape[1]  # rho_{l+1}^2
    x_sq, dx_sq, y_sq, dy_sq, w_sq = (
        _mean_sq(x),
        _mean_sq(dx),
        _mean_sq(z),
        _mean_sq(dy),
        _mean_sq(weight),
    )
    varsigma = in_elems * dx_sq * x_sq
    return LayerScaling(
        name=name,
        fan_in=fan_in,
        fan_out=fan_out,
        kernel_area=k2,
        activation_scaling=varsigma,
        gamma_intrinsic=_div(varsigma * k2, fan_in * fan_out * w_sq**2),
        gamma_extrinsic=_div(fan_in * out_positions * x_sq**2 * dy_sq, y_sq),
        nu=_div(dw_sq, w_sq),
        gamma_bias=_div(out_positions * dy_sq, y_sq),
        x_sq=x_sq,
        dx_sq=dx_sq,
        y_sq=y_sq,
        dy_sq=dy_sq,
        w_sq=w_sq,
        dw_sq=dw_sq,
    )

"""What the network can represent at its drawn initialization, from one forward pass: the terms
that rank networks which all train (``options.expressivity``; docs/conditioning.md, section 10).

The probe and the Jacobian and kernel residuals tell a network that cannot train from one that
can; among networks that all train they rank little (NAS-Bench-201: docs/nasbench201.md). Two
published measures of expressivity fill that gap, both read off the same forward pass on the
conditioning batch (neither is from the five papers):

- **NASWOT** (Mellor et al. 2021, eq. 2): each sample ``i`` of the batch gets the binary code
  ``c_i`` of every rectifier-like unit (pre-activation > 0); ``K_H[i, j] = N_A - d_H(c_i, c_j)``
  counts the units on which samples ``i`` and ``j`` agree, and the measure is ``log |K_H|``. A
  network whose units cut the inputs into many distinct regions has a well-conditioned ``K_H``.
- **MeCo** (Jiang et al. 2023, eq. 7): ``sum_l lambda_min(P(f^l))``, ``P`` the Pearson correlation
  matrix of weighted layer ``l``'s output. For a conv layer's feature map ``P`` is over the
  channels of the first sample (the paper's one-sample form, ``[C, H*W]``); a linear layer's output
  has one value per unit (per token in a transformer), so there ``P`` is over the samples'
  flattened feature vectors (``[N, D]``: our adaptation, which needs the batch). Eigenvalues are
  clipped at 0 (round-off); the sum is kept linear, in ``[0, L]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from worker.engine._moments import ForwardHook, forward_hooks, preserved_buffers
from worker.engine.autoinit import conditioning_mode

__all__ = [
    "ACTIVATIONS",
    "CONVS",
    "Expressivity",
    "activation_kernel_log_det",
    "agreement_kernel",
    "correlation_floor",
    "measure_expressivity",
]

# the units whose on / off pattern NASWOT codes (the input to each, > 0)
ACTIVATIONS = (nn.ReLU, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid)
CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_WEIGHTED = (nn.Linear, *CONVS)


@dataclass(frozen=True)
class Expressivity:
    """``naswot``: ``log |K_H|`` (None: no activation unit to code; ``-inf``: ``K_H`` singular, two
    samples with the same code); ``meco``: the sum of the layers' correlation floors (None: no
    weighted layer)."""

    naswot: float | None
    meco: float | None
    activation_units: int
    layers: int


def agreement_kernel(codes: Tensor) -> Tensor:
    """``c c^T + (1 - c)(1 - c)^T`` of the codes ``[N, n]`` (bool or 0/1): the count of units on
    which samples ``i`` and ``j`` agree, ``n - d_H``, in float64 (exact: the counts are integers).
    ``K_H`` over several layers is the sum of their kernels, so no layer's codes need be kept."""
    c = codes.double()
    return c @ c.T + (1 - c) @ (1 - c).T


def _log_det(kernel: Tensor) -> float:
    sign, log_det = torch.linalg.slogdet(kernel)
    return float(log_det) if sign > 0 else -math.inf


def activation_kernel_log_det(codes: Tensor) -> float:
    """NASWOT's ``log |K_H|`` from the codes ``[N, N_A]`` (bool or 0/1):
    ``K_H = c c^T + (1 - c)(1 - c)^T`` is ``N_A - d_H`` entry by entry. ``-inf`` when singular."""
    return _log_det(agreement_kernel(codes))


def correlation_floor(output: Tensor, feature_map: bool) -> float:
    """MeCo's ``lambda_min`` of one layer's output: a conv layer's feature map (``feature_map``) is
    correlated over its channels on the first sample (``[C, H*W]``), any other output over the
    samples' flattened feature vectors (``[N, D]``). A constant row has no correlation and counts
    as uncorrelated (0), as in the paper's code."""
    feature = output.detach().double()
    rows = feature[0].flatten(1) if feature_map else feature.flatten(1)
    if rows.shape[0] < 2:
        return 0.0
    corr = torch.corrcoef(rows).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    return max(float(torch.linalg.eigvalsh(corr)[0]), 0.0)


def measure_expressivity(model: nn.Module, x: Tensor) -> Expressivity:
    """Both measures from one forward pass of ``model`` on ``x`` in the conditioning mode (batch
    statistics, dropout off), with every buffer restored: the model is left as it was."""
    kernel = torch.zeros(len(x), len(x), dtype=torch.float64, device=x.device)  # K_H, summed layer by layer
    units = 0
    floors: list[float] = []

    def code(_module: nn.Module, inputs: tuple[Tensor, ...], _out: Tensor) -> None:
        nonlocal units
        codes = (inputs[0].detach() > 0).flatten(1)
        kernel.add_(agreement_kernel(codes))  # N x N, not every unit's code (N x N_A) at once
        units += codes.shape[1]

    def floor(module: nn.Module, _inputs: tuple[Tensor, ...], out: Tensor) -> None:
        floors.append(correlation_floor(out, feature_map=isinstance(module, CONVS)))

    hooks: list[tuple[nn.Module, ForwardHook]] = [(m, code) for m in model.modules() if isinstance(m, ACTIVATIONS)]
    hooks += [(m, floor) for m in model.modules() if isinstance(m, _WEIGHTED)]
    with forward_hooks(hooks), conditioning_mode(model), preserved_buffers(model), torch.no_grad():
        model(x)
    return Expressivity(
        naswot=_log_det(kernel) if units else None,
        meco=float(sum(floors)) if floors else None,
        activation_units=units,
        layers=len(floors),
    )

"""Helpers of ``worker.engine.balancing``: output std and its sensitivities, gamma deviations, the
common-factor search, and the residual-branch bookkeeping of section 11."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from nas.build import PreflightNet, Residual, apply_scales_
from worker.engine._moments import preserved_buffers

__all__ = [
    "is_in_residual",
    "log_deviations",
    "log_std_error",
    "common_factor",
    "output_sensitivities",
    "measure_output_std",
    "residual_factor",
    "residual_undo",
    "unweighted_branch_share",
]

# common_factor: a secant Newton search in log space for one common weight factor.
FACTOR_PROBE = 0.1  # first trial log-factor: measures the slope d log std / d log t
MIN_FACTOR_SLOPE = 1e-3  # below: the output does not respond to a common factor
FACTOR_ITERATIONS = 12  # cap on secant steps after the probe (each a forward pass)
FACTOR_TOL = 1e-10  # stop when |log(std(out) / target)| is below this (float64 round-off)
MAX_FACTOR_STEP = 5.0  # at most a factor e^5 per secant step
MAX_LOG_FACTOR = 40.0  # a factor beyond e^40: the target is out of reach
# the secant slope is kept within [MIN_SLOPE_RATIO, MAX_SLOPE_RATIO] times the probe's slope0
MIN_SLOPE_RATIO, MAX_SLOPE_RATIO = 0.1, 10.0
# unweighted_branch_share: bodies adding at most this much over 1/L are left alone (1% slack).
MAX_BRANCH_EXCESS = 1.01


def log_deviations(gammas: list[float]) -> list[float | None]:
    """``log gamma_l - mean log gamma`` over the finite positive gammas; None elsewhere."""
    logs = [math.log(g) if math.isfinite(g) and g > 0 else None for g in gammas]
    finite = [v for v in logs if v is not None]
    if not finite:
        return [None] * len(gammas)
    ref = sum(finite) / len(finite)
    return [None if v is None else v - ref for v in logs]


def output_sensitivities(model: PreflightNet, x: Tensor, weights: list[str], biases: list[str | None]) -> list[float]:
    """``d log std(out) / d log s_l = <W_l, grad_W_l log std> + <b_l, grad_b_l log std>`` (the bias
    term where the layer's bias moves with it, ``biases[l]`` not None): Euler's identity."""
    params = dict(model.named_parameters())
    names = [w for w in weights] + [b for b in biases if b is not None]
    with preserved_buffers(model), torch.enable_grad():
        log_std = torch.log(model(x).double().std())
        if not bool(torch.isfinite(log_std)):
            return [math.nan] * len(weights)
        grads = torch.autograd.grad(log_std, [params[k] for k in names], allow_unused=True)
    euler = {
        k: 0.0 if g is None else float((params[k].detach().double() * g.double()).sum())
        for k, g in zip(names, grads, strict=True)
    }
    return [euler[w] + (euler[b] if b is not None else 0.0) for w, b in zip(weights, biases, strict=True)]


def log_std_error(model: PreflightNet, x: Tensor, target: float) -> float:
    std = measure_output_std(model, x)
    return math.log(std / target) if std > 0 and math.isfinite(std) else math.nan


def measure_output_std(model: PreflightNet, x: Tensor) -> float:
    with preserved_buffers(model), torch.no_grad():
        return float(model(x).double().std()) if x.shape[0] else math.nan


@dataclass
class _CommonFactor:
    """``common_factor``'s state: the model with ``e^total`` applied to every one of ``weights``."""

    model: PreflightNet
    x: Tensor
    weights: list[str]
    target: float
    total: float = 0.0  # log t applied so far

    def residual(self, log_t: float) -> float:
        """Move the common factor to ``e^log_t``; ``log(std(out) / target)`` there."""
        apply_scales_(self.model, {w: math.exp(log_t - self.total) for w in self.weights})
        self.total = log_t
        return log_std_error(self.model, self.x, self.target)


def common_factor(model: PreflightNet, x: Tensor, weights: list[str], target: float) -> float:
    """Newton search in log space for one common weight factor t with std(out) = target, the
    slope d log std / d log t measured by a probe and updated by secant (clamped); scales the
    model in place and returns t (1.0 when the output std is zero or non-finite)."""
    factor = _CommonFactor(model, x, weights, target)
    f0 = factor.residual(0.0)
    if not weights or not math.isfinite(f0):
        return 1.0
    u0, u1 = 0.0, FACTOR_PROBE
    f1 = factor.residual(u1)
    slope0 = (f1 - f0) / (u1 - u0)
    if not (math.isfinite(slope0) and slope0 > MIN_FACTOR_SLOPE):
        factor.residual(0.0)  # the output does not respond to a common factor (or is non-finite)
        return 1.0
    slope = slope0
    for _ in range(FACTOR_ITERATIONS):
        if abs(f1) < FACTOR_TOL:
            break
        step = max(-MAX_FACTOR_STEP, min(MAX_FACTOR_STEP, -f1 / slope))
        if abs(u1 + step) > MAX_LOG_FACTOR:  # the target is out of reach
            break
        u0, f0, u1 = u1, f1, u1 + step
        f1 = factor.residual(u1)
        if not math.isfinite(f1):
            factor.residual(u0)
            break
        if f1 != f0:
            slope = min(MAX_SLOPE_RATIO * slope0, max(MIN_SLOPE_RATIO * slope0, (f1 - f0) / (u1 - u0)))
    return math.exp(factor.total)


def residual_factor(model: PreflightNet, module_name: str) -> tuple[float, str]:
    """Product of |beta| (body) and |alpha| (shortcut) over the residual layers enclosing a module."""
    parts, c, path = module_name.split("."), 1.0, []
    for i in range(1, len(parts) - 1):
        parent = model.get_submodule(".".join(parts[:i]))
        if isinstance(parent, Residual) and parts[i] in ("body", "shortcut"):
            factor = abs(parent.beta if parts[i] == "body" else parent.alpha)
            if factor > 0:
                c *= factor
                path.append(f"{'beta' if parts[i] == 'body' else 'alpha'}={factor:g} at {'.'.join(parts[:i])}")
    return c, ", ".join(path)


def is_in_residual(model: PreflightNet, module_name: str) -> bool:
    parts = module_name.split(".")
    return any(isinstance(model.get_submodule(".".join(parts[:i])), Residual) for i in range(1, len(parts)))


def residual_undo(model: PreflightNet) -> list[tuple[str, float, str]]:
    """Section 11's fixed multiplier after a body whose m weighted layers were scaled by beta."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, Residual) and module.beta not in (0.0, 1.0, -1.0):
            m = sum(1 for sub in module.body.modules() if isinstance(sub, torch.nn.Linear | torch.nn.Conv2d))
            if m:
                value = abs(module.beta) ** (-m / 2)
                out.append(
                    (
                        f"{name}.body",
                        value,
                        f"restores E[F(x)^2] after {m} weighted layers scaled by beta={module.beta:g} (sec 11); fixed "
                        "forward multiplier, not an init scale",
                    )
                )
    return out


_NORMS = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)


def unweighted_branch_share(model: PreflightNet, module_name: str) -> tuple[float, str]:
    """Multiplier on one of the m weighted layers of an unweighted residual body (|alpha| >= 1)
    so that the body adds 1/L of what the shortcut carries.

    Section 11 assumes alpha^2 + beta^2 = 1 and E[F(x)^2] = E[x^2]; with alpha = beta = 1 each
    of the L blocks then multiplies the forward second moment by (1 + s^2) = 2 (B.7), 2^L over
    the network. After the closed form (geometric fans, each body layer's variance times |beta|
    by ``residual_factor``; the section's undo multiplier is not in the scales) the body adds
    s^2 = beta^2 |beta|^m of E[x^2], the shortcut alpha^2. The share (L s^2 / alpha^2)^(-1/(2m))
    per layer leaves s^2 = alpha^2 / L, a growth of alpha^2 (1 + 1/L) per block: (1 + 1/L)^L
    <= e over the stack for alpha = 1, as weighted blocks with beta^2 = 1/L would give.

    Only ever a shrink: 1 outside such bodies, for weighted blocks (|alpha| < 1), bodies with a
    normalization layer (their scale is the norm's affine, which AutoInit tunes) and where
    L s^2 <= alpha^2 already (a designer's small branch is not scaled up). In nested residuals
    the innermost block around the layer decides. The estimate of s^2 assumes what the closed
    form assumes (positively homogeneous layers of one kernel size); AutoInit corrects the rest.
    """
    residuals = sum(1 for m in model.modules() if isinstance(m, Residual))
    parts = module_name.split(".")
    for i in range(len(parts) - 2, 0, -1):  # innermost enclosing body first
        parent = model.get_submodule(".".join(parts[:i]))
        if not (isinstance(parent, Residual) and parts[i] == "body"):
            continue
        alpha, beta = abs(parent.alpha), abs(parent.beta)
        if alpha < 1.0 or any(isinstance(sub, _NORMS) for sub in parent.body.modules()):
            return 1.0, ""  # weighted, or the body's scale is its norm's (AutoInit tunes that)
        m = sum(1 for sub in parent.body.modules() if isinstance(sub, torch.nn.Linear | torch.nn.Conv2d))
        excess = residuals * beta**2 * beta**m / alpha**2  # L s^2 / alpha^2
        if excess <= MAX_BRANCH_EXCESS:
            return 1.0, ""
        where = f"alpha={parent.alpha:g}, beta={parent.beta:g} at {'.'.join(parts[:i])}, L={residuals}, m={m}"
        return excess ** (-1.0 / (2 * m)), where
    return 1.0, ""

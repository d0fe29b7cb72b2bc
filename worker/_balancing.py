"""GR balancing: geometric re-initialization and the fixed multipliers of the scaling calculus.

Defazio & Bottou, ``scaling-calculus-relu-networks.txt``. ``balance`` returns ``scales``
({parameter name: multiplier}) *relative to the weights of the model it is given*, so that
``nas.build_model(spec, scales=b.scales, seed=s)`` rebuilds the balanced network when the model
was ``nas.build_model(spec, seed=s)``. Steps, in this order, and why:

1. Input scaling (section 8.1): data scaled by ``u`` with ``E[(u x_0)^2] = 1 / sqrt(n_0 k_0^2)``
   balances the first layer's weights against its biases. It is a property of the *data*: it
   goes into ``scales`` only when the network starts with a ``scale`` layer (its ``factor``).
   Folding it into the first weight would change that layer's gamma by ``u^-4`` relative to the
   others and undo the equality that step 3 makes, so by default it is reported only
   (``Balancing.input_scale``; multiply the data by it). ``fold_input_scale=True`` folds it into
   the first weighted layer anyway, after step 4, and says so.
2. Geometric re-initialization, eq. (3) with ``c = 2 / k_typ`` (section 6.2, ``k_typ`` the most
   common kernel size): ``E[W^2] = c / (k sqrt(n_l n_{l+1}))``, times the residual-branch factor
   of section 11 (``beta`` for layers in a body, ``alpha`` in a shortcut, multiplied through
   nested residuals). The kernel-size correction of section 6.2 (a fixed multiplier
   ``sqrt(k_typ / k)`` *before* a layer whose kernel differs) and the residual "undo" multiplier
   (``beta^{-m/2}`` after a body of ``m`` weighted layers) are forward multipliers that an
   initialization scale cannot express without changing gamma; they are reported
   (``in_scales=False``) and the output normalization absorbs their effect on the output.
3. Measured refinement: where the theory's assumptions fail (pooling, BatchNorm, residual
   mixing, non-ReLU activations), ``gamma_l`` is measured and each weight multiplied by
   ``(gamma_l / gmean gamma)^{1/4}``: scaling a layer by ``s`` divides its gamma by ``s^4`` relative
   to the others (exact for positively homogeneous nets with zero biases, where one step suffices).
4. Output normalization (section 10): one common factor on every weight sets the output standard
   deviation to ``output_std`` (0.05), found by a secant search in log space. A common factor
   keeps the gamma ratios of a homogeneous net, where a fixed multiplier on the head would not.
   Steps 3 and 4 alternate ``rounds`` times for nets where they interact (BatchNorm).
5. Biases (section 8): zero biases stay zero (the model of section 3). A non-zero bias
   (``torch_default``) is multiplied by its layer's pre-bias output RMS ratio, so the bias keeps
   its size relative to the pre-activation.

Composition with AutoInit: balance the AutoInit-tuned model and multiply the two ``scales``
maps entry by entry (balancing's weight multipliers are relative to the model it is given).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from nas.build import PreflightNet, Residual, Scale, apply_scales_
from worker._moments import preserved_buffers, random_matrix, receptive_field

if TYPE_CHECKING:
    from worker.scaling import LayerScaling

__all__ = ["Balancing", "Multiplier", "balance"]


@dataclass(frozen=True)
class Multiplier:
    """One multiplier balancing added: to a parameter (``in_scales``) or reported only."""

    name: str  # parameter name, "input", or "<module> (input)" / "<module> (output)"
    kind: str  # input | geometric | residual_branch | kernel_correction | residual_undo | refinement | output | bias
    value: float
    reason: str
    in_scales: bool


@dataclass(frozen=True)
class Balancing:
    """Result of ``balance``. For every name, ``scales[name]`` is the product of the
    ``in_scales`` multipliers with that name."""

    scales: dict[str, float]
    multipliers: tuple[Multiplier, ...]
    input_scale: float
    before: tuple[LayerScaling, ...]
    after: tuple[LayerScaling, ...]
    output_std_before: float
    output_std_after: float

    @property
    def gamma_log_spread_before(self) -> float:
        from worker.scaling import spread

        return spread([s.gamma for s in self.before])

    @property
    def gamma_log_spread_after(self) -> float:
        from worker.scaling import spread

        return spread([s.gamma for s in self.after])


def balance(
    model: PreflightNet,
    x: Tensor,
    *,
    output_std: float = 0.05,
    generator: torch.Generator | None = None,
    rounds: int = 10,
    tol: float = 1e-3,
    typical_kernel: int | None = None,
    fold_input_scale: bool = False,
    refine_residual: bool = True,
) -> Balancing:
    """Balance gamma_l across weighted layers and set the output std (steps in the module doc).

    Cost: ``rounds + 2`` forward-backward measurements and a few forward passes per round.
    The model is not modified. A non-finite or zero output std skips step 4 (reason recorded).
    """
    if not (output_std > 0 and math.isfinite(output_std)):
        raise ValueError(f"output_std must be a positive finite number, but got {output_std=}.")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, but got {rounds=}.")
    from worker.scaling import measure_scaling

    work = copy.deepcopy(model)
    for module in work.modules():  # dropout off: deterministic moments (it maintains scaling, B.5)
        if isinstance(module, torch.nn.Dropout):
            module.eval()
    layers = work.weighted_layers()
    weights = [f"{info.module}.weight" for info, _ in layers]
    with preserved_buffers(work), torch.no_grad():
        out_dim = int(work(x).shape[1])
    r = random_matrix(out_dim, generator, x)  # one loss for every measurement: exact ratios

    def measure() -> list[LayerScaling]:
        return measure_scaling(work, x, r=r)

    before = measure()
    std_before = _output_std(work, x)
    multipliers: list[Multiplier] = []
    scales: dict[str, float] = {}

    def apply(name: str, kind: str, value: float, reason: str, *, applied: bool = False) -> None:
        multipliers.append(Multiplier(name, kind, value, reason, True))
        scales[name] = scales.get(name, 1.0) * value
        if not applied:
            apply_scales_(work, {name: value})

    # 1. input scaling (section 8.1)
    first_info, first_module = layers[0] if layers else (None, None)
    input_scale = 1.0
    if first_info is not None:
        x_sq = float(x.detach().double().pow(2).mean())
        input_scale = (1.0 / (math.sqrt(first_info.fan_in or 1) * x_sq)) ** 0.5 if x_sq > 0 else 1.0
        first = work.blocks[0][0]
        reason = f"E[(u x_0)^2] = 1/sqrt(n_0 k_0^2) = 1/sqrt({first_info.fan_in}) balances first-layer weights against biases (sec 8.1)"
        if isinstance(first, Scale):
            apply(
                "blocks.0.0.factor",
                "input",
                input_scale,
                reason + "; realized by the leading scale layer",
            )
        else:
            multipliers.append(
                Multiplier(
                    "input",
                    "input",
                    input_scale,
                    reason + "; multiply the data by it (not in scales)",
                    False,
                )
            )

    # 2. geometric re-initialization with residual-branch factors (eq. 3, sec 6.2, sec 11)
    kernels = [math.isqrt(receptive_field(m.weight)) for _, m in layers]
    k_typ = typical_kernel or (Counter(kernels).most_common(1)[0][0] if kernels else 1)
    for (info, module), name, k in zip(layers, weights, kernels, strict=True):
        fan_in, fan_out = info.fan_in or 1, info.fan_out or 1
        target = (2.0 / k_typ) * k / math.sqrt(fan_in * fan_out)  # c / (k sqrt(n_l n_{l+1}))
        w_sq = float(module.weight.detach().double().pow(2).mean())
        if w_sq > 0 and math.isfinite(w_sq):
            apply(
                name,
                "geometric",
                math.sqrt(target / w_sq),
                f"E[W^2] = c/(k sqrt(n_l n_l+1)), c = 2/k_typ, k_typ = {k_typ} (eq. 3, sec 6.2)",
            )
        c, path = _residual_factor(work, info.module)
        if c != 1.0:
            apply(
                name,
                "residual_branch",
                math.sqrt(c),
                f"variance times c = {c:g} ({path}) so gamma matches outside the block (sec 11)",
            )
        if k != k_typ:
            multipliers.append(Multiplier(f"{info.module} (input)", "kernel_correction", math.sqrt(k_typ / k),
                                          f"fixed multiplier before a {k}x{k} layer when k_typ = {k_typ} (sec 6.2); not expressible as an init scale", False))  # fmt: skip
    for module_name, value, reason in _residual_undo(work):
        multipliers.append(
            Multiplier(f"{module_name} (output)", "residual_undo", value, reason, False)
        )

    # 3-5. measured refinement; biases follow their layer's output (sec 8); output normalization
    bias_scale = {
        f"{info.module}.bias": 1.0
        for info, m in layers
        if m.bias is not None and bool(m.bias.detach().ne(0).any())
    }

    def adjust_biases(current: list[LayerScaling]) -> None:
        for info_scaling, start in zip(current, before, strict=True):
            name = f"{info_scaling.name}.bias"
            if (
                name in bias_scale
                and start.y_sq > 0
                and math.isfinite(info_scaling.y_sq)
                and info_scaling.y_sq > 0
            ):
                want = math.sqrt(info_scaling.y_sq / start.y_sq)
                if abs(math.log(want / bias_scale[name])) > 1e-12:
                    apply(
                        name,
                        "bias",
                        want / bias_scale[name],
                        "non-zero bias keeps its size relative to the pre-bias output RMS (sec 8)",
                    )
                    bias_scale[name] = want

    def normalize_output() -> None:
        t = _normalize_output(work, x, weights + list(bias_scale), output_std)
        if t != 1.0:
            for name in weights + list(bias_scale):
                apply(
                    name,
                    "output",
                    t,
                    f"common factor setting the output std to {output_std:g} (sec 10)",
                    applied=True,
                )
            for name in bias_scale:
                bias_scale[name] *= t

    # Joint Newton-type step on the log-scales a_l: move each layer by dev_l / slope_l (its own
    # gamma response, secant-estimated, 4 for homogeneous layers) plus c / slope_l, a direction
    # that leaves the gamma deviations unchanged to first order, with c fixing the output std
    # through the sensitivities d log std / d a_l = <W_l, grad_W_l log std> (one backward).
    in_residual = [_in_residual(work, info.module) for info, _ in layers]
    slopes = [4.0] * len(weights)
    last: list[tuple[float, float] | None] = [None] * len(weights)  # (deviation, own step)
    for _ in range(rounds):
        gammas = [s.gamma for s in measure()]
        # refine_residual=False keeps layers in residual branches at the section-11 factor. In a
        # branch, gamma is not the Hessian block's mean squared singular value (the shortcut makes
        # dy_l not proportional to y_l, so Prop. 4 fails); measured: it does not help either way.
        deviations = _log_deviations(
            [
                g if refine_residual or not inside else math.nan
                for g, inside in zip(gammas, in_residual, strict=True)
            ]
        )
        error = _log_std_error(work, x, output_std)
        if all(d is None or abs(d) < tol for d in deviations) and abs(error) < 1e-6:
            break
        for i, d in enumerate(deviations):
            prev = last[i]
            if d is not None and prev is not None and abs(prev[1]) > 1e-6:
                slopes[i] = min(8.0, max(1.0, (prev[0] - d) / prev[1]))
        own = [0.0 if d is None else d / slope for d, slope in zip(deviations, slopes, strict=True)]
        sens = _output_sensitivities(work, x, weights)
        top = max((abs(v) for v in sens if math.isfinite(v)), default=0.0)
        # the common direction uses only layers the output responds to (not those behind a norm)
        common = [
            1.0 / slope if math.isfinite(v) and abs(v) > 0.1 * top else 0.0
            for slope, v in zip(slopes, sens, strict=True)
        ]
        denom = sum(si * ci for si, ci in zip(sens, common, strict=True))
        c = 0.0
        if math.isfinite(error) and math.isfinite(denom) and abs(denom) > 1e-6:
            c = (-error - sum(si * oi for si, oi in zip(sens, own, strict=True))) / denom
        for i, (name, d) in enumerate(zip(weights, deviations, strict=True)):
            step = max(-1.0, min(1.0, own[i] + c * common[i]))  # at most a factor e per round
            last[i] = None if d is None else (d, own[i])
            if step != 0.0:
                apply(
                    name,
                    "refinement",
                    math.exp(step),
                    f"joint step: gamma_l towards the geometric mean (gamma ~ s^-{slopes[i]:.2g}) and output std (sec 4, 10)",
                )
        if bias_scale:
            adjust_biases(measure())
    normalize_output()
    if fold_input_scale and first_info is not None and not isinstance(work.blocks[0][0], Scale):
        apply(
            weights[0],
            "input",
            input_scale,
            "input scaling folded into the first weight (changes its gamma by u^-4)",
        )
        normalize_output()
    after = measure()
    return Balancing(
        scales=scales,
        multipliers=tuple(multipliers),
        input_scale=input_scale,
        before=tuple(before),
        after=tuple(after),
        output_std_before=std_before,
        output_std_after=_output_std(work, x),
    )


def _log_deviations(gammas: list[float]) -> list[float | None]:
    """``log gamma_l - mean log gamma`` over the finite positive gammas; None elsewhere."""
    logs = [math.log(g) if math.isfinite(g) and g > 0 else None for g in gammas]
    finite = [v for v in logs if v is not None]
    if not finite:
        return [None] * len(gammas)
    ref = sum(finite) / len(finite)
    return [None if v is None else v - ref for v in logs]


def _output_sensitivities(model: PreflightNet, x: Tensor, weights: list[str]) -> list[float]:
    """``d log std(out) / d log s_l = <W_l, grad_{W_l} log std(out)>`` for every weight (Euler)."""
    params = dict(model.named_parameters())
    tensors = [params[w] for w in weights]
    with preserved_buffers(model), torch.enable_grad():
        log_std = torch.log(model(x).double().std())
        if not bool(torch.isfinite(log_std)):
            return [math.nan] * len(weights)
        grads = torch.autograd.grad(log_std, tensors, allow_unused=True)
    return [
        0.0 if g is None else float((t.detach().double() * g.double()).sum())
        for t, g in zip(tensors, grads, strict=True)
    ]


def _log_std_error(model: PreflightNet, x: Tensor, target: float) -> float:
    std = _output_std(model, x)
    return math.log(std / target) if std > 0 and math.isfinite(std) else math.nan


def _output_std(model: PreflightNet, x: Tensor) -> float:
    with preserved_buffers(model), torch.no_grad():
        return float(model(x).double().std()) if x.shape[0] * 1 else math.nan


def _normalize_output(model: PreflightNet, x: Tensor, weights: list[str], target: float) -> float:
    """Newton search in log space for one common weight factor t with std(out) = target, the
    slope d log std / d log t measured by a probe and updated by secant (clamped); scales the
    model in place and returns t (1.0 when the output std is zero or non-finite)."""
    total = 0.0  # log t applied so far

    def residual(log_t: float) -> float:
        nonlocal total
        apply_scales_(model, {w: math.exp(log_t - total) for w in weights})
        total = log_t
        return _log_std_error(model, x, target)

    f0 = residual(0.0)
    if not weights or not math.isfinite(f0):
        return 1.0
    u0, u1 = 0.0, 0.1
    f1 = residual(u1)
    slope0 = (f1 - f0) / (u1 - u0)
    if not (math.isfinite(slope0) and slope0 > 1e-3):
        residual(0.0)  # the output does not respond to a common factor (or is non-finite)
        return 1.0
    slope = slope0
    for _ in range(12):
        if abs(f1) < 1e-10:
            break
        step = max(-5.0, min(5.0, -f1 / slope))
        if abs(u1 + step) > 40.0:  # factor e^40: the target is out of reach
            break
        u0, f0, u1 = u1, f1, u1 + step
        f1 = residual(u1)
        if not math.isfinite(f1):
            residual(u0)
            break
        if f1 != f0:
            slope = min(10 * slope0, max(0.1 * slope0, (f1 - f0) / (u1 - u0)))
    return math.exp(total)


def _residual_factor(model: PreflightNet, module_name: str) -> tuple[float, str]:
    """Product of |beta| (body) and |alpha| (shortcut) over the residual layers enclosing a module."""
    parts, c, path = module_name.split("."), 1.0, []
    for i in range(1, len(parts) - 1):
        parent = model.get_submodule(".".join(parts[:i]))
        if isinstance(parent, Residual) and parts[i] in ("body", "shortcut"):
            factor = abs(parent.beta if parts[i] == "body" else parent.alpha)
            if factor > 0:
                c *= factor
                path.append(
                    f"{'beta' if parts[i] == 'body' else 'alpha'}={factor:g} at {'.'.join(parts[:i])}"
                )
    return c, ", ".join(path)


def _in_residual(model: PreflightNet, module_name: str) -> bool:
    parts = module_name.split(".")
    return any(
        isinstance(model.get_submodule(".".join(parts[:i])), Residual) for i in range(1, len(parts))
    )


def _residual_undo(model: PreflightNet) -> list[tuple[str, float, str]]:
    """Section 11's fixed multiplier after a body whose m weighted layers were scaled by beta."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, Residual) and module.beta not in (0.0, 1.0, -1.0):
            m = sum(
                1
                for sub in module.body.modules()
                if isinstance(sub, torch.nn.Linear | torch.nn.Conv2d)
            )
            if m:
                value = abs(module.beta) ** (-m / 2)
                out.append(
                    (
                        f"{name}.body",
                        value,
                        f"restores E[F(x)^2] after {m} weighted layers scaled by beta={module.beta:g} (sec 11); fixed forward multiplier, not an init scale",
                    )
                )
    return out

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
   the first weighted layer anyway, after step 3, and says so. Dropout is off while balancing.
2. Geometric re-initialization, eq. (3) with ``c = 2 / k_typ`` (section 6.2, ``k_typ`` the most
   common kernel size): ``E[W^2] = c / (k sqrt(n_l n_{l+1}))``, times the residual-branch factor
   of section 11 (``beta`` for layers in a body, ``alpha`` in a shortcut, multiplied through
   nested residuals). The kernel-size correction of section 6.2 (a fixed multiplier
   ``sqrt(k_typ / k)`` *before* a layer whose kernel differs) and the residual "undo" multiplier
   (``beta^{-m/2}`` after a body of ``m`` weighted layers) are forward multipliers that an
   initialization scale cannot express without changing gamma; they are reported
   (``in_scales=False``); step 3 absorbs their effect on gamma and on the output. Bodies of
   *unweighted* blocks (``|alpha| >= 1``, no norm inside), which section 11 does not cover, get
   a share ``(L s^2)^(-1/(2m))`` per layer so that each of the ``L`` blocks adds ``1/L`` of the
   stream's second moment (B.7; ``_balancing_parts.unweighted_branch_share``): with
   ``alpha = beta = 1`` the closed form alone doubles it per block.
3. Measured refinement and output normalization (section 10, std ``output_std`` = 0.05), solved
   together: a Newton-type iteration on the log-scales ``a_l`` of the weights whose residuals are
   the deviations ``log gamma_l - mean log gamma`` and ``log(std(out) / output_std)``. The gamma
   rows start from the homogeneous model (scaling one layer by ``s`` divides its gamma by ``s^4``
   relative to the others; exact for positively homogeneous nets with zero biases, where one
   step suffices) and are corrected by Broyden rank-one updates where the theory's assumptions
   fail (pooling, BatchNorm / GroupNorm / LayerNorm, residual mixing, non-ReLU activations); the
   output row is measured each round (Euler: ``d log std / d a_l = <W_l, grad_W_l log std>``). A
   fixed multiplier on the head, as the paper uses, cannot be written as an init scale without
   moving the head's gamma, hence the joint solve. One forward-backward per round, ``rounds``
   at most (16), with steps of at most a factor e; a final common factor fixes the output std
   exactly.
4. Biases (section 8): zero biases stay zero (the model of section 3); the paper has no rule for
   non-zero (``torch_default``) biases, and here each moves with its own layer's weight.

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

from nas.build import PreflightNet, Scale, apply_scales_
from worker.engine._balancing_parts import (
    common_factor,
    is_in_residual,
    log_deviations,
    log_std_error,
    measure_output_std,
    output_sensitivities,
    residual_factor,
    residual_undo,
    unweighted_branch_share,
)
from worker.engine._moments import preserved_buffers, random_matrix, receptive_field
from worker.engine.hessian import hessian_figures

if TYPE_CHECKING:
    from worker.engine.scaling import LayerScaling

__all__ = ["Balancing", "Multiplier", "balance"]


@dataclass(frozen=True)
class Multiplier:
    """One multiplier balancing added: to a parameter (``in_scales``) or reported only."""

    name: str  # parameter name, "input", or "<module> (input)" / "<module> (output)"
    kind: str  # input | geometric | residual_branch | residual_share | kernel_correction | residual_undo | refinement | output | bias
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
    converged: bool  # refined gammas within 0.05 of their log-mean and output std within 0.1%;
    # always False for rounds=0 (the closed form: nothing is refined or measured)
    passes: int  # forward-backward passes spent (gamma measurements and output sensitivities)

    @property
    def gamma_log_spread_before(self) -> float:
        from worker.engine.scaling import spread

        return spread([s.gamma for s in self.before])

    @property
    def gamma_log_spread_after(self) -> float:
        from worker.engine.scaling import spread

        return spread([s.gamma for s in self.after])


def balance(
    model: PreflightNet,
    x: Tensor,
    *,
    output_std: float = 0.05,
    generator: torch.Generator | None = None,
    rounds: int = 16,
    tol: float = 1e-3,
    typical_kernel: int | None = None,
    fold_input_scale: bool = False,
    refine_residual: bool = True,
    target: str = "gamma",
    hessian_probes: int = 8,
    hessian_batch: int = 32,
) -> Balancing:
    """Balance gamma_l across weighted layers and set the output std (steps in the module doc).

    ``rounds=0``: the closed form only (input scale, geometric init, residual factors): no
    forward pass; ``before``/``after`` empty, output stds NaN, the output std left to AutoInit.
    Cost: at most ``rounds + 2`` gamma measurements (forward + backward each) and one
    forward-backward per round for the output sensitivities, plus a few forward passes for the
    final common factor. The model is not modified. With a non-finite or zero output std the
    output row is dropped and the output left as it is.
    """
    if not (output_std > 0 and math.isfinite(output_std)):
        raise ValueError(f"output_std must be a positive finite number, but got {output_std=}.")
    if target not in ("gamma", "hessian"):
        raise ValueError(f'target must be "gamma" or "hessian", but got {target=}.')
    if rounds < 0:
        raise ValueError(f"rounds must be at least 0, but got {rounds=}.")
    from worker.engine.scaling import measure_scaling

    work = copy.deepcopy(model) if rounds else model  # the closed form only reads the model
    for module in work.modules() if rounds else ():  # dropout off: deterministic moments (B.5)
        if isinstance(module, torch.nn.Dropout):
            module.eval()
    layers = work.weighted_layers()
    weights = [f"{info.module}.weight" for info, _ in layers]
    with preserved_buffers(work), torch.no_grad():
        out_dim = int(work(x).shape[1]) if rounds else 0
    r = random_matrix(out_dim, generator, x) if rounds else None  # one loss for every measurement

    passes = [0]  # forward-backward passes, for cost accounting

    def measure() -> list[LayerScaling]:
        passes[0] += 1
        return measure_scaling(work, x, r=r)

    seed = int(
        torch.randint(
            0,
            2**62,
            (1,),
            generator=generator,
            device=generator.device if generator is not None else "cpu",
        )
    )

    def balanced_values() -> list[float]:
        """gamma_l, or the Hessian blocks' mean squared singular values with fixed probes (the
        same R and probe vectors every round: a deterministic function of the scales)."""
        if target == "gamma":
            return [s.gamma for s in measure()]
        passes[0] += 1 + len(weights) * (hessian_probes + 1)
        g = torch.Generator(
            device=generator.device if generator is not None else x.device
        ).manual_seed(seed)
        return [
            h.mean_sq_singular_value
            for h in hessian_figures(
                work,
                x[:hessian_batch],
                iterations=1,
                probes=hessian_probes,
                generator=g,
                chain_rule=False,
            )
        ]

    before = measure() if rounds else []
    std_before = measure_output_std(work, x) if rounds else math.nan
    multipliers: list[Multiplier] = []
    scales: dict[str, float] = {}

    def apply(name: str, kind: str, value: float, reason: str, *, applied: bool = False) -> None:
        multipliers.append(Multiplier(name, kind, value, reason, True))
        scales[name] = scales.get(name, 1.0) * value
        if not applied and rounds:
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
        variance = (2.0 / k_typ) * k / math.sqrt(fan_in * fan_out)  # c / (k sqrt(n_l n_{l+1}))
        w_sq = float(module.weight.detach().double().pow(2).mean())
        if w_sq > 0 and math.isfinite(w_sq):
            apply(
                name,
                "geometric",
                math.sqrt(variance / w_sq),
                f"E[W^2] = c/(k sqrt(n_l n_l+1)), c = 2/k_typ, k_typ = {k_typ} (eq. 3, sec 6.2)",
            )
        c, path = residual_factor(work, info.module)
        if c != 1.0:
            apply(
                name,
                "residual_branch",
                math.sqrt(c),
                f"variance times c = {c:g} ({path}) so gamma matches outside the block (sec 11)",
            )
        share, path = unweighted_branch_share(work, info.module)
        if share != 1.0:
            apply(name, "residual_share", share, f"unweighted residual body ({path}): adds 1/L of the stream's second moment (B.7, sec 11)")
        if k != k_typ:
            multipliers.append(Multiplier(f"{info.module} (input)", "kernel_correction", math.sqrt(k_typ / k),
                                          f"fixed multiplier before a {k}x{k} layer when k_typ = {k_typ} (sec 6.2); not expressible as an init scale", False))  # fmt: skip
    for module_name, value, reason in residual_undo(work):
        multipliers.append(
            Multiplier(f"{module_name} (output)", "residual_undo", value, reason, False)
        )

    if not rounds:  # the closed form (steps 1-2): no forward pass; AutoInit sets the output std
        return Balancing(scales, tuple(multipliers), input_scale, (), (), math.nan, math.nan, False, 0)  # fmt: skip
    # 3-5. measured refinement and output std; a non-zero bias moves with its layer's weight
    bias_scale = {
        f"{info.module}.bias"
        for info, m in layers
        if m.bias is not None and bool(m.bias.detach().ne(0).any())
    }
    biases = [n.removesuffix("weight") + "bias" for n in weights]

    def move(name: str, kind: str, value: float, reason: str, *, applied: bool = False) -> None:
        apply(name, kind, value, reason, applied=applied)
        bias = name.removesuffix("weight") + "bias"
        if bias in bias_scale:
            apply(
                bias,
                "bias",
                value,
                "a non-zero bias moves with its layer's weight (sec 8: the paper's biases are zero)",
                applied=applied,
            )

    def normalize_output() -> None:
        t = common_factor(work, x, weights + sorted(bias_scale), output_std)
        if t != 1.0:
            for name in weights:
                move(
                    name,
                    "output",
                    t,
                    f"common factor setting the output std to {output_std:g} (sec 10)",
                    applied=True,
                )

    # Newton-type iteration on the log-scales a_l (Broyden): the residuals are the gamma
    # deviations dev_l = log gamma_l - mean log gamma and the output error e = log(std / target).
    # The deviation rows start from the homogeneous model (scaling layer k by e^t moves every
    # other log gamma by 4t: d dev_l / d a_k = 4/n - 4 [l = k]) and learn the real coupling by
    # rank-one updates; the output row is measured each round by Euler's identity,
    # d e / d a_l = <W_l, grad_W_l log std> (+ the bias term). One measurement per round.
    in_residual = [is_in_residual(work, info.module) for info, _ in layers]
    n = len(weights)
    jac = torch.full((n, n), 4.0 / max(n, 1), dtype=torch.float64) - 4.0 * torch.eye(
        n, dtype=torch.float64
    )
    previous: tuple[Tensor, Tensor] | None = None  # (step, deviations) of the last round
    a = torch.zeros(n, dtype=torch.float64)  # log-scales applied by this step so far
    best, best_a, last_merit, backtracks = math.inf, a.clone(), math.inf, 0
    max_backtracks = 1

    def shift(delta: Tensor, reason: str) -> None:
        for name, value in zip(weights, delta.tolist(), strict=True):
            if value != 0.0:
                move(name, "refinement", math.exp(value), reason)
        a.add_(delta)

    for _ in range(rounds):
        gammas = balanced_values()
        # refine_residual=False keeps layers in residual branches at the section-11 factor. In a
        # branch, gamma is not the Hessian block's mean squared singular value (the shortcut makes
        # dy_l not proportional to y_l, so Prop. 4 fails); measured: it does not help either way.
        deviations = log_deviations(
            [
                g if refine_residual or not inside else math.nan
                for g, inside in zip(gammas, in_residual, strict=True)
            ]
        )
        error = log_std_error(work, x, output_std)
        if all(d is None or abs(d) < tol for d in deviations) and abs(error) < 1e-6:
            break
        dev = torch.tensor([0.0 if d is None else d for d in deviations], dtype=torch.float64)
        mask = torch.tensor([d is not None for d in deviations])
        merit = math.sqrt(float(dev.pow(2).sum()) + (error**2 if math.isfinite(error) else 0.0))
        if merit < best:
            best, best_a = merit, a.clone()
        if previous is not None:
            step, old = previous
            jac += torch.outer(dev - old - jac @ step, step) / float(step @ step)
            if (
                merit > last_merit and backtracks < max_backtracks
            ):  # the model was wrong: go back half-way
                backtracks += 1
                shift(-step / 2, "backtracking half of the last Newton-Broyden step")
                previous = (step / 2, old)
                continue
        backtracks = 0
        passes[0] += 1
        sens = torch.tensor(
            output_sensitivities(
                work, x, weights, [b if b in bias_scale else None for b in biases]
            ),
            dtype=torch.float64,
        ).nan_to_num(0.0)
        rows, rhs = [jac[mask]], [-dev[mask]]
        if math.isfinite(error) and float(sens.abs().max()) > 1e-6:
            rows.append(sens[None])
            rhs.append(torch.tensor([-error], dtype=torch.float64))
        step = torch.linalg.lstsq(torch.cat(rows), torch.cat(rhs)[:, None]).solution[:, 0]
        step = step / max(1.0, float(step.abs().max()))  # at most a factor e per round
        previous, last_merit = (step, dev), merit
        shift(
            step,
            "Newton-Broyden step: gamma_l towards the geometric mean and the output std (sec 4, 10)",
        )
    else:  # out of rounds: the last step is unmeasured; return to the best measured point
        if best < math.inf and bool((best_a != a).any()):
            shift(best_a - a, "return to the best point measured (out of rounds)")
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
    std_after = measure_output_std(work, x)
    final_values = [f.gamma for f in after] if target == "gamma" else balanced_values()
    final = log_deviations(
        [
            v if refine_residual or not inside else math.nan
            for v, inside in zip(final_values, in_residual, strict=True)
        ]
    )
    converged = (
        all(d is None or abs(d) < 0.05 for d in final)
        and abs(log_std_error(work, x, output_std)) < 1e-3
    )
    return Balancing(
        scales=scales,
        multipliers=tuple(multipliers),
        input_scale=input_scale,
        before=tuple(before),
        after=tuple(after),
        output_std_before=std_before,
        output_std_after=std_after,
        converged=converged,
        passes=passes[0],
    )

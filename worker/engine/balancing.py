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

Code map, one function per step: ``_input_scaling`` (step 1), ``_geometric_init`` and
``_geometric_layer`` (step 2), ``_refine`` with ``_refinement_round`` and ``_newton_step``
(step 3's iteration), ``_normalize_output`` (step 3's common factor), ``_fold_input_scale``
(step 1 folded) and ``_converged``; ``balance`` runs them in order on a ``_Run``, the state they
share (working model, multipliers, scales, pass count).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, cast

import torch
from torch import Tensor

from nas.build import PreflightNet, Scale, apply_scales_
from nas.shapes import LayerInfo
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
from worker.engine.scaling import LayerScaling, measure_scaling, spread

__all__ = ["Balancing", "Multiplier", "balance"]

# Defaults of ``balance``.
DEFAULT_OUTPUT_STD = 0.05  # section 10: the output std the paper normalises AlexNet's output to
DEFAULT_ROUNDS = 16  # cap on refinement rounds (a forward-backward each): bounds the cost
DEFAULT_TOL = 1e-3  # refinement stops when every |log gamma_l - mean log gamma| is below this
DEFAULT_HESSIAN_PROBES = 8  # probe vectors per Hessian block for target="hessian"
DEFAULT_HESSIAN_BATCH = 32  # samples of x in the Hessian figures for target="hessian"
HESSIAN_POWER_ITERATIONS = 1  # the fewest allowed: the blocks' top eigenvalue is not used

# The closed form (step 2).
RELU_GAIN = 2.0  # c = RELU_GAIN / k_typ in eq. (3) (section 6.2): ReLU halves the second moment
# Homogeneous model (step 3): scaling one layer's weight by s divides its gamma by s^4 relative
# to the others (eq. 2: gamma_l ~ 1 / E[W_l^2]^2), the Broyden Jacobian's starting point.
GAMMA_SCALE_POWER = 4.0
SEED_RANGE = 2**62  # the Hessian probes' seed is drawn from [0, SEED_RANGE): fits an int64

# The refinement (step 3).
OUTPUT_TOL = 1e-6  # refinement stops when also |log(std(out) / output_std)| is below this
MIN_OUTPUT_SENSITIVITY = 1e-6  # below: the output ignores the weights; its row is dropped
MAX_LOG_STEP = 1.0  # at most a factor e^MAX_LOG_STEP per layer and round: the model is local
LSTSQ_DRIVER = "gelsd"  # a deterministic least-squares solver on the CPU (see _newton_step)
MAX_BACKTRACKS = 1  # half-steps back in a row when the merit grew (the Broyden model was wrong)

# ``Balancing.converged``: looser than the refinement's stop, which the common factor then moves.
CONVERGED_GAMMA_TOL = 0.05  # every refined |log gamma_l - mean log gamma| below this
CONVERGED_OUTPUT_TOL = 1e-3  # and |log(std(out) / output_std)| below this (0.1%)


@dataclass(frozen=True)
class Multiplier:
    """One multiplier balancing added: to a parameter (``in_scales``) or reported only."""

    name: str  # parameter name, "input", or "<module> (input)" / "<module> (output)"
    # input | geometric | residual_branch | residual_share | kernel_correction | residual_undo |
    # refinement | output | bias
    kind: str
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
    converged: bool  # refined gammas within CONVERGED_GAMMA_TOL of their log-mean and output std
    # within CONVERGED_OUTPUT_TOL; always False for rounds=0 (the closed form: nothing is refined)
    passes: int  # forward-backward passes spent (gamma measurements and output sensitivities)

    @property
    def gamma_log_spread_before(self) -> float:
        return spread([s.gamma for s in self.before])

    @property
    def gamma_log_spread_after(self) -> float:
        return spread([s.gamma for s in self.after])


@dataclass(frozen=True)
class _Settings:
    """What the refinement steps were asked for (``balance``'s keyword arguments)."""

    output_std: float
    tol: float
    target: str  # "gamma" | "hessian"
    refine_residual: bool
    hessian_probes: int
    hessian_batch: int


@dataclass
class _Run:
    """The state one ``balance`` call builds up: its working model and what it recorded."""

    work: PreflightNet  # a copy of the caller's model; the model itself for the closed form
    x: Tensor
    live: bool  # multipliers are applied to ``work`` (False for the closed form: read only)
    layers: list[tuple[LayerInfo, torch.nn.Linear | torch.nn.Conv2d]]  # weighted layers, in forward order
    weights: list[str]  # "<module>.weight" of each of ``layers``
    r: Tensor | None  # the random loss matrix R: one loss for every measurement
    seed: int  # the Hessian probes' seed: the same probes every round
    probe_device: torch.device  # where the Hessian probes' generator lives
    multipliers: list[Multiplier] = field(default_factory=list)
    scales: dict[str, float] = field(default_factory=dict)
    moving_biases: set[str] = field(default_factory=set)  # non-zero biases (step 4)
    in_residual: list[bool] = field(default_factory=list)  # per layer: inside a residual block
    passes: int = 0  # forward-backward passes, for cost accounting

    def apply(self, name: str, kind: str, value: float, reason: str, *, applied: bool = False) -> None:
        """Record an ``in_scales`` multiplier and, unless ``applied`` already, scale ``work``."""
        self.multipliers.append(Multiplier(name, kind, value, reason, True))
        self.scales[name] = self.scales.get(name, 1.0) * value
        if not applied and self.live:
            apply_scales_(self.work, {name: value})

    def report(self, name: str, kind: str, value: float, reason: str) -> None:
        """Record a multiplier that an init scale cannot express (not in ``scales``)."""
        self.multipliers.append(Multiplier(name, kind, value, reason, False))

    def move(self, name: str, kind: str, value: float, reason: str, *, applied: bool = False) -> None:
        """``apply`` to a weight, and to its layer's bias when that is non-zero (step 4, sec 8)."""
        self.apply(name, kind, value, reason, applied=applied)
        bias = name.removesuffix("weight") + "bias"
        if bias in self.moving_biases:
            self.apply(
                bias,
                "bias",
                value,
                "a non-zero bias moves with its layer's weight (sec 8: the paper's biases are zero)",
                applied=applied,
            )

    def measure(self) -> list[LayerScaling]:
        """gamma_l and the other figures of every weighted layer, with the fixed loss R."""
        self.passes += 1
        return measure_scaling(self.work, self.x, r=self.r)


@dataclass
class _Newton:
    """The Newton-Broyden iterate on the log-scales ``a_l`` of the weights (step 3)."""

    jac: Tensor  # d dev_l / d a_k: the homogeneous model, then Broyden rank-one updates
    a: Tensor  # log-scales applied by the refinement so far
    best_a: Tensor  # ``a`` at the smallest merit measured
    best: float = math.inf  # that merit
    last_merit: float = math.inf  # the merit before the last step
    previous: tuple[Tensor, Tensor] | None = None  # (step, deviations) of the last round
    backtracks: int = 0  # half-steps back in a row

    @classmethod
    def homogeneous(cls, n: int) -> _Newton:
        """Start from the positively homogeneous model: scaling layer k by e^t moves every
        other log gamma by 4t, so ``d dev_l / d a_k = 4/n - 4 [l = k]`` (eq. 2, sec 3)."""
        coupling = torch.full((n, n), GAMMA_SCALE_POWER / max(n, 1), dtype=torch.float64)
        jac = coupling - GAMMA_SCALE_POWER * torch.eye(n, dtype=torch.float64)
        a = torch.zeros(n, dtype=torch.float64)
        return cls(jac=jac, a=a, best_a=a.clone())


def balance(
    model: PreflightNet,
    x: Tensor,
    *,
    output_std: float = DEFAULT_OUTPUT_STD,
    generator: torch.Generator | None = None,
    rounds: int = DEFAULT_ROUNDS,
    tol: float = DEFAULT_TOL,
    typical_kernel: int | None = None,
    fold_input_scale: bool = False,
    refine_residual: bool = True,
    target: str = "gamma",
    hessian_probes: int = DEFAULT_HESSIAN_PROBES,
    hessian_batch: int = DEFAULT_HESSIAN_BATCH,
) -> Balancing:
    """Balance gamma_l across weighted layers and set the output std (steps in the module doc).

    ``rounds=0``: the closed form only (input scale, geometric init, residual factors): no
    forward pass; ``before``/``after`` empty, output stds NaN, the output std left to AutoInit.
    Cost: at most ``rounds + 2`` gamma measurements (forward + backward each) and one
    forward-backward per round for the output sensitivities, plus a few forward passes for the
    final common factor. The model is not modified. With a non-finite or zero output std the
    output row is dropped and the output left as it is.
    """
    _check_arguments(output_std, target, rounds)
    settings = _Settings(output_std, tol, target, refine_residual, hessian_probes, hessian_batch)
    run = _start(model, x, generator, rounds)
    before = run.measure() if rounds else []
    std_before = measure_output_std(run.work, x) if rounds else math.nan
    input_scale = _input_scaling(run)
    _geometric_init(run, typical_kernel)
    if not rounds:  # the closed form (steps 1-2): no forward pass; AutoInit sets the output std
        return Balancing(run.scales, tuple(run.multipliers), input_scale, (), (), math.nan, math.nan, False, 0)
    run.moving_biases = {
        f"{info.module}.bias" for info, m in run.layers if m.bias is not None and bool(m.bias.detach().ne(0).any())
    }
    run.in_residual = [is_in_residual(run.work, info.module) for info, _ in run.layers]
    _refine(run, settings, rounds)
    _normalize_output(run, output_std)
    if fold_input_scale:
        _fold_input_scale(run, input_scale, output_std)
    after = run.measure()
    std_after = measure_output_std(run.work, x)
    converged = _converged(run, settings, after)
    return Balancing(
        scales=run.scales,
        multipliers=tuple(run.multipliers),
        input_scale=input_scale,
        before=tuple(before),
        after=tuple(after),
        output_std_before=std_before,
        output_std_after=std_after,
        converged=converged,
        passes=run.passes,
    )


def _check_arguments(output_std: float, target: str, rounds: int) -> None:
    """Reject what no step can use: a non-positive output std, an unknown target, rounds < 0."""
    if not (output_std > 0 and math.isfinite(output_std)):
        raise ValueError(f"output_std must be a positive finite number, but got {output_std=}.")
    if target not in ("gamma", "hessian"):
        raise ValueError(f'target must be "gamma" or "hessian", but got {target=}.')
    if rounds < 0:
        raise ValueError(f"rounds must be at least 0, but got {rounds=}.")


def _start(model: PreflightNet, x: Tensor, generator: torch.Generator | None, rounds: int) -> _Run:
    """The working model (a copy with dropout off, B.5: deterministic moments; the model itself
    for the closed form, which only reads it), the random loss R of Fig. 1 and the probes' seed."""
    live = bool(rounds)
    work = copy.deepcopy(model) if live else model
    for module in work.modules() if live else ():
        if isinstance(module, torch.nn.Dropout):
            module.eval()
    layers = work.weighted_layers()
    r = None
    if live:
        with preserved_buffers(work), torch.no_grad():
            out_dim = int(work(x).shape[1])
        r = random_matrix(out_dim, generator, x)  # one loss for every measurement
    seed = int(
        torch.randint(
            0,
            SEED_RANGE,
            (1,),
            generator=generator,
            device=generator.device if generator is not None else "cpu",
        )
    )
    return _Run(
        work=work,
        x=x,
        live=live,
        layers=layers,
        weights=[f"{info.module}.weight" for info, _ in layers],
        r=r,
        seed=seed,
        probe_device=generator.device if generator is not None else x.device,
    )


def _input_scaling(run: _Run) -> float:
    """Step 1, section 8.1: ``E[(u x_0)^2] = 1 / sqrt(n_0 k_0^2)`` balances the first layer's
    weights against its biases; in ``scales`` only through a leading ``scale`` layer."""
    if not run.layers:
        return 1.0
    first_info = run.layers[0][0]
    x_sq = float(run.x.detach().double().pow(2).mean())
    input_scale = (1.0 / (math.sqrt(first_info.fan_in or 1) * x_sq)) ** 0.5 if x_sq > 0 else 1.0
    reason = (
        f"E[(u x_0)^2] = 1/sqrt(n_0 k_0^2) = 1/sqrt({first_info.fan_in}) balances first-layer weights against "
        "biases (sec 8.1)"
    )
    if isinstance(_first_layer(run.work), Scale):
        run.apply(
            "blocks.0.0.factor",
            "input",
            input_scale,
            reason + "; realized by the leading scale layer",
        )
    else:
        run.report("input", "input", input_scale, reason + "; multiply the data by it (not in scales)")
    return input_scale


def _geometric_init(run: _Run, typical_kernel: int | None) -> None:
    """Step 2: eq. (3) with ``c = 2 / k_typ`` (section 6.2, ``k_typ`` the most common kernel
    size) on every weighted layer, and section 11's undo multipliers after residual bodies."""
    kernels = [math.isqrt(receptive_field(m.weight)) for _, m in run.layers]
    k_typ = typical_kernel or (Counter(kernels).most_common(1)[0][0] if kernels else 1)
    for (info, module), name, k in zip(run.layers, run.weights, kernels, strict=True):
        _geometric_layer(run, info, module, name, k, k_typ)
    for module_name, value, reason in residual_undo(run.work):
        run.report(f"{module_name} (output)", "residual_undo", value, reason)


def _geometric_layer(
    run: _Run, info: LayerInfo, module: torch.nn.Linear | torch.nn.Conv2d, name: str, k: int, k_typ: int
) -> None:
    """Step 2 on one layer: eq. (3) ``E[W^2] = c / (k sqrt(n_l n_{l+1}))``, the residual-branch
    factor (section 11), the unweighted body's share (B.7) and the kernel correction (6.2)."""
    fan_in, fan_out = info.fan_in or 1, info.fan_out or 1
    variance = (RELU_GAIN / k_typ) * k / math.sqrt(fan_in * fan_out)  # c / (k sqrt(n_l n_{l+1}))
    w_sq = float(module.weight.detach().double().pow(2).mean())
    if w_sq > 0 and math.isfinite(w_sq):
        run.apply(
            name,
            "geometric",
            math.sqrt(variance / w_sq),
            f"E[W^2] = c/(k sqrt(n_l n_l+1)), c = 2/k_typ, k_typ = {k_typ} (eq. 3, sec 6.2)",
        )
    c, path = residual_factor(run.work, info.module)
    if c != 1.0:
        run.apply(
            name,
            "residual_branch",
            math.sqrt(c),
            f"variance times c = {c:g} ({path}) so gamma matches outside the block (sec 11)",
        )
    share, path = unweighted_branch_share(run.work, info.module)
    if share != 1.0:
        run.apply(
            name,
            "residual_share",
            share,
            f"unweighted residual body ({path}): adds 1/L of the stream's second moment (B.7, sec 11)",
        )
    if k != k_typ:
        run.report(
            f"{info.module} (input)",
            "kernel_correction",
            math.sqrt(k_typ / k),
            f"fixed multiplier before a {k}x{k} layer when k_typ = {k_typ} (sec 6.2); not expressible as an init scale",
        )


def _refine(run: _Run, settings: _Settings, rounds: int) -> None:
    """Step 3, sections 4 and 10: up to ``rounds`` Newton-Broyden rounds on the log-scales of the
    weights towards equal gamma_l (or Hessian blocks) and the target output std; out of rounds, or
    with nothing left to fit, return to the best point measured (the last step is unmeasured)."""
    newton = _Newton.homogeneous(len(run.weights))
    why = "out of rounds"
    for _ in range(rounds):
        ended = _refinement_round(run, settings, newton)
        if ended == "converged":
            return
        if ended == "nothing to fit":
            why = "nothing measured is left to fit"
            break
    if newton.best < math.inf and bool((newton.best_a != newton.a).any()):
        _shift(
            run,
            newton,
            newton.best_a - newton.a,
            f"return to the best point measured ({why})",
        )


def _refinement_round(run: _Run, settings: _Settings, newton: _Newton) -> Literal["converged", "nothing to fit"] | None:
    """One round of step 3: measure the residuals (gamma deviations ``log gamma_l - mean log
    gamma``, output error ``log(std / output_std)``, sec 4 and 10), update the Jacobian by
    Broyden, and step (or back-track half the last step). "nothing to fit": no gamma measured and
    an output no weight moves, so no step (a zero step would make Broyden divide by 0)."""
    deviations = _deviations(run, settings, _balanced_values(run, settings))
    error = log_std_error(run.work, run.x, settings.output_std)
    if all(d is None or abs(d) < settings.tol for d in deviations) and abs(error) < OUTPUT_TOL:
        return "converged"
    dev = torch.tensor([0.0 if d is None else d for d in deviations], dtype=torch.float64)
    mask = torch.tensor([d is not None for d in deviations])
    merit = math.sqrt(float(dev.pow(2).sum()) + (error**2 if math.isfinite(error) else 0.0))
    if merit < newton.best:
        newton.best, newton.best_a = merit, newton.a.clone()
    if newton.previous is not None:
        step, old = newton.previous
        newton.jac += torch.outer(dev - old - newton.jac @ step, step) / float(step @ step)
        if merit > newton.last_merit and newton.backtracks < MAX_BACKTRACKS:
            newton.backtracks += 1  # the model was wrong: go back half-way
            _shift(run, newton, -step / 2, "backtracking half of the last Newton-Broyden step")
            newton.previous = (step / 2, old)
            return None
    newton.backtracks = 0
    move = _newton_step(run, newton.jac, dev, mask, error)
    if move is None:
        return "nothing to fit"
    newton.previous, newton.last_merit = (move, dev), merit
    _shift(
        run,
        newton,
        move,
        "Newton-Broyden step: gamma_l towards the geometric mean and the output std (sec 4, 10)",
    )
    return None


def _newton_step(run: _Run, jac: Tensor, dev: Tensor, mask: Tensor, error: float) -> Tensor | None:
    """Step 3's least-squares step: the gamma rows of ``jac`` and the output row measured by
    Euler's identity ``d e / d a_l = <W_l, grad_W_l log std>`` (+ the bias term; sec 10), at
    most a factor e^MAX_LOG_STEP per layer. One forward-backward. None when the system has no
    row: no gamma measured and an output the weights do not move."""
    run.passes += 1
    biases = [n.removesuffix("weight") + "bias" for n in run.weights]
    moving = [b if b in run.moving_biases else None for b in biases]
    sens = torch.tensor(output_sensitivities(run.work, run.x, run.weights, moving), dtype=torch.float64).nan_to_num(0.0)
    rows, rhs = [jac[mask]], [-dev[mask]]
    if math.isfinite(error) and float(sens.abs().max()) > MIN_OUTPUT_SENSITIVITY:
        rows.append(sens[None])
        rhs.append(torch.tensor([-error], dtype=torch.float64))
    if sum(len(r) for r in rows) == 0:
        return None
    # gelsd (SVD): the same answer on every call; the CPU default gelsy (pivoted QR) gave run-to-
    # run differences in the last bits, and on rank-deficient systems up to 32 % (24 of 30
    # benchmark candidates differed between two identical calls)
    step = torch.linalg.lstsq(torch.cat(rows), torch.cat(rhs)[:, None], driver=LSTSQ_DRIVER).solution[:, 0]
    return step / max(1.0, float(step.abs().max()) / MAX_LOG_STEP)


def _shift(run: _Run, newton: _Newton, delta: Tensor, reason: str) -> None:
    """Move the log-scales by ``delta``: one refinement multiplier ``e^delta_l`` per weight."""
    for name, value in zip(run.weights, delta.tolist(), strict=True):
        if value != 0.0:
            run.move(name, "refinement", math.exp(value), reason)
    newton.a.add_(delta)


def _balanced_values(run: _Run, settings: _Settings) -> list[float]:
    """What step 3 equalises: gamma_l (Prop. 4), or the Hessian blocks' mean squared singular
    values with fixed probes (the same R and probe vectors every round: a deterministic
    function of the scales)."""
    if settings.target == "gamma":
        return [s.gamma for s in run.measure()]
    run.passes += 1 + len(run.weights) * (settings.hessian_probes + 1)
    g = torch.Generator(device=run.probe_device).manual_seed(run.seed)
    figures = hessian_figures(
        run.work,
        run.x[: settings.hessian_batch],
        iterations=HESSIAN_POWER_ITERATIONS,
        probes=settings.hessian_probes,
        generator=g,
        chain_rule=False,
    )
    return [h.mean_sq_singular_value for h in figures]


def _deviations(run: _Run, settings: _Settings, values: list[float]) -> list[float | None]:
    """``log v_l - mean log v`` over the refined layers. ``refine_residual=False`` keeps layers
    in residual branches at the section-11 factor: in a branch, gamma is not the Hessian block's
    mean squared singular value (the shortcut makes dy_l not proportional to y_l, so Prop. 4
    fails); measured: it does not help either way."""
    return log_deviations(
        [
            v if settings.refine_residual or not inside else math.nan
            for v, inside in zip(values, run.in_residual, strict=True)
        ]
    )


def _normalize_output(run: _Run, output_std: float) -> None:
    """Step 3's last move, section 10: one common factor on every weight (and moving bias)
    setting the output std to ``output_std`` exactly."""
    t = common_factor(run.work, run.x, run.weights + sorted(run.moving_biases), output_std)
    if t != 1.0:
        for name in run.weights:
            run.move(
                name,
                "output",
                t,
                f"common factor setting the output std to {output_std:g} (sec 10)",
                applied=True,
            )


def _fold_input_scale(run: _Run, input_scale: float, output_std: float) -> None:
    """Step 1 folded (``fold_input_scale=True``, section 8.1): the input scale on the first
    weight (changing its gamma by ``u^-4``), then the output std set again (section 10)."""
    if run.layers and not isinstance(_first_layer(run.work), Scale):
        run.apply(
            run.weights[0],
            "input",
            input_scale,
            "input scaling folded into the first weight (changes its gamma by u^-4)",
        )
        _normalize_output(run, output_std)


def _converged(run: _Run, settings: _Settings, after: list[LayerScaling]) -> bool:
    """Refined gammas (or Hessian blocks) within ``CONVERGED_GAMMA_TOL`` of their log-mean and
    output std within ``CONVERGED_OUTPUT_TOL`` of ``output_std`` (sections 4 and 10)."""
    gamma = settings.target == "gamma"
    values = [f.gamma for f in after] if gamma else _balanced_values(run, settings)
    deviations = _deviations(run, settings, values)
    if not all(d is None or abs(d) < CONVERGED_GAMMA_TOL for d in deviations):
        return False  # (the output std is then not measured)
    return abs(log_std_error(run.work, run.x, settings.output_std)) < CONVERGED_OUTPUT_TOL


def _first_layer(model: PreflightNet) -> torch.nn.Module:
    """The network's first layer (a leading ``scale`` layer takes the input scale, step 1)."""
    return cast(torch.nn.Sequential, model.blocks[0])[0]

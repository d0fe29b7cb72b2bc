"""AutoInit: tune per-layer multipliers until every block-to-block APJN is critical.

He, Doshi, Gromov, "AutoInit: Automatic Initialization via Jacobian Tuning"
(``shared/papers/autoinit-jacobian-tuning.txt``), Algorithms 1-2. A twin of the model carries
a multiplier a for each gain (``worker.engine.structure``); the original tensors stay frozen and
the twin is run through ``torch.func.functional_call`` with ``a * theta``.

The update. For positively homogeneous networks (ReLU, leaky ReLU, linear) J^{l,l+1} of a
tuning unit scales as a^2 in the unit's gain, so the paper's 1-step learning rate (eq. 19
for the log loss, eq. 43 for the square loss) lands exactly on J = 1: both reduce to
a <- a / sqrt(J). Working in log space, u = log a, this is the fixed point
u <- u - r / e with r = log J - log rho and elasticity e = d log J / d u = 2: forward passes
and vector-Jacobian products only, no double backward (issue 3, "Cost"). For other
activations the same step is a Gauss-Newton step on the chosen loss, per unit, with the
elasticities re-estimated by secants along the trajectory, damped and clipped (the "safe
default"), stopped when every residual is within tolerance or its noise, and guarded against
divergence (revert to the best point, halve the damping).

Losses (per unit u, with rJ = log J_u - log rho_u and rK = log(K_end / K_start) - log rho_K,u,
where rho_K,u is what the unit's pooling layers do to K, measured in place):
  ``log``    eq. 12:  1/2 sum rJ^2
  ``square`` JSL:     1/2 sum (J_u / rho_u - 1)^2
  ``kernel`` eq. 24:  1/2 sum rJ^2 + lambda/2 sum rK^2
With ``output_std`` the last unit is tuned to put the output second moment at
``output_std^2`` (scaling-calculus paper, section 10) instead of to its APJN: a reduction
head (global average pooling) is then never blown up to force J = 1.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from nas.build import PreflightNet
from worker.engine._moments import forward_hooks
from worker.engine.attention import attention_temperatures, logit_variances
from worker.engine.budget import FORWARD_COST, profile_cost
from worker.engine.jacobian import JacobianProfile, block_jacobians
from worker.engine.structure import TuningUnit, analyse

__all__ = ["AutoInitResult", "Loss", "Status", "autoinit", "conditioning_mode"]

Loss = Literal["log", "square", "kernel"]
Status = Literal["converged", "max_steps", "unreachable", "diverged", "non_finite", "nothing_to_tune"]

_E_MIN, _E_MAX = 0.05, 8.0  # bounds on secant elasticities d log J / d u
_MAX_STEP = 3.0  # at most a factor e^3 per unit and step


@dataclass
class AutoInitResult:
    """Tuned multipliers (``scales``, keyed as ``nas.build_model`` takes them) and the path."""

    scales: dict[str, float]
    log_gains: list[float]  # u per unit
    units: list[TuningUnit]
    before: JacobianProfile
    after: JacobianProfile
    loss_curve: list[float]
    steps: int
    converged: bool
    status: Status
    message: str
    seconds: float
    invariant: list[str] = field(default_factory=list)
    residuals: list[float] = field(default_factory=list)  # per unit, after tuning
    log_rho_k: list[float] = field(default_factory=list)  # per unit: pooling's measured effect on K
    cost: float = 0.0  # training steps, counted (worker.engine.budget's cost model)
    elasticities: list[float] = field(default_factory=list)  # per unit: d log J / du at the end
    logits_before: dict[str, float] = field(default_factory=dict)  # attention logit second moments
    logits_after: dict[str, float] = field(default_factory=dict)


@contextmanager
def conditioning_mode(model: nn.Module) -> Iterator[None]:
    """Training mode (BatchNorm uses batch statistics, as in training) with dropout off;
    modes and buffers (running statistics) are restored afterwards."""
    modes = {m: m.training for m in model.modules()}
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    model.train()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.eval()
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.train(mode)
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])


def autoinit(
    model: PreflightNet,
    x: Tensor,
    *,
    loss: Loss = "log",
    kernel_lambda: float = 0.5,
    steps: int = 10,
    n_vectors: int = 2,
    tolerance: float = 0.1,
    output_std: float | None = None,
    generator: torch.Generator | None = None,
    max_cost: float | None = None,
) -> AutoInitResult:
    """Tune the gains of ``model`` so every unit's APJN reaches its reduction-normalised
    target (or as close as it can); return multipliers relative to the model as given.

    ``tolerance`` is on |log J - log rho| (0.1: within 10 %); the noise floor of the
    estimator (twice its standard error) is added, so noisy estimates cannot stall the rule.
    Never raises from inside torch on non-finite values: those end with a status.
    ``max_cost`` (training steps, counted by ``worker.engine.budget``'s cost model, so deterministic):
    after the first, no step starts whose measurement would take the run past it; the run then
    ends ``max_steps``. ``result.cost`` is what the run counted.
    """
    if loss not in ("log", "square", "kernel"):
        raise ValueError(f"loss must be 'log', 'square' or 'kernel', but got {loss=}.")
    if steps < 0 or n_vectors < 1 or not tolerance > 0:
        raise ValueError(f"need steps >= 0, n_vectors >= 1, tolerance > 0; got {steps=}, {n_vectors=}, {tolerance=}.")
    if output_std is not None and not output_std > 0:
        raise ValueError(f"output_std must be positive or None, but got {output_std=}.")
    started = time.perf_counter()
    units = analyse(model)
    with conditioning_mode(model), torch.no_grad():  # the tuner's first passes too: dropout off, statistics kept
        tuner = _Tuner(model, x, units, loss, kernel_lambda, n_vectors, tolerance, output_std, generator)
        result = tuner.run(steps, max_cost)
    result.seconds = time.perf_counter() - started
    result.cost = tuner.cost
    return result


class _Tuner:
    """State of one tuning run: log-gains u per unit, elasticities, best point."""

    def __init__(
        self,
        model: PreflightNet,
        x: Tensor,
        units: list[TuningUnit],
        loss: Loss,
        kernel_lambda: float,
        n_vectors: int,
        tolerance: float,
        output_std: float | None,
        generator: torch.Generator | None,
    ) -> None:
        self.model, self.x, self.units, self.loss = model, x, units, loss
        self.lam = kernel_lambda if loss == "kernel" else 0.0
        self.n_vectors, self.tol, self.generator = n_vectors, tolerance, generator
        self.log_target_k = 2.0 * math.log(output_std) if output_std is not None else None
        self.base = dict(model.named_parameters()) | dict(model.named_buffers())
        # attention temperatures (worker.engine.attention): fixed multipliers of the query and key
        # projections, found once before tuning; the units' compensating gains keep them valid
        self.logits_before = logit_variances(model, x)
        self.fixed = attention_temperatures(model, x, variances=self.logits_before)
        self.u = [0.0] * len(units)
        self.e_j = [2.0] * len(units)
        self.e_k = [2.0] * len(units)
        # a full step where J's elasticity is at most 2 (homogeneous activations: a residual
        # shortcut only lowers it, so u - r/2 undershoots); half steps where curvature couples units
        self.damping = [1.0 if unit.homogeneous else 0.5 for unit in units]
        self.frozen = [not unit.tunable for unit in units]
        # residual-stream units (stream_model): branch share of K_out, d log J / d log K_in
        self.branch = [0.0] * len(units)
        self.k_slope = [0.0] * len(units)
        self.learn = False  # secants along a Jacobi trajectory mix in the other units' moves
        # noise floor of the stopping rule: the largest of n_units Gaussian errors (z standard
        # errors) of a residual that is itself the difference of two noisy estimates (sqrt 2)
        self.z = max(2.0, math.sqrt(2.0 * math.log(2.0 * len(units))))
        self.max_vectors = 16 * n_vectors
        # training steps counted (worker.engine.budget): the pooling forward, and the temperatures' one
        self.cost = FORWARD_COST * (2 if self.logits_before else 1)
        self.log_rho_k = self.pooling_kernel_ratios()

    # -- measuring ---------------------------------------------------------------------
    def pooling_kernel_ratios(self) -> list[float]:
        """Per unit: log of K(out) / K(in) of its pooling layers, measured in place on one
        forward pass. The kernel term's target (eq. 24): a pooling layer changes K by an
        amount that depends on the spatial correlation of its input (1/k^2 for white noise,
        1 for constant maps), which no closed form knows."""
        ratios: dict[str, float] = {}
        modules = {name for unit in self.units for name in unit.pools}

        def hook(name: str) -> Callable[[nn.Module, tuple[Tensor, ...], Tensor], None]:
            def record(_module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> None:
                k_in, k_out = args[0].double().pow(2).mean(), out.double().pow(2).mean()
                ratios[name] = float(torch.log(k_out / k_in))

            return record

        with forward_hooks([(self.model.get_submodule(name), hook(name)) for name in modules]), torch.no_grad():
            self.model(self.x)
        out = []
        for unit in self.units:
            values = [ratios.get(name, math.nan) for name in unit.pools]
            out.append(math.fsum(values) if all(math.isfinite(v) for v in values) else unit.log_rho)
        return out

    def params(self) -> dict[str, Tensor]:
        out = {name: self.base[name] * factor for name, factor in self.fixed.items()}
        for unit, u in zip(self.units, self.u, strict=True):
            for gain in unit.gains:
                for name in gain.tensors:
                    out[name] = out.get(name, self.base[name]) * math.exp(gain.fraction * u)
        return out

    def measure(self) -> JacobianProfile:
        self.cost += profile_cost(self.n_vectors)
        return block_jacobians(self.model, self.x, self.n_vectors, self.generator, self.params())

    def residuals(self, p: JacobianProfile) -> tuple[list[float], list[float], list[float]]:
        """Per unit: rJ, rK and the noise floor (2 standard errors of log J_u)."""
        log_j, log_k, se = p.log_apjn.tolist(), p.log_k.tolist(), p.log_apjn_stderr.tolist()
        r_j: list[float] = []
        r_k: list[float] = []
        noise: list[float] = []
        for unit in self.units:
            first, last = unit.blocks[0], unit.blocks[-1]
            r_j.append(sum(log_j[b] for b in unit.blocks) - unit.log_rho)
            r_k.append(log_k[last + 1] - log_k[first] - self.log_rho_k[len(r_k)])
            if unit.stream:
                self.stream_model(len(r_k) - 1, sum(log_j[b] for b in unit.blocks), log_k[last + 1] - log_k[first])
            noise.append(self.z * math.sqrt(2.0 * sum(se[b] ** 2 for b in unit.blocks)))
        if self.log_target_k is not None:
            r_k[-1] = log_k[-1] - self.log_target_k  # the output unit: second moment to target
        return r_j, r_k, noise

    def stream_model(self, i: int, log_j: float, log_k_ratio: float) -> None:
        """A unit whose branch ignores its input's scale (``TuningUnit.stream``): J = A + b e^(c u) / K_in
        and K_out = A K_in + b' e^(c u), so d log J / du = c (J - A) / J, d log J / d log K_in =
        -(J - A) / J, and the branch's share of K_out is p = 1 - A K_in / K_out (all measured)."""
        floor = self.units[i].stream_floor
        share = min(1.0, max(0.0, 1.0 - floor * math.exp(-log_j)))  # (J - A) / J
        self.branch[i] = min(1.0, max(0.0, 1.0 - floor * math.exp(-log_k_ratio)))  # p
        self.e_j[i] = min(_E_MAX, max(_E_MIN, self.units[i].stream * share))
        self.e_k[i] = min(_E_MAX, max(_E_MIN, self.units[i].stream * self.branch[i]))
        self.k_slope[i] = -share

    def loss_value(self, r_j: list[float], r_k: list[float]) -> float:
        head = self.log_target_k is not None
        total = 0.0
        for i, (rj, rk) in enumerate(zip(r_j, r_k, strict=True)):
            if head and i == len(r_j) - 1:
                total += 0.5 * rk**2
            elif self.loss == "square":
                total += 0.5 * math.expm1(rj) ** 2
            else:
                total += 0.5 * rj**2 + 0.5 * self.lam * rk**2
        return total

    # -- stepping ----------------------------------------------------------------------
    def proposal(self, i: int, rj: float, rk: float) -> float:
        """Gauss-Newton step in u for unit i (for exact units and the log or square loss:
        the 1-step rate of eq. 19 / eq. 43, u <- u - rJ / 2)."""
        if self.log_target_k is not None and i == len(self.units) - 1:
            return -rk / self.e_k[i]
        ej, ek = self.e_j[i], self.e_k[i]
        if self.loss == "square" and not self.units[i].exact:
            return math.expm1(-rj) / ej  # residual J/rho - 1 with slope e * J/rho
        if self.loss == "kernel":
            return -(ej * rj + self.lam * ek * rk) / (ej**2 + self.lam * ek**2)
        return -rj / ej

    def step_all(self, r_j: list[float], r_k: list[float]) -> list[float]:
        deltas = []
        coupled = any(unit.stream for unit in self.units)
        dk = 0.0  # predicted change of log K at the current unit's input (stream units only)
        for i, unit in enumerate(self.units):
            if self.frozen[i]:
                deltas.append(0.0)
            else:
                rj, rk = r_j[i], r_k[i]
                if unit.stream:  # what the upstream steps will do to this unit, then its own step
                    rj, rk = rj + self.k_slope[i] * dk, rk - self.branch[i] * dk
                step = self.damping[i] * self.proposal(i, rj, rk)
                deltas.append(max(-_MAX_STEP, min(_MAX_STEP, step)))
            if coupled:
                dk = self.propagate(i, dk, deltas[-1])
        if self.log_target_k is not None and not self.frozen[-1]:
            # the output's second moment also moves with every earlier unit's gain (exactly
            # so for homogeneous nets) until a normalization resets the scale
            drift = 0.0
            for i in range(len(self.units) - 1):
                drift = 0.0 if self.units[i].resets_scale else drift
                drift += self.e_k[i] * deltas[i] if self.units[i].exact else 0.0
            if self.units[-1].resets_scale:
                drift = 0.0
            deltas[-1] = max(-_MAX_STEP, min(_MAX_STEP, deltas[-1] - drift / self.e_k[-1]))
        for i, d in enumerate(deltas):
            self.u[i] += d
        return deltas

    def propagate(self, i: int, dk: float, delta: float) -> float:
        """Predicted change of log K at the output of unit i, from its input's and its own step:
        a stream unit passes (1 - p) of its input's and adds c p delta; a unit that normalizes
        restarts the scale; any other passes its input's and adds its K elasticity times delta."""
        unit = self.units[i]
        if unit.stream:
            return (1.0 - self.branch[i]) * dk + unit.stream * self.branch[i] * delta
        return (0.0 if unit.resets_scale else dk) + self.e_k[i] * delta

    def learn_elasticities(
        self, deltas: list[float], old: tuple[list[float], list[float]], new: tuple[list[float], list[float]]
    ) -> None:
        """Secant estimates for units that are not exactly homogeneous; a unit whose J does
        not respond to its gain at all is frozen (it cannot be tuned)."""
        for i, d in enumerate(deltas):
            if abs(d) < 0.05 or self.units[i].exact or self.units[i].stream:
                continue
            if self.learn and not self.units[i].exact:
                for slopes, o, n in ((self.e_j, old[0], new[0]), (self.e_k, old[1], new[1])):
                    e = (n[i] - o[i]) / d
                    if math.isfinite(e):
                        slopes[i] = min(_E_MAX, max(_E_MIN, e))
            if abs((new[0][i] - old[0][i]) / d) < _E_MIN and abs(new[0][i]) > self.tol:
                self.frozen[i] = True

    # -- the loop ----------------------------------------------------------------------
    def run(self, steps: int, max_cost: float | None = None) -> AutoInitResult:
        before = self.measure()
        if not torch.isfinite(self.x).all():
            return self.finish(before, before, [], 0, "non_finite", "the input batch has non-finite values")
        if not any(unit.tunable for unit in self.units):
            return self.finish(before, before, [], 0, "nothing_to_tune", "no layer with a tunable scale")
        current = before
        for _ in range(8):  # a non-finite start: shrink every gain until the forward is finite
            if current.finite:
                break
            self.u = [u - (1.0 if unit.tunable else 0.0) for u, unit in zip(self.u, self.units, strict=True)]
            current = self.measure()
        if not current.finite:
            self.u = [0.0] * len(self.units)
            return self.finish(
                before, before, [], 0, "non_finite", "forward pass stays non-finite after shrinking every gain by e^8"
            )
        r_j, r_k, noise = self.residuals(current)
        curve = [self.loss_value(r_j, r_k)]
        best = (curve[0], list(self.u), current)
        rises = 0
        for t in range(steps):
            if self.done(r_j, r_k, noise):
                return self.finish(before, current, curve, t, *self.converged(r_j))
            if max_cost is not None and t > 0 and self.cost + profile_cost(self.n_vectors) > max_cost:
                steps = t  # the cost budget: the next step would overrun it
                break
            deltas = self.step_all(r_j, r_k)
            nxt = self.measure()
            if not nxt.finite:
                self.u = list(best[1])
                self.damping = [d / 2 for d in self.damping]
                rises += 1
            else:
                n_j, n_k, noise = self.residuals(nxt)
                self.learn_elasticities(deltas, (r_j, r_k), (n_j, n_k))
                r_j, r_k, current = n_j, n_k, nxt
                curve.append(self.loss_value(r_j, r_k))
                if curve[-1] < best[0]:
                    best, rises = (curve[-1], list(self.u), current), 0
                else:
                    rises += 3 if curve[-1] > 1.5 * best[0] + self.tol**2 else 1
                    # no progress near convergence is mostly estimator noise: more vectors
                    self.n_vectors = min(self.max_vectors, 2 * self.n_vectors)
            if rises >= 3:
                if min(self.damping) < 1 / 16:
                    self.u = list(best[1])
                    return self.finish(
                        before, best[2], curve, t + 1, "diverged", "the loss kept rising; best multipliers kept"
                    )
                self.u, current = list(best[1]), best[2]
                r_j, r_k, noise = self.residuals(current)
                self.damping = [d / 2 for d in self.damping]
                rises = 0
        if self.done(r_j, r_k, noise):
            return self.finish(before, current, curve, steps, *self.converged(r_j))
        if current is not best[2]:
            self.u, current = list(best[1]), best[2]
        stuck = any(self.frozen[i] and unit.tunable for i, unit in enumerate(self.units))
        status: Status = "unreachable" if stuck else "max_steps"
        message = (
            "some units cannot reach criticality; pushed as close as possible"
            if stuck
            else f"not within tolerance after {steps} steps"
        )
        return self.finish(before, current, curve, steps, status, message)

    def done(self, r_j: list[float], r_k: list[float], noise: list[float]) -> bool:
        for i, unit in enumerate(self.units):
            if not unit.tunable:
                continue
            if self.log_target_k is not None and i == len(self.units) - 1:
                if abs(r_k[i]) > self.tol:
                    return False
                continue
            if self.frozen[i]:
                continue
            if abs(self.proposal(i, r_j[i], r_k[i])) * self.e_j[i] > max(self.tol, noise[i]):
                return False
        return True

    def converged(self, r_j: list[float]) -> tuple[Status, str]:
        """Status once every unit that can move is within tolerance."""
        stuck = [i for i, unit in enumerate(self.units) if unit.tunable and self.frozen[i] and abs(r_j[i]) > self.tol]
        if stuck:
            blocks = [b for i in stuck for b in self.units[i].blocks]
            return (
                "unreachable",
                f"blocks {blocks} cannot reach criticality (J does not follow the gain); pushed as close as possible",
            )
        return "converged", "every unit is within tolerance"

    def finish(
        self,
        before: JacobianProfile,
        after: JacobianProfile,
        curve: list[float],
        steps: int,
        status: Status,
        message: str,
    ) -> AutoInitResult:
        r_j, r_k, _ = self.residuals(after) if after.finite else ([math.nan] * len(self.units), [], [])
        scales: dict[str, float] = dict(self.fixed)
        invariant: list[str] = []
        for unit, u in zip(self.units, self.u, strict=True):
            for gain in unit.gains:
                if gain.invariant:
                    invariant.append(gain.module)
                for name in gain.tensors:
                    scales[name] = scales.get(name, 1.0) * math.exp(gain.fraction * u)
        return AutoInitResult(
            scales=scales,
            log_gains=list(self.u),
            units=self.units,
            before=before,
            after=after,
            loss_curve=curve,
            steps=steps,
            converged=status in ("converged", "nothing_to_tune"),
            status=status,
            message=message,
            seconds=0.0,
            invariant=invariant,
            residuals=r_j,
            log_rho_k=list(self.log_rho_k),
            elasticities=list(self.e_j),
            logits_before=self.logits_before,
            logits_after=self.logits_after(),
        )

    def logits_after(self) -> dict[str, float]:
        """The attention logits' second moments at the final multipliers (one counted forward)."""
        if not self.logits_before:
            return {}
        self.cost += FORWARD_COST
        return logit_variances(self.model, self.x, self.params())

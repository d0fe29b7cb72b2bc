"""The per-layer diagnostics of a conditioned model, gathered for the report and the score.

Each comes from its own module: GR scaling (``worker.engine.scaling``: gamma_l, nu_l), the Hessian
blocks (``worker.engine.hessian``) and Batch Normalization Preconditioning (``worker.engine.bnp``:
kappa(D)). A diagnostic that fails is left out with a note; it never sinks the report.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from nas.build import PreflightNet
from nas.options import ConditionOptions
from nas.report import finite_or_none
from worker.engine.autoinit import conditioning_mode
from worker.engine.bnp import kappa_d
from worker.engine.budget import BNP_COST, SCALING_COST, hessian_plan
from worker.engine.hessian import hessian_figures, spread_order
from worker.engine.scaling import measure_scaling

__all__ = ["Diagnostics", "run_diagnostics"]

log = logging.getLogger(__name__)


@dataclass
class Diagnostics:
    """Per-layer figures keyed by module name, and the summary components of the score."""

    per_layer: dict[str, dict[str, float | None]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the stage did (skipped, budgeted): the report's notes
    findings: list[str] = field(default_factory=list)  # what it found about the network: the report's reasons
    gamma_log_spread: float | None = None
    hessian_log_spread: float | None = None
    kappa_d_log: float | None = None
    non_finite: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    hessian_measured: list[str] | None = None  # layers with Hessian figures; None: all of them
    cost: dict[str, float] = field(default_factory=dict)  # training steps, counted (worker.engine.budget)

    def layer(self, name: str) -> dict[str, float | None]:
        return dict(self.per_layer.get(name, {}))

    def describe(self, component: str, value: float | None) -> str:
        v = value if value is not None else math.nan
        return {
            "gamma_log_spread": f"layer scaling gamma_l spreads by a factor {math.exp(v):.3g} (std of log) "
            "across layers: some layers learn much faster than others (scaling paper, eq. 2)",
            "hessian_log_spread": f"top Hessian eigenvalues spread by a factor {math.exp(v):.3g} (std of log) "
            "across layers",
            "kappa_d_log": f"kappa(D) reaches {math.exp(v):.3g}: activation variances differ widely; BNP would help",
        }.get(component, f"{component} = {v:.3g}")

    def _put(self, name: str, key: str, value: float | None) -> None:
        self.per_layer.setdefault(name, {})[key] = finite_or_none(value)


def _hidden(values: list[float | None]) -> list[float | None]:
    """Leave out the output layer: its gamma and Hessian scale with 1/output_std^2 by
    construction once it carries the output normalisation (docs/conditioning.md)."""
    return values[:-1] if len(values) >= 3 else values


def _log_std(values: list[float | None]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return statistics.pstdev(logs) if len(logs) >= 2 else (0.0 if logs else None)


def run_diagnostics(
    model: PreflightNet,
    x: Tensor,
    y: Tensor | None,
    opts: ConditionOptions,
    generator: torch.Generator,
    budget_left: float | None = None,
) -> Diagnostics:
    """gamma_l / nu_l, kappa(D) and Hessian figures of the (conditioned) model on batch x.

    ``budget_left`` (training steps, ``worker.engine.budget``'s counted cost model): scaling and bnp
    always run (``worker.engine.condition`` reserves them); the Hessian, last, gets what they leave and
    computes the layers and power iterations that fit (``worker.engine.budget.hessian_plan``: the
    layers evenly spread over the depth), the others null, with a note. ``cost`` holds the
    counted cost of each diagnostic.
    """
    diag = Diagnostics()
    with conditioning_mode(model):
        for name, run in (("scaling", _scaling), ("bnp", _bnp), ("hessian", _hessian)):
            started = time.perf_counter()
            left = None if budget_left is None else budget_left - sum(diag.cost.values())
            try:
                if not run(diag, model, x, y, opts, generator, left):
                    continue
            except Exception as exc:  # one broken diagnostic must not sink the report
                log.warning("%s diagnostics failed: %s", name, exc, exc_info=True)
                diag.notes.append(f"{name} diagnostics failed: {exc}")
                continue
            diag.ran.append(name)
            diag.seconds[name] = time.perf_counter() - started
    return diag


def _scaling(
    diag: Diagnostics,
    model: PreflightNet,
    x: Tensor,
    y: Tensor | None,
    opts: ConditionOptions,
    g: torch.Generator,
    _d: float | None,
) -> bool:
    diag.cost["scaling"] = SCALING_COST

    figures = measure_scaling(model, x, targets=y, generator=g)
    for f in figures:
        diag._put(f.name, "gamma", f.gamma)
        diag._put(f.name, "nu", f.nu)
    gammas = [finite_or_none(f.gamma) for f in figures]
    diag.gamma_log_spread = _log_std(_hidden(gammas))
    diag.non_finite |= any(v is None for v in gammas)
    return True


def _hessian(
    diag: Diagnostics,
    model: PreflightNet,
    x: Tensor,
    y: Tensor | None,
    opts: ConditionOptions,
    g: torch.Generator,
    left: float | None,
) -> bool:
    if opts.hessian_iterations == 0:
        return False  # switched off

    n = min(opts.hessian_batch_size, x.shape[0])
    names = [info.module for info, _ in model.weighted_layers()]
    iterations, chosen = opts.hessian_iterations, None
    if left is not None:
        count, iterations, cost = hessian_plan(
            left, len(names), opts.hessian_iterations, opts.hessian_probes, n / x.shape[0]
        )
        diag.cost["hessian"] = cost
        if count == 0:
            diag.hessian_measured = []
            diag.notes.append(
                f"Hessian figures skipped: {max(left, 0):.1f} training steps were left of the cost budget, not enough "
                "for one layer"
            )
            return False
        if count < len(names):  # hidden layers first, spread evenly; the output layer is not scored
            hidden = len(names) - 1 if len(names) >= 3 else len(names)
            chosen = [names[i] for i in sorted(spread_order(hidden)[:count])]
        if chosen is not None or iterations < opts.hessian_iterations:
            which = (
                "all layers"
                if chosen is None
                else f"{count} of {len(names)} layers (evenly spread; the others are null)"
            )
            diag.notes.append(
                f"Hessian figures within the cost budget: {which}, {iterations} power iterations (asked "
                f"{opts.hessian_iterations})"
            )
    figures = hessian_figures(
        model,
        x[:n],
        None if y is None else y[:n],
        iterations=iterations,
        probes=opts.hessian_probes,
        generator=g,
        layers=chosen,
    )
    diag.hessian_measured = None if chosen is None else [f.name for f in figures]
    for f in figures:
        diag._put(f.name, "hessian_top_eigenvalue", f.top_eigenvalue)
        diag._put(f.name, "hessian_chain_rule", f.chain_rule_estimate)
        diag._put(f.name, "hessian_mean_sq_singular", f.mean_sq_singular_value)
    output = names[-1] if len(names) >= 3 else None  # as _hidden: the output layer is not scored
    tops = [finite_or_none(abs(f.top_eigenvalue)) for f in figures if f.name != output]
    # one layer: no spread
    diag.hessian_log_spread = _log_std(tops) if len(tops) >= 2 or chosen is None else None
    return True


def _bnp(
    diag: Diagnostics,
    model: PreflightNet,
    x: Tensor,
    y: Tensor | None,
    opts: ConditionOptions,
    g: torch.Generator,
    _d: float | None,
) -> bool:
    diag.cost["bnp"] = BNP_COST

    kappas = kappa_d(model, x)
    for name, k in kappas.items():
        diag._put(name, "kappa_d", k)
    finite = [k for k in kappas.values() if math.isfinite(k) and k > 0]
    diag.kappa_d_log = math.log(max(finite)) if finite else None
    if infinite := sorted(name for name, k in kappas.items() if k == math.inf):
        # eq. 12 with a zero-variance input feature: kappa(D) is infinite, said rather than dropped
        # (the layer's figure is null in JSON; the component is the largest finite one)
        shown = ", ".join(infinite[:5]) + (f" and {len(infinite) - 5} more" if len(infinite) > 5 else "")
        diag.findings.append(
            f"kappa(D) is infinite at {shown}: an input feature is constant on the batch (a dead unit or a "
            "constant input), so BNP cannot precondition it; kappa_d_log is the largest finite value"
        )
    return True

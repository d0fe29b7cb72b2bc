"""The report's reasons in English, the one that decided the verdict first: for every score
component over its threshold (worst first) what it means for this network, then why tuning stopped
short and what the diagnostics found. What the stages did rather than found (balancing dropped,
a diagnostic skipped under the budget, the probe failing) is the report's ``notes``, which
``worker.engine.condition`` gathers apart."""

from __future__ import annotations

import math

from nas import ArchitectureSpec
from nas.options import ConditionOptions
from worker.engine.autoinit import AutoInitResult
from worker.engine.diagnostics import Diagnostics
from worker.engine.probe import ProbeResult
from worker.engine.score import ScoreResult
from worker.engine.structure import TuningUnit

__all__ = ["reasons"]


def reasons(
    tuned: AutoInitResult,
    result: ScoreResult,
    diag: Diagnostics,
    opts: ConditionOptions,
    spec: ArchitectureSpec,
    probe: ProbeResult,
) -> list[str]:
    """The verdict's cause first, then every component over its threshold by penalty (``result.over``
    is in that order), then a tuning that did not converge, then the diagnostics' findings. A pruned
    candidate always has a reason: when no component is over its threshold, the score is below the
    cut, and the component that cost the most is named as the cause."""
    out: list[str] = []
    if result.verdict == "prune" and not result.over:
        costs = {k: v for k, v in result.penalties.items() if v and k in result.components}
        if costs:
            worst = max(costs, key=lambda k: costs[k])
            out.append(
                f"score {result.score:.3g} is below the cut {result.cut:.3g}, mostly from {worst}: "
                + "; ".join(_sentences(worst, tuned, result.components, diag, opts, spec, probe))
            )
        else:
            out.append(f"score {result.score:.3g} is below the cut {result.cut:.3g}")
    for name in result.over:
        out.extend(_sentences(name, tuned, result.components, diag, opts, spec, probe))
    if tuned.status != "converged":
        out.append(f"tuning {tuned.status.replace('_', ' ')}: {tuned.message}")
    return out + diag.findings


def _sentences(
    name: str,
    tuned: AutoInitResult,
    comps: dict[str, float | None],
    diag: Diagnostics,
    opts: ConditionOptions,
    spec: ArchitectureSpec,
    probe: ProbeResult,
) -> list[str]:
    if name == "jacobian_log":
        return jacobian_reasons(tuned, opts, spec)
    if name == "kernel_log_range":
        return [
            f"forward second moment drifts by a factor {math.exp(comps[name] or 0):.3g} across the network after tuning"
        ]
    if name == "output_log_ratio":
        std = math.exp(0.5 * tuned.after.log_k[-1].item())
        return [f"output std is {std:.3g} after tuning; target {opts.head_std:g}"]
    if name == "non_finite":
        return [_non_finite_reason(tuned)]
    if name == "probe_loss":
        return [probe_reason(probe, opts)]
    return [diag.describe(name, comps[name])]


_DEAD_SIGNAL_CAUSES = "a zero op, a scale of 0, a residual with alpha and beta 0, or weights that underflow to 0"


def _non_finite_reason(tuned: AutoInitResult) -> str:
    """A network whose output is exactly zero, or whose Jacobian is zero at some block, has an
    infinite log output ratio or log APJN, a hard failure like a NaN, but the cause to tell is
    where the signal died: a zero op (NAS-Bench-201's ``none``), a scale of 0, a residual with
    alpha and beta 0, or weights that underflow. After such a block the output can still be
    non-zero (the head's bias: NAS-Bench-201's dead cells), but it no longer depends on the input."""
    k = tuned.after.k.tolist()  # the second moment of the input, then of each block's output
    if all(math.isfinite(v) for v in k) and k[-1] == 0.0:
        block = next(i for i, v in enumerate(k) if v == 0.0) - 1
        return (
            f"the network's output is zero for every input, from the output of blocks[{block}] on "
            f"({_DEAD_SIGNAL_CAUSES}): nothing before it trains"
        )
    apjn = tuned.after.apjn.tolist()  # each block's partial Jacobian norm
    if all(math.isfinite(v) for v in apjn) and 0.0 in apjn:
        block = apjn.index(0.0)
        return (
            f"the network's output does not depend on its input: the Jacobian of blocks[{block}] is zero "
            f"({_DEAD_SIGNAL_CAUSES}), so nothing before it trains"
        )
    return "non-finite values in the forward pass or the diagnostics"


def probe_reason(probe: ProbeResult, opts: ConditionOptions) -> str:
    rates = ", ".join(probe.curves) or ", ".join(f"{lr:g}" for lr in opts.probe_lrs)  # the rates it ran
    targets = "its labels" if probe.targets == "given" else "random labels"
    if probe.best_lr is None:
        return (
            f"the trainability probe diverged at every learning rate ({rates}): SGD on the batch ({targets}) blew "
            "up from the tuned init"
        )
    return (
        f"the trainability probe kept {100 * (probe.loss or 0):.0f} % of the uniform (or mean) prediction's loss after "
        f"{opts.probe_steps} SGD steps on the batch ({targets}) at the best learning rate {probe.best_lr:g} of {rates}"
    )


def jacobian_reasons(tuned: AutoInitResult, opts: ConditionOptions, spec: ArchitectureSpec) -> list[str]:
    out = []
    apjn = tuned.after.apjn.tolist()
    last = len(tuned.units) - 1
    for i, unit in enumerate(tuned.units):
        if not unit.tunable or (opts.head_std is not None and i == last):
            continue
        if abs(tuned.residuals[i]) <= opts.thresholds.jacobian_log:
            continue
        j = math.prod(apjn[b] for b in unit.blocks)
        where = f"block {unit.blocks[0]}" if len(unit.blocks) == 1 else f"blocks {unit.blocks[0]}-{unit.blocks[-1]}"
        out.append(
            f"APJN of {where} stays at {j:.3g} after tuning (target {math.exp(unit.log_rho):.3g}): "
            f"{cause(unit, spec, j)}"
        )
    return out


def cause(unit: TuningUnit, spec: ArchitectureSpec, j: float) -> str:
    """The likeliest reason a tuning unit's APJN stays off its target, from its layer types."""
    types = {layer.type for b in unit.blocks for layer in spec.blocks[b].layers}
    if "residual" in types and j > math.exp(unit.log_rho):
        return "the residual shortcut alone keeps J above the target (alpha^2 >= 1)"
    if "maxpool" in types:
        return "max pooling breaks scaling"
    nonhom = sorted(types & {"gelu", "silu", "tanh", "sigmoid"})
    if nonhom:
        return f"{', '.join(nonhom)} is not positively homogeneous: J does not follow the gain"
    if "batchnorm" in types:
        return "BatchNorm makes J depend on the batch, not on the gain"
    return "the tuner did not reach it in the allowed steps"

"""The report's reasons in English: why tuning stopped and, for every score component over
its threshold, what it means for this network (``worker.engine.condition`` adds the notes the
stages wrote themselves: balancing, the diagnostics, the probe)."""

from __future__ import annotations

import math

from nas import ArchitectureSpec
from nas.options import ConditionOptions
from worker.engine.autoinit import AutoInitResult
from worker.engine.diagnostics import Diagnostics
from worker.engine.probe import ProbeResult
from worker.engine.structure import TuningUnit

__all__ = ["reasons"]


def reasons(
    tuned: AutoInitResult,
    over: list[str],
    comps: dict[str, float | None],
    diag: Diagnostics,
    opts: ConditionOptions,
    spec: ArchitectureSpec,
    probe: ProbeResult,
) -> list[str]:
    """One sentence for a tuning that did not converge and one per component in ``over``."""
    out: list[str] = []
    if tuned.status != "converged":
        out.append(f"tuning {tuned.status.replace('_', ' ')}: {tuned.message}")
    for name in over:
        if name == "jacobian_log":
            out.extend(jacobian_reasons(tuned, opts, spec))
        elif name == "kernel_log_range":
            out.append(
                f"forward second moment drifts by a factor {math.exp(comps[name] or 0):.3g} across the network after "
                "tuning"
            )
        elif name == "output_log_ratio":
            std = math.exp(0.5 * tuned.after.log_k[-1].item())
            out.append(f"output std is {std:.3g} after tuning; target {opts.output_std:g}")
        elif name == "non_finite":
            out.append("non-finite values in the forward pass or the diagnostics")
        elif name == "probe_loss":
            out.append(probe_reason(probe, opts))
        else:
            out.append(diag.describe(name, comps[name]))
    return out


def probe_reason(probe: ProbeResult, opts: ConditionOptions) -> str:
    rates = ", ".join(f"{lr:g}" for lr in opts.probe_lrs)
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
        if not unit.tunable or (opts.output_std is not None and i == last):
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

"""The score's components (``worker.engine.score`` lists them) from what the stages measured:
AutoInit's result after tuning and the diagnostics; ``probe_loss`` is the probe's own figure."""

from __future__ import annotations

import math

from nas.options import ConditionOptions
from worker.engine.autoinit import AutoInitResult
from worker.engine.diagnostics import Diagnostics

__all__ = ["components"]


def components(
    tuned: AutoInitResult, diag: Diagnostics, opts: ConditionOptions, probe_loss: float | None
) -> dict[str, float | None]:
    """Each component in log space (None: not measured); the output layer is left out of the
    Jacobian and kernel figures when it carries the output normalisation (``output_std``)."""
    after = tuned.after
    finite = after.finite and tuned.status != "non_finite"
    head = opts.head_std is not None
    units = [(i, u) for i, u in enumerate(tuned.units) if u.tunable and not (head and i == len(tuned.units) - 1)]
    jac = max((abs(tuned.residuals[i]) for i, _ in units), default=0.0) if finite else None
    kernel = out = None
    if finite:
        log_k = after.log_k.tolist()
        # K at the end of each tuning unit (cut-independent), corrected by what pooling does
        drift, reduction = [], 0.0
        for i, unit in enumerate(tuned.units):
            reduction += tuned.log_rho_k[i]
            if not (head and i == len(tuned.units) - 1):
                drift.append(abs(log_k[unit.blocks[-1] + 1] - log_k[0] - reduction))
        kernel = max(drift, default=0.0)
        out = abs(0.5 * log_k[-1] - math.log(opts.head_std)) if opts.head_std else None
    return {
        "jacobian_log": jac,
        "kernel_log_range": kernel,
        "output_log_ratio": out,
        "gamma_log_spread": diag.gamma_log_spread,
        "hessian_log_spread": diag.hessian_log_spread,
        "kappa_d_log": diag.kappa_d_log,
        "non_finite": 0.0 if finite and not diag.non_finite else 1.0,
        "probe_loss": probe_loss,
    }

"""The conditioning report assembled from what the stages of ``worker.engine.pipeline.condition``
produced: per-block and per-layer tables, the tuning section, the environment."""

from __future__ import annotations

import math
import platform
from typing import Any

import torch

from nas import ArchitectureSpec, spec_hash
from nas.build import PreflightNet
from nas.options import ConditionOptions
from nas.report import (
    BlockReport,
    ConditioningReport,
    Environment,
    ExpressivityReport,
    LayerReport,
    ProbeReport,
    TuningReport,
    UnitReport,
    finite_or_none,
)
from worker.engine.autoinit import AutoInitResult
from worker.engine.diagnostics import Diagnostics
from worker.engine.expressivity import Expressivity
from worker.engine.jacobian import JacobianProfile
from worker.engine.probe import ProbeResult
from worker.engine.score import ScoreResult

__all__ = ["report"]


def report(
    *,
    spec: ArchitectureSpec,
    opts: ConditionOptions,
    device: torch.device,
    batch_size: int,
    source: str,
    model: PreflightNet,
    rho: list[float],
    before: JacobianProfile,
    tuned: AutoInitResult,
    balancing: dict[str, float],
    balancing_mode: str,
    scales: dict[str, float],
    bias_shifts: dict[str, list[float]],
    diagnostics: Diagnostics,
    probe: ProbeResult,
    result: ScoreResult,
    reasons: list[str],
    notes: list[str],
    timings: dict[str, float],
    budget: dict[str, Any],
    expressivity: Expressivity | None = None,
) -> ConditioningReport:
    """The report (``docs/contracts.md``); non-finite figures become null."""
    return ConditioningReport(
        spec_hash=spec_hash(spec),
        score=finite_or_none(result.score),
        verdict=result.verdict,  # type: ignore[arg-type]
        reasons=reasons,
        notes=notes,
        scales={k: float(v) for k, v in scales.items()},
        bias_shifts=bias_shifts,
        blocks=_blocks(before, tuned, rho),
        layers=_layers(model, diagnostics),
        tuning=_tuning(tuned, before, opts, device, balancing).model_copy(
            update={
                "timings": timings,
                "budget": budget,
                "balancing_mode": balancing_mode,
                "hessian_measured": diagnostics.hessian_measured,
                "probe": _probe_report(probe),
            }
        ),
        components=result.components,
        penalties=result.penalties,
        thresholds=opts.thresholds,
        score_fit=result.fit,  # type: ignore[arg-type]
        prune_below=result.cut,
        options=opts,
        environment=Environment(
            batch_size=batch_size,
            n_vectors=opts.n_vectors,
            seed=opts.seed,
            device=str(device),
            data=source,
            draw=opts.draw,
            versions=_versions(),
            diagnostics=diagnostics.ran,
        ),
        expressivity=_expressivity_report(expressivity),
    )


def _expressivity_report(measured: Expressivity | None) -> ExpressivityReport | None:
    if measured is None:
        return None
    return ExpressivityReport(
        naswot=finite_or_none(measured.naswot),
        meco=finite_or_none(measured.meco),
        activation_units=measured.activation_units,
        layers=measured.layers,
    )


def _probe_report(probe: ProbeResult) -> ProbeReport | None:
    if probe.loss is None:
        return None
    return ProbeReport(
        loss=probe.loss,
        best_lr=probe.best_lr,
        reference=probe.reference,
        targets=probe.targets,
        curves=probe.curves,
    )


def _blocks(before: JacobianProfile, tuned: AutoInitResult, rho: list[float]) -> list[BlockReport]:
    unit_of = {b: i for i, u in enumerate(tuned.units) for b in u.blocks}
    jb, ja = before.apjn.tolist(), tuned.after.apjn.tolist()
    kb, ka = before.k.tolist(), tuned.after.k.tolist()
    return [
        BlockReport(
            index=b,
            apjn_before=finite_or_none(jb[b]),
            apjn_after=finite_or_none(ja[b]),
            log_apjn_before=finite_or_none(_log(jb[b])),
            log_apjn_after=finite_or_none(_log(ja[b])),
            k_before=finite_or_none(kb[b + 1]),
            k_after=finite_or_none(ka[b + 1]),
            apjn_target=math.exp(rho[b]),
            unit=unit_of[b],
        )
        for b in range(len(jb))
    ]


def _log(v: float) -> float:
    return math.log(v) if v > 0 and math.isfinite(v) else math.nan


def _layers(model: PreflightNet, diag: Diagnostics) -> list[LayerReport]:
    return [
        LayerReport(
            name=info.module,
            fan_in=info.fan_in or 0,
            fan_out=info.fan_out or 0,
            **diag.layer(info.module),
        )
        for info, _ in model.weighted_layers()
    ]


def _tuning(
    tuned: AutoInitResult,
    before: JacobianProfile,
    opts: ConditionOptions,
    device: torch.device,
    balancing: dict[str, float],
) -> TuningReport:
    k_after = tuned.after.k.tolist()
    return TuningReport(
        steps=tuned.steps,
        converged=tuned.converged,
        status=tuned.status,
        message=tuned.message,
        loss=opts.loss,
        loss_curve=[finite_or_none(v) for v in tuned.loss_curve],
        seconds=tuned.seconds,
        device=str(device),
        input_k=finite_or_none(k_after[0]),
        output_std_before=finite_or_none(math.sqrt(before.k[-1].item())),
        output_std_after=finite_or_none(math.sqrt(k_after[-1])),
        invariant=tuned.invariant,
        balancing=balancing,
        autoinit=tuned.scales,
        units=_units(tuned),
        attention_logits_before={k: finite_or_none(v) for k, v in tuned.logits_before.items()},
        attention_logits_after={k: finite_or_none(v) for k, v in tuned.logits_after.items()},
    )


def _units(tuned: AutoInitResult) -> list[UnitReport]:
    """Which model of J(u) the tuner used per unit (``worker.engine.structure``): the one-step rate
    only where it is exact; elsewhere the elasticity it measured (secants) or modelled (streams)."""
    out = []
    for i, unit in enumerate(tuned.units):
        if not unit.tunable:
            model = "untunable"
        elif unit.stream:
            model = "residual_stream" if unit.stream_floor else "scale_free_cell"
        else:
            model = "homogeneous" if unit.exact else "non_homogeneous"
        elasticity = tuned.elasticities[i] if unit.tunable and i < len(tuned.elasticities) else None
        out.append(
            UnitReport(
                blocks=list(unit.blocks),
                model=model,
                one_step_rate=unit.tunable and unit.exact and not unit.stream,
                elasticity=finite_or_none(elasticity),
            )
        )
    return out


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import pydantic

    try:
        ours = version("nas-preflight")
    except PackageNotFoundError:
        ours = "unknown"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pydantic": pydantic.VERSION,
        "nas-preflight": ours,
    }

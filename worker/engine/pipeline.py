"""``condition(spec, data, options)``: bring a candidate to a well-conditioned initialization
and score it. The order (``docs/conditioning.md``):

1. build the model at the spec's own initialization; measure APJN and K ("before");
2. balancing (scaling-calculus paper: geometric re-initialization, GR multipliers, output
   std): an analytical prior that equalises gamma_l across layers;
3. AutoInit from there: the multipliers that make every block critical (Jacobian tuning);
4. final scales = balancing x AutoInit, per parameter name; diagnostics on the result
   (gamma_l and nu_l, kappa(D), Hessian blocks);
5. the trainability probe (``worker.engine.probe``): a few SGD steps from the tuned weights, priced
   apart from the budget; score (with the probe's calibration, or without it when the probe
   did not run), verdict and reasons.

Cost budget (``options.budget_steps``, default 20): one forward + backward is timed first and
counted; balancing is then the closed form (no pass), AutoInit stops by ``AUTOINIT_SHARE`` of
the budget leaving ``DIAGNOSTICS_RESERVE`` steps, and the diagnostics fit the rest (the Hessian
on the layers it can reach, evenly spread; ``tuning.hessian_measured``). Without a budget,
balancing iterates and its multipliers are dropped, with a note, unless it converged.
"""

from __future__ import annotations

import logging
import math
import platform
import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from nas import ArchitectureSpec, build_model, parse_spec, spec_hash
from nas.build import PreflightNet, apply_scales_
from nas.options import ConditionOptions
from nas.report import (
    BlockReport,
    ConditioningReport,
    Environment,
    LayerReport,
    ProbeReport,
    TuningReport,
    finite_or_none,
)
from worker.engine.autoinit import AutoInitResult, autoinit, conditioning_mode
from worker.engine.budget import BNP_COST, FORWARD_COST, SCALING_COST, STEP_COST, profile_cost
from worker.engine.diagnostics import Diagnostics, run_diagnostics
from worker.engine.jacobian import JacobianProfile, block_jacobians
from worker.engine.probe import ProbeResult, run_probe
from worker.engine.score import score
from worker.engine.structure import TuningUnit, block_log_rho

__all__ = ["condition", "select_device"]

log = logging.getLogger(__name__)

# Budget shares, in training steps counted by worker.engine.budget's cost model: AutoInit (what the
# scales and the verdict need) may take the run to AUTOINIT_SHARE of the budget and must leave
# DIAGNOSTICS_RESERVE (scaling and bnp, which always run); the Hessian gets what is left. MANDATORY:
# the stages that always run (timed step, profile, AutoInit's pooling forward, its first profile
# and first step, scaling, bnp).
AUTOINIT_SHARE = 0.75
DIAGNOSTICS_RESERVE = SCALING_COST + BNP_COST
MANDATORY = STEP_COST + 3 * profile_cost(2) + FORWARD_COST + SCALING_COST + BNP_COST


def _autoinit_allowance(opts: ConditionOptions, spent: float) -> float:
    """The most AutoInit may count: up to AUTOINIT_SHARE of the budget, DIAGNOSTICS_RESERVE left."""
    budget = opts.budget_steps or math.inf
    return max(0.0, min(AUTOINIT_SHARE * budget, budget - (DIAGNOSTICS_RESERVE if opts.diagnostics else 0.0)) - spent)


def _left(opts: ConditionOptions, counted: dict[str, float]) -> float | None:
    return None if opts.budget_steps is None else opts.budget_steps - sum(counted.values())


def time_training_step(model: PreflightNet, x: Tensor) -> float:
    """Seconds of one forward + backward of ``model`` on ``x`` (the budget's unit), in training
    mode with BatchNorm's running statistics restored and the gradients cleared."""
    from worker.engine._moments import preserved_buffers

    with conditioning_mode(model), preserved_buffers(model), torch.enable_grad():
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        clock = time.perf_counter()
        model(x).float().pow(2).mean().backward()
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        seconds = time.perf_counter() - clock
    for p in model.parameters():
        p.grad = None
    return seconds


def select_device(preference: str = "auto") -> torch.device:
    """``auto``: CUDA when present, else the CPU; ``cuda[:N]`` must be present."""
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(preference)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {preference!r} was asked for but CUDA is not available; use 'auto' or 'cpu'")
    return device


def condition(
    spec: ArchitectureSpec | Mapping[str, Any] | str,
    data: Tensor | Any | None = None,
    options: ConditionOptions | Mapping[str, Any] | None = None,
) -> ConditioningReport:
    """Condition one candidate; see the module docstring for the steps.

    ``data``: None (a Gaussian batch of the input shape), a tensor or array of inputs
    ``[N, *input_shape]``, or a mapping with ``"x"`` and optionally integer ``"y"`` targets.
    Raises ``nas.SpecError`` for an invalid spec and ValueError for unusable data; a network
    that cannot be conditioned still gets a report (status and reasons say why).
    """
    opts = options if isinstance(options, ConditionOptions) else ConditionOptions.model_validate(options or {})
    parsed = parse_spec(spec)
    device = select_device(opts.device)
    x, y, source = _batch(parsed, data, opts, device)
    model = build_model(parsed, seed=opts.seed).to(device)
    _check_targets(y, list(model.trace.boundaries[-1]))
    rho = block_log_rho(model)

    started = time.perf_counter()
    step = time_training_step(model, x)  # the unit of the cost budget; counted in it
    timings = {"step": step}
    counted = {"step": STEP_COST, "profile_before": profile_cost(opts.n_vectors), "balance": 0.0}  # training steps (worker.engine.budget)
    clock = time.perf_counter()
    with conditioning_mode(model), torch.no_grad():
        before = block_jacobians(model, x, opts.n_vectors, _generator(opts.seed + 1, device))
    timings["profile_before"] = time.perf_counter() - clock
    clock = time.perf_counter()
    balancing, balancing_note, balancing_mode = _balance(model, x, opts, device)
    timings["balance"] = time.perf_counter() - clock
    if balancing:
        apply_scales_(model, balancing)
    tuned = autoinit(
        model, x, loss=opts.loss, kernel_lambda=opts.kernel_lambda, steps=opts.steps, n_vectors=opts.n_vectors,
        tolerance=opts.tolerance, output_std=opts.output_std, generator=_generator(opts.seed + 2, device),
        max_cost=None if opts.budget_steps is None else _autoinit_allowance(opts, sum(counted.values())),
    )  # fmt: skip
    timings["autoinit"], counted["autoinit"] = tuned.seconds, tuned.cost
    balancing = _release_invariant_(model, balancing, tuned.invariant)
    apply_scales_(model, tuned.scales)
    scales = _product(balancing, tuned.scales)
    diagnostics = (
        run_diagnostics(model, x, y, opts, _generator(opts.seed + 3, device), _left(opts, counted))
        if opts.diagnostics
        else Diagnostics()
    )
    timings |= diagnostics.seconds
    counted |= diagnostics.cost
    probe = _probe(model, x, y, opts, tuned)
    timings["probe"] = probe.seconds
    spent = time.perf_counter() - started
    budget = {
        "budget_steps": opts.budget_steps, "step_seconds": step, "counted_steps": sum(counted.values()),
        "timed_steps": spent / step if step > 0 else None, "probe_counted_steps": probe.cost,
    } | {f"counted_{k}": v for k, v in counted.items()}  # fmt: skip
    if opts.budget_steps is not None and sum(counted.values()) > opts.budget_steps + 1e-9:
        diagnostics.notes.append(
            f"the cost budget was exceeded: {sum(counted.values()):.1f} of {opts.budget_steps:g} training steps counted; the stages "
            f"that always run (timed step, profile, AutoInit's first step, scaling, bnp) need about {MANDATORY:g}"
        )

    components = _components(tuned, diagnostics, opts) | {"probe_loss": probe.loss}
    result = score(components, opts.thresholds)
    reasons = _reasons(tuned, result.over, components, diagnostics, opts, parsed, probe) + balancing_note + diagnostics.notes
    reasons += [probe.note] if probe.note else []
    return ConditioningReport(
        spec_hash=spec_hash(parsed),
        score=finite_or_none(result.score),
        verdict=result.verdict,  # type: ignore[arg-type]
        reasons=reasons,
        scales={k: float(v) for k, v in scales.items()},
        blocks=_blocks(before, tuned, rho),
        layers=_layers(model, diagnostics),
        tuning=_tuning(tuned, before, opts, device, balancing).model_copy(
            update={
                "timings": timings, "budget": budget, "balancing_mode": balancing_mode, "hessian_measured": diagnostics.hessian_measured,
                "probe": _probe_report(probe),
            }
        ),  # fmt: skip
        components=result.components,
        penalties=result.penalties,
        thresholds=opts.thresholds,
        score_fit=result.fit,  # type: ignore[arg-type]
        prune_below=result.cut,
        options=opts,
        environment=Environment(
            batch_size=int(x.shape[0]), n_vectors=opts.n_vectors, seed=opts.seed, device=str(device),
            data=source, versions=_versions(), diagnostics=diagnostics.ran,
        ),  # fmt: skip
    )


def _probe(model: PreflightNet, x: Tensor, y: Tensor | None, opts: ConditionOptions, tuned: AutoInitResult) -> ProbeResult:
    """The trainability probe from the tuned weights (``worker.engine.probe``); skipped (the report is
    then scored by the calibration without the probe) when the forward pass is already
    non-finite or the probe is off, and when it fails (a note says why)."""
    if opts.probe_steps == 0 or not tuned.after.finite or tuned.status == "non_finite":
        return ProbeResult()
    try:
        return run_probe(model, x, y, steps=opts.probe_steps, lrs=opts.probe_lrs, momentum=opts.probe_momentum, seed=opts.seed + 5)
    except RuntimeError as exc:  # e.g. out of memory on a large batch
        log.warning("trainability probe failed: %s", exc)
        return ProbeResult(note=f"trainability probe failed ({type(exc).__name__}: {str(exc)[:200]}); scored without it")


def _probe_report(probe: ProbeResult) -> ProbeReport | None:
    if probe.loss is None:
        return None
    return ProbeReport(
        loss=probe.loss, best_lr=probe.best_lr, reference=probe.reference, targets=probe.targets, curves=probe.curves
    )


def _generator(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _batch(
    spec: ArchitectureSpec, data: Any, opts: ConditionOptions, device: torch.device
) -> tuple[Tensor, Tensor | None, str]:
    shape = tuple(spec.input_shape)
    if data is None:
        g = torch.Generator().manual_seed(opts.seed)
        return torch.randn((opts.batch_size, *shape), generator=g).to(device), None, "gaussian"
    raw_y = None
    if isinstance(data, Mapping):
        if "x" not in data:
            raise ValueError(f"data mapping needs an 'x' entry with inputs [N, {', '.join(map(str, shape))}]; got keys {sorted(data)}")
        raw_x, raw_y = data["x"], data.get("y")
    else:
        raw_x = data
    x = torch.as_tensor(raw_x, dtype=torch.float32)
    if tuple(x.shape[1:]) != shape or x.shape[0] < 2:
        raise ValueError(f"data must have shape [N >= 2, {', '.join(map(str, shape))}] to match input_shape, but got {list(x.shape)}")
    x = x[: opts.batch_size].to(device)
    y = None
    if raw_y is not None:
        y = torch.as_tensor(raw_y)[: x.shape[0]].to(device)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"data 'y' has {y.shape[0]} rows but 'x' has {x.shape[0]}")
    return x, y, "given"


def _check_targets(y: Tensor | None, output_shape: list[int]) -> None:
    """Targets the network's output can be scored against, or a ValueError saying why (not a
    broadcast: float targets [N] against an output [N, 1] are the same values)."""
    if y is None:
        return
    outputs = math.prod(output_shape)
    if y.is_floating_point():
        if y[0].numel() != outputs:
            raise ValueError(
                f"data 'y' has {y[0].numel()} float target(s) per sample but the network outputs "
                f"{output_shape} ({outputs} per sample)"
            )
        return
    if y.dtype == torch.bool or y.is_complex():
        raise ValueError(f"data 'y' must hold integer class labels or float targets, but has dtype {y.dtype}")
    if y.dim() != 1:
        raise ValueError(f"data 'y' class labels must be one integer per sample, but got shape {list(y.shape)}")
    if len(output_shape) != 1 or outputs < 2:
        raise ValueError(f"data 'y' holds class labels but the network outputs {output_shape}, not [C >= 2] logits")
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= outputs:
        raise ValueError(f"data 'y' class labels must be in [0, {outputs - 1}] for {outputs} logits, but range over [{low}, {high}]")


def _balance(model: PreflightNet, x: Tensor, opts: ConditionOptions, device: torch.device) -> tuple[dict[str, float], list[str], str]:
    """Balancing's multipliers (relative to the spec's init), the notes, and the mode: the closed
    form under a cost budget, else iterated up to ``balance_rounds`` and dropped unless converged."""
    if not opts.balance:
        return {}, [], "off"
    try:
        from worker.engine.scaling import balance
    except ImportError:
        return {}, [], "off"
    rounds = 0 if opts.budget_steps is not None else opts.balance_rounds
    try:
        with conditioning_mode(model):
            result = balance(model, x, output_std=opts.output_std or 0.05, generator=_generator(opts.seed + 4, device), rounds=rounds)
    except Exception as exc:  # the tuner still runs from the spec's init; the report says so
        log.warning("balancing failed: %s", exc)
        return {}, [f"balancing skipped: {exc}"], "failed"
    scales = {k: float(v) for k, v in result.scales.items()}
    if not all(math.isfinite(v) and v > 0 for v in scales.values()):
        return {}, ["balancing skipped: it produced non-finite or non-positive multipliers"], "failed"
    if rounds and not result.converged:
        return {}, [
            f"balancing did not converge in {rounds} rounds (gamma_l not equalised or output std off target, "
            "e.g. saturating activations); its multipliers were dropped and AutoInit started from the spec's init"
        ], "dropped"  # fmt: skip
    return scales, [], "iterated" if rounds else "closed_form"


def _release_invariant_(model: PreflightNet, balancing: dict[str, float], invariant: list[str]) -> dict[str, float]:
    """Undo balancing's multipliers on scale-invariant layers (weights feeding a norm).

    The network's function does not depend on them; they only set the effective learning
    rate of those weights under SGD (lr / a^2), which nothing here measures. On the
    trainability benchmark BatchNorm MLPs trained worse from the tuned start (2 of 17 won,
    docs/benchmarks.md), and resetting these multipliers to the spec's scale trained better
    on 4 of 6 such nets (docs/conditioning.md, section 4). AutoInit holds them at 1 too.
    """
    prefixes = tuple(f"{module}." for module in invariant)
    released = {name: factor for name, factor in balancing.items() if name.startswith(prefixes)}
    if released:
        apply_scales_(model, {name: 1.0 / factor for name, factor in released.items()})
    return {name: factor for name, factor in balancing.items() if name not in released}


def _product(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {k: a.get(k, 1.0) * b.get(k, 1.0) for k in sorted(set(a) | set(b))}


def _components(tuned: AutoInitResult, diag: Diagnostics, opts: ConditionOptions) -> dict[str, float | None]:
    after = tuned.after
    finite = after.finite and tuned.status != "non_finite"
    head = opts.output_std is not None
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
        out = abs(0.5 * log_k[-1] - math.log(opts.output_std)) if head and opts.output_std else None
    return {
        "jacobian_log": jac,
        "kernel_log_range": kernel,
        "output_log_ratio": out,
        "gamma_log_spread": diag.gamma_log_spread,
        "hessian_log_spread": diag.hessian_log_spread,
        "kappa_d_log": diag.kappa_d_log,
        "non_finite": 0.0 if finite and not diag.non_finite else 1.0,
    }


def _reasons(
    tuned: AutoInitResult,
    over: list[str],
    comps: dict[str, float | None],
    diag: Diagnostics,
    opts: ConditionOptions,
    spec: ArchitectureSpec,
    probe: ProbeResult,
) -> list[str]:
    reasons: list[str] = []
    if tuned.status != "converged":
        reasons.append(f"tuning {tuned.status.replace('_', ' ')}: {tuned.message}")
    for name in over:
        if name == "jacobian_log":
            reasons.extend(_jacobian_reasons(tuned, opts, spec))
        elif name == "kernel_log_range":
            reasons.append(f"forward second moment drifts by a factor {math.exp(comps[name] or 0):.3g} across the network after tuning")
        elif name == "output_log_ratio":
            std = math.exp(0.5 * tuned.after.log_k[-1].item())
            reasons.append(f"output std is {std:.3g} after tuning; target {opts.output_std:g}")
        elif name == "non_finite":
            reasons.append("non-finite values in the forward pass or the diagnostics")
        elif name == "probe_loss":
            reasons.append(_probe_reason(probe, opts))
        else:
            reasons.append(diag.describe(name, comps[name]))
    return reasons


def _probe_reason(probe: ProbeResult, opts: ConditionOptions) -> str:
    rates = ", ".join(f"{lr:g}" for lr in opts.probe_lrs)
    targets = "its labels" if probe.targets == "given" else "random labels"
    if probe.best_lr is None:
        return f"the trainability probe diverged at every learning rate ({rates}): SGD on the batch ({targets}) blew up from the tuned init"
    return (
        f"the trainability probe kept {100 * (probe.loss or 0):.0f} % of the uniform (or mean) prediction's loss after "
        f"{opts.probe_steps} SGD steps on the batch ({targets}) at the best learning rate {probe.best_lr:g} of {rates}"
    )


def _jacobian_reasons(tuned: AutoInitResult, opts: ConditionOptions, spec: ArchitectureSpec) -> list[str]:
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
        out.append(f"APJN of {where} stays at {j:.3g} after tuning (target {math.exp(unit.log_rho):.3g}): {_cause(unit, spec, j)}")
    return out


def _cause(unit: TuningUnit, spec: ArchitectureSpec, j: float) -> str:
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


def _blocks(before: JacobianProfile, tuned: AutoInitResult, rho: list[float]) -> list[BlockReport]:
    unit_of = {b: i for i, u in enumerate(tuned.units) for b in u.blocks}
    jb, ja = before.apjn.tolist(), tuned.after.apjn.tolist()
    kb, ka = before.k.tolist(), tuned.after.k.tolist()
    return [
        BlockReport(
            index=b, apjn_before=finite_or_none(jb[b]), apjn_after=finite_or_none(ja[b]),
            log_apjn_before=finite_or_none(_log(jb[b])), log_apjn_after=finite_or_none(_log(ja[b])),
            k_before=finite_or_none(kb[b + 1]), k_after=finite_or_none(ka[b + 1]),
            apjn_target=math.exp(rho[b]), unit=unit_of[b],
        )  # fmt: skip
        for b in range(len(jb))
    ]


def _log(v: float) -> float:
    return math.log(v) if v > 0 and math.isfinite(v) else math.nan


def _layers(model: PreflightNet, diag: Diagnostics) -> list[LayerReport]:
    return [
        LayerReport(name=info.module, fan_in=info.fan_in or 0, fan_out=info.fan_out or 0, **diag.layer(info.module))
        for info, _ in model.weighted_layers()
    ]


def _tuning(tuned: AutoInitResult, before: JacobianProfile, opts: ConditionOptions, device: torch.device, balancing: dict[str, float]) -> TuningReport:
    k_after = tuned.after.k.tolist()
    return TuningReport(
        steps=tuned.steps, converged=tuned.converged, status=tuned.status, message=tuned.message, loss=opts.loss,
        loss_curve=[finite_or_none(v) for v in tuned.loss_curve], seconds=tuned.seconds, device=str(device),
        input_k=finite_or_none(k_after[0]), output_std_before=finite_or_none(math.sqrt(before.k[-1].item())),
        output_std_after=finite_or_none(math.sqrt(k_after[-1])), invariant=tuned.invariant, balancing=balancing,
        autoinit=tuned.scales,
    )  # fmt: skip


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import numpy
    import pydantic

    try:
        ours = version("nas-preflight")
    except PackageNotFoundError:
        ours = "unknown"
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "pydantic": pydantic.VERSION, "nas-preflight": ours}  # fmt: skip

"""``condition(spec, data, options)``: bring a candidate to a well-conditioned initialization
and score it. The order (``docs/conditioning.md``):

1. build the model at the spec's own initialization; measure APJN and K ("before"), and with
   ``options.expressivity`` what it can represent (``expressivity``: NASWOT, MeCo);
2. balancing (scaling-calculus paper: geometric re-initialization, GR multipliers, output
   std): an analytical prior that equalises gamma_l across layers;
3. AutoInit from there: the multipliers that make every block critical (Jacobian tuning);
4. final scales = balancing x AutoInit, per parameter name; then, in one forward pass, every
   biased layer's output centered per channel on the batch (``centering``; ``report.bias_shifts``);
   diagnostics on the result (gamma_l and nu_l, kappa(D), Hessian blocks);
5. the trainability probe (``worker.engine.probe``): a few SGD steps from the tuned weights, counted
   in the budget (its cost is reserved before AutoInit runs); score (with the probe's calibration,
   or without it when the probe did not run), verdict and reasons. A prune on a probe that did best
   at its lowest rate runs the probe once more at ``options.probe_lower_lr`` and is scored again
   (counted, outside the budget: the verdict's worst error is pruning a network that trains slower).

Cost budget (``options.budget_steps``, default 20): everything the candidate costs, the probe
included. One forward + backward is timed first and counted; balancing is then the closed form
(no pass); the probe's cost is reserved; AutoInit stops by ``AUTOINIT_SHARE`` of the budget
leaving that reserve (and ``DIAGNOSTICS_RESERVE`` steps when the diagnostics run, which they do
not by default), and the diagnostics fit what is left before the probe (the Hessian on the
layers it can reach, evenly spread; ``tuning.hessian_measured``). Without a budget,
balancing iterates and its multipliers are dropped, with a note, unless it converged. The
accounts and those shares are ``worker.engine.budget``'s (``Ledger``).

This module orders the stages; the pieces live beside it: the batch (``inputs``), the device
(``device``), the seed streams (``seeds``), the score's components (``components``), the
reasons (``reasons``) and the report (``assemble``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from nas import ArchitectureSpec, build_model
from nas.build import PreflightNet, apply_bias_shifts_, apply_scales_
from nas.canonical import applied_output_std
from nas.options import ConditionOptions
from nas.report import ConditioningReport
from nas.spec import SpecError
from nas.validate import conditioning_issue
from worker.engine import seeds
from worker.engine._moments import preserved_buffers
from worker.engine.assemble import report
from worker.engine.autoinit import AutoInitResult, autoinit, conditioning_mode
from worker.engine.balancing import balance
from worker.engine.budget import FORWARD_COST, STEP_COST, Ledger, profile_cost
from worker.engine.centering import centering_shifts
from worker.engine.components import components
from worker.engine.device import resolve_device
from worker.engine.diagnostics import Diagnostics, run_diagnostics
from worker.engine.expressivity import Expressivity, measure_expressivity
from worker.engine.forward_variance import unit_forward_variance_scales
from worker.engine.inputs import batch, check_targets, label_note
from worker.engine.jacobian import block_jacobians
from worker.engine.norm_inputs import unit_variance_scales
from worker.engine.probe import ProbeResult, probe_cost, run_probe, with_lower_rate
from worker.engine.reasons import reasons
from worker.engine.score import score
from worker.engine.structure import block_log_rho

__all__ = ["STAGES", "condition", "select_device"]

log = logging.getLogger(__name__)

select_device = resolve_device  # the name this module exported before worker.engine.device


STAGES = (
    "timing one training step",
    "profiling the spec's initialization",
    "balancing",
    "tuning (AutoInit)",
    "diagnostics",
    "trainability probe",
    "scoring",
)  # what ``progress`` is told, in this order (a stage that does not run is skipped)


def condition(
    spec: ArchitectureSpec | Mapping[str, Any] | str,
    data: Tensor | Any | None = None,
    options: ConditionOptions | Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> ConditioningReport:
    """Condition one candidate; see the module docstring for the steps.

    ``spec``: a parsed ``ArchitectureSpec`` (used as it is), a mapping or JSON text (parsed
    once). ``data``: None (a Gaussian batch of the input shape), a tensor or array of inputs
    ``[N, *input_shape]``, or a mapping with ``"x"`` and optionally integer ``"y"`` targets.
    Raises ``nas.SpecError`` for an invalid spec or one without parameters
    (``nas.validate.conditioning_issue``) and ValueError for unusable data; a network
    that cannot be conditioned still gets a report (status and reasons say why). ``progress`` is
    called with each stage's name (``STAGES``) as it starts, for a display.
    """
    tell = progress or (lambda _stage: None)
    opts = options if isinstance(options, ConditionOptions) else ConditionOptions.model_validate(options or {})
    # the one parse of the spec (nas.parse_spec inside build_model); model.trace has its shapes
    model = build_model(spec, seed=opts.seed + seeds.WEIGHTS, draw=opts.draw)  # type: ignore[arg-type]  # a non-dict Mapping: SpecError
    parsed = model.spec
    if reason := conditioning_issue(model.trace):
        raise SpecError.at("blocks", reason)
    opts = opts.model_copy(update={"output_std": applied_output_std(parsed, opts.output_std)})  # "auto" resolved
    device = resolve_device(opts.device)
    x, y, source = batch(parsed, data, opts, device)
    model = model.to(device)
    output_shape = list(model.trace.boundaries[-1])
    check_targets(y, output_shape)
    labels_note = label_note(y, output_shape)
    rho = block_log_rho(model)

    started = time.perf_counter()
    ledger = Ledger(opts.budget_steps)
    # one timed forward + backward: the unit of the cost budget, counted in it
    tell(STAGES[0])
    ledger.record("step", time_training_step(model, x), STEP_COST)
    tell(STAGES[1])
    expressivity = _expressivity(model, x, opts, ledger)
    clock = time.perf_counter()
    with conditioning_mode(model), torch.no_grad():
        before = block_jacobians(model, x, opts.n_vectors, seeds.generator(opts.seed, seeds.PROFILE_BEFORE, device))
    ledger.record("profile_before", time.perf_counter() - clock, profile_cost(opts.n_vectors))
    tell(STAGES[2])
    clock = time.perf_counter()
    balancing, balancing_note, balancing_mode = _balance(model, x, opts, device)
    ledger.record("balance", time.perf_counter() - clock, 0.0)  # the closed form: no counted pass
    if balancing:
        apply_scales_(model, balancing)
    base = _forward_variance_(model, x, opts, ledger) if opts.forward_variance == "base" else {}
    tell(STAGES[3])
    tuned = autoinit(
        model,
        x,
        loss=opts.loss,
        kernel_lambda=opts.kernel_lambda,
        steps=opts.steps,
        n_vectors=opts.n_vectors,
        tolerance=opts.tolerance,
        output_std=opts.head_std,
        generator=seeds.generator(opts.seed, seeds.AUTOINIT, device),
        max_cost=ledger.autoinit_allowance(opts.diagnostics, probe=_probe_reserve(opts)),
    )
    ledger.record("autoinit", tuned.seconds, tuned.cost)
    balancing = _release_invariant_(model, balancing, tuned.invariant)
    apply_scales_(model, tuned.scales)
    unit: dict[str, float] = {}
    if opts.norm_inputs == "unit_variance":
        clock = time.perf_counter()
        unit = unit_variance_scales(model, x, tuned)
        apply_scales_(model, unit)
        ledger.record("norm_inputs", time.perf_counter() - clock, FORWARD_COST)
    if opts.forward_variance == "final":
        unit = _product(unit, _forward_variance_(model, x, opts, ledger))
    shifts = _center_(model, x, opts, ledger)
    left = ledger.left()
    if opts.diagnostics:
        tell(STAGES[4])
    diagnostics = (
        run_diagnostics(
            model,
            x,
            y,
            opts,
            seeds.generator(opts.seed, seeds.DIAGNOSTICS, device),
            None if left is None else left - probe_cost(opts.probe_steps, len(opts.probe_lrs)),
        )
        if opts.diagnostics
        else Diagnostics()
    )
    ledger.seconds |= diagnostics.seconds
    ledger.counted |= diagnostics.cost
    if opts.probe_steps:
        tell(STAGES[5])
    probe = _probe(model, x, y, opts, tuned)
    ledger.record("probe", probe.seconds, probe.cost)  # counted in the budget, reserved before AutoInit
    diagnostics.notes += [note] if (note := ledger.overrun_note()) else []

    tell(STAGES[6])
    comps = components(tuned, diagnostics, opts, probe.loss)
    result = score(comps, opts.thresholds)
    if _below_the_grid(probe, result.verdict, opts):
        lower = _probe(model, x, y, opts.model_copy(update={"probe_lrs": (opts.probe_lower_lr,)}), tuned)
        ledger.record("probe_lower", lower.seconds, lower.cost)  # past the budget when it must
        probe = with_lower_rate(probe, lower)
        comps = components(tuned, diagnostics, opts, probe.loss)
        result = score(comps, opts.thresholds)
        diagnostics.notes.append(
            f"the score pruned on a probe that did best at its lowest rate (or diverged at every rate), so the probe "
            f"ran again at {opts.probe_lower_lr:g} ({lower.cost:.1f} more counted steps, past the budget when it must)"
        )
    budget = ledger.summary(time.perf_counter() - started)
    why = reasons(tuned, result, diagnostics, opts, parsed, probe)
    notes = ([labels_note] if labels_note else []) + balancing_note + diagnostics.notes
    notes += [probe.note] if probe.note else []
    return report(
        spec=parsed,
        opts=opts,
        device=device,
        batch_size=int(x.shape[0]),
        source=source,
        model=model,
        rho=rho,
        before=before,
        tuned=tuned,
        balancing=balancing,
        balancing_mode=balancing_mode,
        scales=_product(_product(_product(balancing, base), tuned.scales), unit),
        bias_shifts=shifts,
        diagnostics=diagnostics,
        probe=probe,
        result=result,
        reasons=why,
        notes=notes,
        timings=ledger.seconds,
        budget=budget,
        expressivity=expressivity,
    )


def _expressivity(model: PreflightNet, x: Tensor, opts: ConditionOptions, ledger: Ledger) -> Expressivity | None:
    """The drawn network's expressivity (``options.expressivity``), one counted forward pass."""
    if not opts.expressivity:
        return None
    clock = time.perf_counter()
    measured = measure_expressivity(model, x)
    ledger.record("expressivity", time.perf_counter() - clock, FORWARD_COST)
    return measured


def time_training_step(model: PreflightNet, x: Tensor) -> float:
    """Seconds of one forward + backward of ``model`` on ``x`` (the budget's unit), in training
    mode with BatchNorm's running statistics restored and the gradients cleared."""
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


def _forward_variance_(model: PreflightNet, x: Tensor, opts: ConditionOptions, ledger: Ledger) -> dict[str, float]:
    """LSUV's target in one forward pass (``worker.engine.forward_variance``), applied to ``model``
    and counted as that pass; its multipliers."""
    clock = time.perf_counter()
    scales = unit_forward_variance_scales(model, x, head_std=opts.head_std)
    apply_scales_(model, scales)
    ledger.record("forward_variance", time.perf_counter() - clock, FORWARD_COST)
    return scales


def _center_(model: PreflightNet, x: Tensor, opts: ConditionOptions, ledger: Ledger) -> dict[str, list[float]]:
    """Zero-mean outputs (``worker.engine.centering``; ``options.center_outputs``), applied to
    ``model`` after every scale and counted as one forward pass; the shifts, for the report."""
    if not opts.center_outputs:
        return {}
    clock = time.perf_counter()
    shifts = centering_shifts(model, x)
    apply_bias_shifts_(model, shifts)
    ledger.record("center_outputs", time.perf_counter() - clock, FORWARD_COST)
    return shifts


def _below_the_grid(probe: ProbeResult, verdict: str, opts: ConditionOptions) -> bool:
    """A prune whose probe did best at its lowest rate, or diverged at every rate: the network may
    train below the grid (``options.probe_lower_lr``), so the probe tries that rate before the
    verdict stands."""
    if opts.probe_lower_lr is None or opts.probe_lower_lr >= min(opts.probe_lrs):
        return False
    if verdict != "prune" or probe.loss is None:
        return False
    return probe.best_lr is None or probe.best_lr == min(opts.probe_lrs)


def _probe_reserve(opts: ConditionOptions) -> float:
    """What runs after AutoInit and is reserved in the budget before it: the probe's counted cost,
    and the forward passes of ``norm_inputs``, a final ``forward_variance`` and the centering when
    they run."""
    return (
        probe_cost(opts.probe_steps, len(opts.probe_lrs))
        + (FORWARD_COST if opts.norm_inputs == "unit_variance" else 0.0)
        + (FORWARD_COST if opts.forward_variance == "final" else 0.0)
        + (FORWARD_COST if opts.center_outputs else 0.0)
    )


def _probe(
    model: PreflightNet, x: Tensor, y: Tensor | None, opts: ConditionOptions, tuned: AutoInitResult
) -> ProbeResult:
    """The trainability probe from the tuned weights (``worker.engine.probe``); skipped (the report is
    then scored by the calibration without the probe) when the forward pass is already
    non-finite or the probe is off, and when it fails (a note says why)."""
    if opts.probe_steps == 0 or not tuned.after.finite or tuned.status == "non_finite":
        return ProbeResult()
    try:
        return run_probe(
            model,
            x,
            y,
            steps=opts.probe_steps,
            lrs=opts.probe_lrs,
            momentum=opts.probe_momentum,
            seed=opts.seed + seeds.PROBE,
        )
    except RuntimeError as exc:  # e.g. out of memory on a large batch
        log.warning("trainability probe failed: %s", exc)
        return ProbeResult(
            note=f"trainability probe failed ({type(exc).__name__}: {str(exc)[:200]}); scored without it"
        )


def _balance(
    model: PreflightNet, x: Tensor, opts: ConditionOptions, device: torch.device
) -> tuple[dict[str, float], list[str], str]:
    """Balancing's multipliers (relative to the spec's init), the notes, and the mode: the closed
    form under a cost budget, else iterated up to ``balance_rounds`` and dropped unless converged."""
    if not opts.balance:
        return {}, [], "off"
    rounds = 0 if opts.budget_steps is not None else opts.balance_rounds
    try:
        with conditioning_mode(model):
            result = balance(
                model,
                x,
                output_std=opts.head_std or 0.05,
                generator=seeds.generator(opts.seed, seeds.BALANCING, device),
                rounds=rounds,
            )
    except Exception as exc:  # the tuner still runs from the spec's init; the report says so
        log.warning("balancing failed: %s", exc)
        return {}, [f"balancing skipped: {exc}"], "failed"
    scales = {k: float(v) for k, v in result.scales.items()}
    if not all(math.isfinite(v) and v > 0 for v in scales.values()):
        return (
            {},
            ["balancing skipped: it produced non-finite or non-positive multipliers"],
            "failed",
        )
    if rounds and not result.converged:
        return (
            {},
            [
                f"balancing did not converge in {rounds} rounds (gamma_l not equalised or output std off target, "
                "e.g. saturating activations); its multipliers were dropped and AutoInit started from the spec's init"
            ],
            "dropped",
        )
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

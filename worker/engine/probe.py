"""The trainability probe: a few real optimizer steps from the tuned initialization.

Every other score component measures how well-conditioned the network *is* at its tuned
start (APJN, forward moments, gamma_l, Hessian spread, kappa(D)). None of them watches the
optimizer move, and on the trainability benchmark no combination of them flagged untrainable
candidates with precision above 0.66 at recall 0.8 (docs/benchmarks.md). The probe asks the
question directly, at the cost of a few training steps: starting from the tuned weights, run
``steps`` steps of SGD with momentum on the conditioning batch, at each learning rate of a
small grid, and keep the lowest final loss. A network that cannot lower the loss of one batch
it sees again and again within a few steps at any of the rates is unlikely to train on the
whole data set either.

The probe's figure is that loss *normalized by the loss of a constant prediction* (1 = nothing
learned): ``ln C`` for ``C`` logits and integer targets (the uniform prediction, the scale the
benchmark's ground truth is read on), the targets' variance term ``0.5 * mean ||t - mean t||^2``
for float targets (the best constant). A rate whose loss
turns non-finite or exceeds ``DIVERGENCE_FACTOR`` times that reference diverged; when every
rate diverges the figure is ``CAP``.

Targets: the batch's own labels when the caller gives them (what the benchmark calibrates on);
without labels, random class labels over the logits (or Gaussian float targets for a single
output), a memorization probe that ranks almost as well but flags less precisely
(docs/conditioning.md, section 7). The weights, BatchNorm statistics and gradients are
restored afterwards: the probe changes nothing the report returns but its own figures.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from nas.report import finite_or_none
from worker.engine._moments import task_loss

__all__ = ["CAP", "DIVERGENCE_FACTOR", "ProbeResult", "probe_cost", "reference_loss", "run_probe", "with_lower_rate"]

CAP = 2.0  # the normalized loss of a probe that diverged at every rate
DIVERGENCE_FACTOR = 100.0  # a loss this many times the reference counts as diverged


@dataclass
class ProbeResult:
    """The normalized probe loss (None: not run) and what it came from."""

    loss: float | None = None  # lowest final loss over the rates / reference, capped at CAP
    best_lr: float | None = None
    reference: float | None = None  # a constant prediction's loss on these targets (reference_loss)
    targets: str = "none"  # "given" | "random" | "none" (not run)
    curves: dict[str, list[float | None]] = field(default_factory=dict)  # per rate: loss per step, then final
    seconds: float = 0.0
    cost: float = 0.0  # training steps, counted (worker.engine.budget's unit)
    note: str = ""  # why the probe did not run, when it failed


def probe_cost(steps: int, n_rates: int) -> float:
    """Counted cost: per rate, ``steps`` training steps and one closing forward (a third)."""
    return n_rates * (steps + 1.0 / 3.0) if steps > 0 else 0.0


def reference_loss(targets: Tensor, outputs: int) -> float:
    """The loss of a constant prediction: the uniform one, ``ln C``, for class targets over
    ``outputs`` logits; the mean one, ``0.5 * mean ||t - mean t||^2``, for float targets."""
    if not targets.is_floating_point():
        return math.log(outputs)
    centered = targets - targets.mean(dim=0, keepdim=True)
    return float(0.5 * centered.pow(2).reshape(targets.shape[0], -1).sum(dim=1).mean())


def run_probe(
    model: nn.Module,
    x: Tensor,
    y: Tensor | None,
    *,
    steps: int,
    lrs: tuple[float, ...],
    momentum: float,
    seed: int,
) -> ProbeResult:
    """Probe ``model`` (left unchanged) on the batch ``x`` with targets ``y`` (None: random)."""
    if steps <= 0 or not lrs:
        return ProbeResult()
    started = time.perf_counter()
    state = copy.deepcopy(model.state_dict())
    was_training = model.training
    generator = torch.Generator(device=x.device).manual_seed(seed)
    with torch.no_grad():
        outputs = model.eval()(x[:2]).reshape(2, -1).shape[1]
    given = y is not None
    targets = y if y is not None else _random_targets(x, outputs, generator)
    if targets.is_floating_point() and targets.dim() == 1:
        targets = targets[:, None]  # one float target per sample: the single output's shape
    reference = reference_loss(targets, outputs)
    curves: dict[str, list[float | None]] = {}
    finals: dict[float, float] = {}
    try:
        for lr in lrs:
            model.load_state_dict(state)
            with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
                torch.manual_seed(seed)  # dropout draws the same masks at every rate
                curve = _descend(model, x, targets, lr, momentum, steps, DIVERGENCE_FACTOR * reference)
            curves[f"{lr:g}"] = [finite_or_none(v) for v in curve]
            finals[lr] = curve[-1]
    finally:
        model.load_state_dict(state)
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    best_lr = min(finals, key=lambda lr: finals[lr])
    best = finals[best_lr]
    normalized = best / reference if math.isfinite(best) and reference > 0 else math.inf
    return ProbeResult(
        loss=min(normalized, CAP),
        best_lr=best_lr if math.isfinite(best) else None,
        reference=reference,
        targets="given" if given else "random",
        curves=curves,
        seconds=time.perf_counter() - started,
        cost=probe_cost(steps, len(lrs)),
    )


def with_lower_rate(probe: ProbeResult, lower: ProbeResult) -> ProbeResult:
    """``probe`` and a probe of the same network at a lower rate as one probe over all their rates:
    the lower loss and its rate (``probe``'s on a tie), every curve, both costs."""
    better = lower.loss is not None and lower.best_lr is not None and (probe.loss is None or lower.loss < probe.loss)
    best = lower if better else probe
    return dataclasses.replace(
        probe,
        loss=best.loss,
        best_lr=best.best_lr,
        curves=probe.curves | lower.curves,
        seconds=probe.seconds + lower.seconds,
        cost=probe.cost + lower.cost,
        note="; ".join(n for n in (probe.note, lower.note) if n),
    )


def _random_targets(x: Tensor, outputs: int, generator: torch.Generator) -> Tensor:
    if outputs >= 2:
        return torch.randint(0, outputs, (x.shape[0],), generator=generator, device=x.device)
    return torch.randn((x.shape[0], outputs), generator=generator, device=x.device)


def _descend(
    model: nn.Module, x: Tensor, y: Tensor, lr: float, momentum: float, steps: int, limit: float
) -> list[float]:
    """SGD on one batch in training mode: the loss before each step, then after the last
    (evaluated in training mode, as the steps saw it); inf from the first divergence on."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    curve: list[float] = []
    with torch.enable_grad():
        for _ in range(steps):
            loss = task_loss(model(x), y, reduction="mean")
            value = float(loss.detach())
            if not math.isfinite(value) or value > limit:
                return curve + [math.inf]
            curve.append(value)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        value = float(task_loss(model(x), y, reduction="mean"))
    return curve + [value if math.isfinite(value) and value <= limit else math.inf]

"""The cost model of ``worker.engine.condition``'s budget (docs/conditioning.md section 6).

Every cost is in training steps (one forward + backward of the candidate at the conditioning
batch) and is *counted* from the passes a stage makes, not timed: the budget's decisions
(AutoInit's last step, which Hessian layers and how many iterations) are then deterministic,
so the same seed gives the same report on a loaded machine. ``condition`` also times one
training step and every stage, and reports both (``tuning.budget``, ``tuning.timings``).
Constants are upper-end figures measured on the CPU (bench/perf/tuning_cost.py: an MLP, VGG11-BN,
ResNet-14); a forward is about a third of a training step and a backward two thirds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AUTOINIT_SHARE",
    "BNP_COST",
    "BUDGET_SLACK",
    "DIAGNOSTICS_RESERVE",
    "FORWARD_COST",
    "HESSIAN_PRODUCT_COST",
    "MANDATORY",
    "SCALING_COST",
    "STEP_COST",
    "Ledger",
    "hessian_plan",
    "profile_cost",
]

STEP_COST = 1.0  # the timed forward + backward that fixes the unit
FORWARD_COST = 1.0 / 3.0
# worker.engine.scaling.measure_scaling: forward, backward, a VJP and per-sample weight gradients
# per layer (measured 0.3-4.5)
SCALING_COST = 5.0
BNP_COST = 0.5  # worker.engine.bnp.kappa_d: a forward with statistics hooks (measured 0.2-0.5)
# one Hessian-vector or Gauss-Newton product, per unit of (Hessian batch / conditioning batch):
# a double backward through the network (measured 1.2-1.9 per unit on a quiet CPU for the first,
# largest layer of VGG11-BN and of a 6x1024 MLP, whose products do not shrink with the batch)
HESSIAN_PRODUCT_COST = 2.0


def profile_cost(n_vectors: int) -> float:
    """One APJN profile (``worker.engine.jacobian.block_jacobians``): a forward and ``n_vectors``
    batched vector-Jacobian products (each about a backward)."""
    return FORWARD_COST + (1.0 - FORWARD_COST) * n_vectors


def hessian_plan(
    left: float,
    n_layers: int,
    iterations: int,
    probes: int,
    batch_ratio: float,
    chain_rule: bool = True,
) -> tuple[int, int, float]:
    """How many layers (evenly spread, ``worker.engine.hessian.spread_order``) and how many power
    iterations fit in ``left`` training steps, and what they cost: all layers at the asked
    iterations if they fit, else fewer iterations down to 2 (or the asked number when smaller),
    then fewer layers. ``batch_ratio``: Hessian batch over conditioning batch. (0, 0, 0.0) when
    not even one layer fits."""
    product = HESSIAN_PRODUCT_COST * batch_ratio
    prefix = product  # forward and first-order backward with create_graph
    room = left - prefix
    per_layer = 0.0
    floor_it = min(2, iterations)
    for it in range(iterations, floor_it - 1, -1):
        per_layer = ((2 if chain_rule else 1) * it + probes) * product
        if n_layers * per_layer <= room:
            return n_layers, it, prefix + n_layers * per_layer
    layers = max(0, min(n_layers, math.floor(room / per_layer))) if per_layer > 0 else 0
    return (layers, floor_it, prefix + layers * per_layer) if layers else (0, 0, 0.0)


# Budget shares, in training steps: AutoInit (what the scales and the verdict need) may take the
# run to AUTOINIT_SHARE of the budget and must leave DIAGNOSTICS_RESERVE (scaling and bnp, which
# always run); the Hessian gets what is left. MANDATORY: the stages that always run (timed step,
# profile, AutoInit's pooling forward, its first profile and first step, scaling, bnp).
AUTOINIT_SHARE = 0.75
DIAGNOSTICS_RESERVE = SCALING_COST + BNP_COST
MANDATORY = STEP_COST + 3 * profile_cost(2) + FORWARD_COST + SCALING_COST + BNP_COST
# how far the counted steps may pass the budget (floating-point rounding of the sum) before
# the report notes that the budget was exceeded
BUDGET_SLACK = 1e-9


@dataclass
class Ledger:
    """One ``condition`` run's accounts, stage by stage in the order they ran: ``seconds``
    (timed, reported as ``tuning.timings``) and ``counted`` (training steps of the cost model,
    what the budget's decisions read). ``budget_steps``: None for no budget."""

    budget_steps: float | None
    seconds: dict[str, float] = field(default_factory=dict)
    counted: dict[str, float] = field(default_factory=dict)

    def record(self, stage: str, seconds: float, cost: float) -> None:
        self.seconds[stage] = seconds
        self.counted[stage] = cost

    def spent(self) -> float:
        """Training steps counted so far."""
        return sum(self.counted.values())

    def left(self) -> float | None:
        """Training steps left of the budget (None: no budget)."""
        return None if self.budget_steps is None else self.budget_steps - self.spent()

    def autoinit_allowance(self, diagnostics: bool, probe: float = 0.0) -> float | None:
        """The most AutoInit may count from here (None: no budget): up to AUTOINIT_SHARE of the
        budget, leaving ``probe`` (the probe's counted cost, reserved first: the score stands on
        it) and DIAGNOSTICS_RESERVE when the diagnostics run."""
        if self.budget_steps is None:
            return None
        budget = self.budget_steps or math.inf
        reserve = probe + (DIAGNOSTICS_RESERVE if diagnostics else 0.0)
        return max(0.0, min(AUTOINIT_SHARE * budget, budget - reserve) - self.spent())

    def summary(self, wall_seconds: float) -> dict[str, Any]:
        """``tuning.budget``: the budget, the timed step, the counted total (every stage, the
        probe included: what the candidate cost), the timed total, the probe's share of the count
        and each stage's count."""
        step = self.seconds["step"]
        return {
            "budget_steps": self.budget_steps,
            "step_seconds": step,
            "counted_steps": self.spent(),
            "timed_steps": wall_seconds / step if step > 0 else None,
            "probe_counted_steps": self.counted.get("probe", 0.0) + self.counted.get("probe_lower", 0.0),
        } | {f"counted_{k}": v for k, v in self.counted.items()}

    def overrun_note(self) -> str | None:
        """A note when the counted steps passed the budget (by more than BUDGET_SLACK)."""
        if self.budget_steps is None or self.spent() <= self.budget_steps + BUDGET_SLACK:
            return None
        return (
            f"the cost budget was exceeded: {self.spent():.1f} of {self.budget_steps:g} training steps counted; the "
            "stages "
            f"that always run (timed step, profile, AutoInit's first step, the probe; scaling and bnp with the "
            f"diagnostics) need about {MANDATORY:g} besides the probe"
        )

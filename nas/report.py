"""The conditioning report: what ``worker.engine.condition`` returns and the service stores.

Top-level names are a contract (``docs/contracts.md``): ``score``, ``verdict``, ``reasons``,
``scales``, ``blocks``, ``layers``, ``tuning``, ``components``, ``environment``,
``spec_hash``. Non-finite figures are ``null`` in JSON (never ``NaN``, which is not JSON).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator

from nas.options import ConditionOptions, Thresholds

__all__ = [
    "RECOMMENDED_LR_FACTOR",
    "BlockReport",
    "ConditioningReport",
    "Environment",
    "ExpressivityReport",
    "LayerReport",
    "TuningReport",
    "UnitReport",
    "Verdict",
    "finite_or_none",
    "float_or_nan",
]

Verdict = Literal["keep", "prune"]  # a report's verdict; the API's candidate list filters by it


# The rate to train at is the probe's best rate times this: one step of the probe's grid (0.1, 0.03)
# below it. The rate that lowers the loss most in a few steps overshoots over epochs (the
# short-horizon bias of Wu et al. 2018); on benchmark v2's development set the probe's best rate
# itself did worse than any fixed rate, one step below it better (bench/ablations/learning_rate.py).
RECOMMENDED_LR_FACTOR = 0.3


def float_or_nan(value: object) -> float:
    """``value`` as a float, or NaN when it is missing or not a number (a user attribute read
    back from an Optuna storage, say): NaN is what a decision refuses."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, or None when it is missing, NaN or infinite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="null")


class BlockReport(_Model):
    """Block ``index`` maps boundary ``index`` to ``index + 1``; K is at its output boundary."""

    index: int
    apjn_before: float | None
    apjn_after: float | None
    log_apjn_before: float | None
    log_apjn_after: float | None
    k_before: float | None
    k_after: float | None
    apjn_target: float  # rho: what the block's parameter-free reductions do by themselves
    unit: int  # the tuning unit (blocks without a tunable scale join their neighbour's)


class LayerReport(_Model):
    """One weighted layer (linear or conv2d), by module name as in ``nas.build_model``."""

    name: str
    fan_in: int
    fan_out: int
    gamma: float | None = None  # scaling paper eq. 2, after conditioning
    nu: float | None = None
    hessian_top_eigenvalue: float | None = None
    hessian_chain_rule: float | None = None
    hessian_mean_sq_singular: float | None = None
    kappa_d: float | None = None


class ProbeReport(_Model):
    """The trainability probe (``worker.engine.probe``): normalized loss, the rate that reached it,
    the constant prediction's loss it is normalized by (uniform for classes), and the curve at each rate."""

    loss: float  # lowest final loss over the rates / reference, capped (worker.engine.probe.CAP)
    best_lr: float | None  # None: every rate diverged
    reference: float | None
    targets: Literal["given", "random"]
    curves: dict[str, list[float | None]]  # per rate: the loss before each step, then the final


class UnitReport(_Model):
    """One AutoInit tuning unit and which model of J(u) the tuner used for it. ``one_step_rate``:
    AutoInit's one-step rate (eq. 19, u <- u - r / 2) is exact here (positively homogeneous,
    equal path depths); elsewhere ``elasticity`` is the d log J / du the tuner measured or
    modelled instead (2 where the rate holds; None where nothing is tunable)."""

    blocks: list[int]
    model: Literal["homogeneous", "non_homogeneous", "residual_stream", "scale_free_cell", "untunable"]
    one_step_rate: bool
    elasticity: float | None


class TuningReport(_Model):
    steps: int
    converged: bool
    status: str
    message: str
    loss: str
    loss_curve: list[float | None]
    seconds: float
    device: str
    input_k: float | None = None  # K^0 of the batch used
    output_std_before: float | None = None
    output_std_after: float | None = None
    invariant: list[str] = Field(default_factory=list)  # scale-invariant layers held at 1
    balancing: dict[str, float] = Field(default_factory=dict)  # balancing's own multipliers
    autoinit: dict[str, float] = Field(default_factory=dict)  # AutoInit's, on top of balancing
    timings: dict[str, float] = Field(default_factory=dict)  # seconds per stage of condition()
    # the cost budget: budget_steps, step_seconds (one forward + backward, timed), counted_steps
    # (worker.engine.budget's deterministic cost model, which decides) and counted_<stage>, timed_steps
    budget: dict[str, float | None] = Field(default_factory=dict)
    balancing_mode: str = "off"  # off | closed_form | iterated | dropped (not converged) | failed
    # weighted layers whose Hessian figures were computed (the others are null); None: all
    hessian_measured: list[str] | None = None
    probe: ProbeReport | None = None  # None: the probe was off or could not run
    units: list[UnitReport] = Field(default_factory=list)
    # per attention layer: the second moment of its logits q k^T / sqrt(d_h) at the spec's init
    # (after balancing) and after conditioning (worker.engine.attention sets it to 1)
    attention_logits_before: dict[str, float | None] = Field(default_factory=dict)
    attention_logits_after: dict[str, float | None] = Field(default_factory=dict)


class Environment(_Model):
    batch_size: int
    n_vectors: int
    seed: int
    device: str
    data: Literal["gaussian", "given"]
    # the weights the scales were tuned on: rebuild with nas.build_model(spec, scales=report.scales,
    # seed=report.environment.seed, draw=report.environment.draw)
    draw: Literal["gaussian", "orthogonal"] = "gaussian"
    versions: dict[str, str]
    diagnostics: list[str]  # which diagnostic modules ran


class ExpressivityReport(_Model):
    """What the network can represent at its drawn initialization (``options.expressivity``;
    worker.engine.expressivity): higher is more expressive in both."""

    # log |K_H| over the batch (Mellor et al. 2021, eq. 2); None: no activation unit, or K_H singular
    # (two samples with one code: the network cannot tell them apart)
    naswot: float | None
    meco: float | None  # sum over weighted layers of lambda_min of the output's correlation (Jiang et al. 2023)
    activation_units: int
    layers: int


class ConditioningReport(_Model):
    """Result of conditioning one candidate; ``scales`` is what ``nas.build_model`` takes."""

    spec_hash: str
    score: float | None
    verdict: Verdict
    reasons: list[str]  # the verdict's cause first, then the others worst first
    scales: dict[str, float]
    # per-channel values added to named biases after the scales (the engine's centering, one forward
    # pass: every weighted layer's output at zero mean per channel on the batch); empty when it is off
    bias_shifts: dict[str, list[float]] = Field(default_factory=dict)
    blocks: list[BlockReport]
    layers: list[LayerReport]
    tuning: TuningReport
    components: dict[str, float | None]
    penalties: dict[str, float | None]
    thresholds: Thresholds  # the components' thresholds; the verdict's cut is prune_below alone
    # the calibration that scored it (with the trainability probe, or without when it did not
    # run) and the cut the verdict used (thresholds.score, else that fit's calibrated cut)
    score_fit: Literal["with_probe", "without_probe"] = "with_probe"
    prune_below: float | None = None
    options: ConditionOptions
    environment: Environment
    # what the engine did rather than found: balancing dropped, a diagnostic skipped or cut down
    # under the cost budget, the probe failing (the reasons are about the network)
    notes: list[str] = Field(default_factory=list)
    # the learning rate to train the tuned network at with SGD and momentum (the probe's optimizer):
    # the probe's best rate x RECOMMENDED_LR_FACTOR; None without a probe or when every rate diverged.
    # Derived from tuning.probe when a report (or one stored before it existed) does not carry it.
    recommended_lr: float | None = None
    # measured when options.expressivity is on (None otherwise): ranks networks that all train; not
    # part of the score or the verdict
    expressivity: ExpressivityReport | None = None

    @model_validator(mode="after")
    def _recommend_a_rate(self) -> ConditioningReport:
        probe = self.tuning.probe
        if self.recommended_lr is None and probe is not None and probe.best_lr is not None:
            self.recommended_lr = probe.best_lr * RECOMMENDED_LR_FACTOR
        return self

    @field_serializer("thresholds")
    def _thresholds_without_the_cut(self, thresholds: Thresholds) -> dict[str, Any]:
        """The cut is stated once, as ``prune_below`` (the one the verdict used), not also as a
        ``thresholds.score`` that is null whenever the calibrated cut applies."""
        return thresholds.model_dump(exclude={"score"})

    def build_model(self, spec: Any) -> Any:
        """The network at its tuned initialization: ``nas.build_model`` of ``spec`` (the spec this
        report is for) with the report's scales, seed and draw, the three that the scales belong to,
        and its bias shifts. Another spec is refused: another activation or gain takes the same
        scales without an error, and they would not be its tuned ones."""
        from nas.build import build_model
        from nas.canonical import spec_hash
        from nas.validate import parse_spec

        parsed = parse_spec(spec)  # once: the hash and the build read the same validated spec
        if (given := spec_hash(parsed)) != self.spec_hash:
            raise ValueError(
                f"this report is for the spec with hash {self.spec_hash[:12]}..., not for the one given "
                f"({given[:12]}...): build from the spec that was conditioned"
            )
        env = self.environment
        return build_model(
            parsed, scales=self.scales or None, seed=env.seed, draw=env.draw, bias_shifts=self.bias_shifts or None
        )

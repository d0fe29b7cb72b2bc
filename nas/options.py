"""Options of one conditioning run; part of a job's cache key (except ``device``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from nas.spec import Integer

__all__ = ["HEAD_STD", "HEAD_STD_NORMALIZED", "ConditionOptions", "Thresholds"]

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _switch(value: object) -> bool:
    """A switch is true or false (a numpy bool too): 1, "yes" or "true" is a mistake to report,
    not to coerce, as a count's "10" is (``nas.spec.Integer``)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise PydanticCustomError("bool_type", "Input should be true or false")


Switch = Annotated[bool, BeforeValidator(_switch)]
# an SGD learning rate: 100 is far above any a network trains at (1e308 overflowed the probe)
LearningRate = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]

# output_std "auto": networks without BatchNorm trained better from 0.5, those with it from 1.0, on
# benchmark v2's development set (docs/conditioning.md, section 8, "The head's std")
HEAD_STD = 0.5
HEAD_STD_NORMALIZED = 1.0


class Thresholds(BaseModel):
    """Where the score's components start to count against a candidate (``worker.engine.score``).

    Each component threshold t_c is the scale of its penalty ``w_c log1p(|c| / t_c)``: at
    t_c a component costs ``w_c ln 2`` and is named in the reasons. The verdict is ``prune``
    when the score falls below ``score`` (default None: the calibrated cut, in
    ``worker/engine/score_weights.json``, of the fit that scores the candidate: with the trainability
    probe, or without it when it did not run) or a hard failure occurs. The calibration was fitted with
    these default t_c; changing one changes what the weights mean.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    # None: the calibrated cut of the fit that scores the candidate (with or without the probe)
    score: Annotated[float | None, Field(allow_inf_nan=False)] = None
    jacobian_log: Positive = 0.35  # |log J / rho| left after tuning (0.35: J off by a factor 1.4)
    kernel_log_ratio: Positive = 2.0  # max |log K^l / K^0| after tuning (a factor 7.4)
    output_log_ratio: Positive = 0.7  # |log of output std / target| (a factor 2)
    gamma_log_spread: Positive = 2.0  # std of log gamma_l across hidden layers (scaling paper)
    hessian_log_spread: Positive = 2.0  # std of log top Hessian eigenvalue across hidden layers
    kappa_d_log: Positive = 2.3  # log max kappa(D) (10: BNP would help a lot)
    probe_loss: Positive = 1.0  # probe loss / a constant prediction's (1: nothing learned)


class ConditionOptions(BaseModel):
    """Everything ``worker.engine.condition`` needs besides the spec and the data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # "kernel" (eq. 24) by default: for ReLU nets it agrees with "log" (J and K scale alike),
    # for deep SiLU / GELU nets J alone lets K grow without bound (docs/conditioning.md)
    loss: Literal["log", "square", "kernel"] = "kernel"
    kernel_lambda: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.5
    steps: Annotated[Integer, Field(ge=0, le=1000)] = 10
    # Hutchinson vectors per APJN profile: 1 buys AutoInit more steps within the budget, which trained
    # better than 2 on benchmark v2's development set (docs/conditioning.md, "Choosing the defaults")
    n_vectors: Annotated[Integer, Field(ge=1, le=64)] = 1
    batch_size: Annotated[Integer, Field(ge=2, le=4096)] = 64
    seed: Annotated[Integer, Field(ge=0, le=2**62)] = 0  # the engine adds stream offsets; torch takes < 2**64
    # the weights the scales are tuned on (nas.build_model's draw): the spec's Gaussian schemes, or
    # their orthogonal polar factors at the same norm (nas.build.orthogonal_draw_)
    # (orthogonal: trained better than the Gaussian draw on benchmark v2's development set)
    draw: Literal["gaussian", "orthogonal"] = "orthogonal"
    device: str = "auto"
    # the batch drawn when no data is given (the default path): standard normal ("white") noise, or
    # Gaussian noise whose amplitude spectrum falls as 1/f over an input's last two dimensions (one,
    # for a vector), "pink". Pink's gain on benchmark v2's development set, over three seeds, stayed
    # within the noise (docs/conditioning.md, section 8), so white stays the default
    synthetic_inputs: Literal["white", "pink"] = "white"
    tolerance: Positive = 0.1  # |log J - log rho| at which a unit counts as critical
    # the head's output std target (scaling paper, section 10); None: tune the head on J too.
    # "auto": HEAD_STD_NORMALIZED for a network with a BatchNorm layer, else HEAD_STD (resolved per
    # network by worker.engine.condition; the report's options carry the number applied). Not the
    # paper's 0.05: the paper multiplies the logits by a fixed constant, while a multiplier on the
    # head's weights (all Preflight can return) also shrinks every gradient flowing into the body by
    # the same factor (docs/conditioning.md, section 8, "The head's std")
    output_std: Positive | Literal["auto"] | None = "auto"
    balance: Switch = True  # geometric init + GR balancing first (scaling paper), then AutoInit
    # the scale of weights that feed a normalization (scale-invariant: the Jacobian target cannot see
    # them; their scale sets how fast they learn): "spec" keeps the spec's, "unit_variance" puts their
    # output variance at 1 on the batch as LSUV does (worker.engine.norm_inputs; one forward pass)
    norm_inputs: Literal["spec", "unit_variance"] = "spec"
    # LSUV's data-dependent target on every linear/conv layer, in one forward pass
    # (worker.engine.forward_variance): "base" puts it under AutoInit as its starting point, "final"
    # applies it after AutoInit (it then sets every weighted layer's scale, the head's at output_std)
    forward_variance: Literal["off", "base", "final"] = "off"
    # shift every biased linear/conv layer's bias so that its output has zero mean per channel on the
    # batch, after the scales (worker.engine.centering; one forward pass; report.bias_shifts)
    center_outputs: Switch = True
    # whole conditioning, the probe and diagnostics included, in training steps (forward + backward)
    # of the candidate at this batch, timed once at the start (docs/conditioning.md section 6); None:
    # no budget (balancing iterates up to balance_rounds, every diagnostic on every layer)
    budget_steps: Positive | None = 20.0
    balance_rounds: Annotated[Integer, Field(ge=0, le=64)] = 16  # 0: closed form; with a budget: 0
    hessian_iterations: Annotated[Integer, Field(ge=0, le=200)] = 3  # per layer; 0 skips the Hessian
    hessian_probes: Annotated[Integer, Field(ge=1, le=64)] = 1  # Hutchinson vectors for tr(H^2)
    # at least 2, as batch_size: a BatchNorm network has no batch statistics at one sample
    hessian_batch_size: Annotated[Integer, Field(ge=2, le=4096)] = 8
    # scaling, Hessian and BNP figures (cost: 6 to 10 training steps). Off by default: on benchmark
    # v2 their calibrated weights stayed near zero (docs/conditioning.md, "Choosing the defaults")
    diagnostics: Switch = False
    # the architecture's expressivity at its drawn init (worker.engine.expressivity: NASWOT's log |K_H| and
    # MeCo's correlation floor, one forward pass, counted): what ranks networks that all train, which the
    # probe cannot (NAS-Bench-201: docs/nasbench201.md). In the report, not in the trainability score
    expressivity: Switch = False
    # the trainability probe (worker.engine.probe): probe_steps SGD steps at each of probe_lrs from the
    # tuned init, on the conditioning batch; counted in budget_steps and reserved before AutoInit
    # (it costs len(probe_lrs) * (probe_steps + 1/3) training steps); 0 turns it off. 5 steps at two
    # rates ranked benchmark v2's development set about as well as 15 at three, for a quarter of
    # the cost (bench/ablations/probe_design.py). Set the rates to the ones your training uses
    probe_steps: Annotated[Integer, Field(ge=0, le=1000)] = 5
    probe_lrs: Annotated[tuple[LearningRate, ...], Field(min_length=1, max_length=8)] = (0.1, 0.03)
    probe_momentum: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.9
    # before a prune verdict whose probe did best at its lowest rate, the probe runs once more at this
    # lower rate (probe_steps steps, counted, past budget_steps when it must) and keeps the lower loss:
    # a network that trains below the probe's rates is not pruned for it (docs/conditioning.md,
    # section 7). None, or a rate not below every one of probe_lrs: never
    probe_lower_lr: LearningRate | None = 0.01
    thresholds: Thresholds = Field(default_factory=Thresholds)

    @property
    def head_std(self) -> float | None:
        """The head's output std target once ``output_std`` is a number or None; "auto" is resolved
        per network by ``worker.engine.condition`` before any stage reads it."""
        if isinstance(self.output_std, str):  # "auto"
            raise ValueError("output_std 'auto' has no value until worker.engine.condition resolves it per network")
        return self.output_std

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', but got {device!r}")
        return device

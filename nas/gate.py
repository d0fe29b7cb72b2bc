"""The conditioning gate: score a trial's architecture before training it.

In an objective::

    gate = ConditioningGate(PreflightClient(), options={"study": "digits"})

    def objective(trial):
        spec = space(trial)
        report = gate.check(trial, spec)      # raises optuna.TrialPruned on a "prune" verdict
        model = report.build_model(spec)     # the tuned init: scales, seed, draw and bias shifts
        return train(model)

:meth:`ConditioningGate.check` submits the spec, waits for the report, records it in the
trial's user attributes (``preflight_score``, ``preflight_verdict``,
``preflight_candidate_id``, ``preflight_reasons``) and, before any training, raises
``optuna.TrialPruned`` when the candidate should be pruned. Where the trial has
``set_constraint`` (Optuna 5) it also records the *conditioning margin*
``threshold - score`` as the constraint ``preflight_conditioning`` (feasible when <= 0), so
that constraint-aware samplers (TPE, NSGA-II, GP) rank the pruned candidates by how far
they missed rather than as uniformly bad. The gate never calls ``should_prune``, so it
serves multi-objective studies as well. :meth:`ConditioningGate.prescreen` does the same
for many trials at once (ask, submit all specs in one request, tell the pruned ones).

With ``prune=False`` the gate only records, and the decision is left to the study's pruner
(:class:`nas.pruners.ConditioningPruner`) through ``trial.should_prune()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import optuna
from optuna.trial import TrialState

from nas.build import PreflightNet
from nas.client import Candidate, PreflightClient, SpecLike, spec_payload
from nas.decision import conditioning_margin, keeps, report_threshold
from nas.errors import CandidateFailed
from nas.report import ConditioningReport, float_or_nan

__all__ = [
    "ATTR_CANDIDATE_ID",
    "ATTR_REASONS",
    "ATTR_SCORE",
    "ATTR_VERDICT",
    "CONSTRAINT_KEY",
    "ConditioningGate",
    "Screened",
    "conditioning_margin",
    "earlier_scores",
    "report_threshold",
]

ATTR_CANDIDATE_ID = "preflight_candidate_id"
ATTR_SCORE = "preflight_score"
ATTR_VERDICT = "preflight_verdict"
ATTR_REASONS = "preflight_reasons"
CONSTRAINT_KEY = "preflight_conditioning"

OnFailure = Literal["raise", "prune", "keep"]


@dataclass(frozen=True)
class Screened:
    """A trial that passed pre-screening: train it, then ``study.tell(trial, value)``."""

    trial: optuna.Trial
    spec: dict[str, Any]
    candidate: Candidate

    @property
    def report(self) -> ConditioningReport:
        return self.candidate.require_report()

    @property
    def scales(self) -> dict[str, float]:
        """What ``nas.build_model(spec, scales=...)`` takes: the tuned multipliers."""
        return dict(self.report.scales)

    @property
    def recommended_lr(self) -> float | None:
        """The rate to train the survivor at with SGD and momentum (the report's ``recommended_lr``:
        one probe step below the probe's best rate); None when the probe did not run."""
        return self.report.recommended_lr

    def build_model(self) -> PreflightNet:
        """The survivor at its tuned initialization: the spec's weights at the seed and draw the
        conditioning used, multiplied by the tuned scales, with the report's bias shifts."""
        return cast(PreflightNet, self.report.build_model(self.spec))


class ConditioningGate:
    """Submit a trial's spec, wait for its conditioning report, prune before training.

    Args:
        client: a :class:`~nas.client.PreflightClient`; default one from the environment.
        options: job options sent with every spec (tuning options, device, priority);
            the study name and the trial number are added from the trial.
        timeout: seconds to wait for one report (None: no limit).
        threshold: prune when ``score < threshold``; None: the engine's verdict decides.
        prune: False to record only and leave the decision to the study's pruner.
        constraint: record the conditioning margin with ``trial.set_constraint`` where
            the installed Optuna has it.
        on_failure: when the service cannot condition a candidate: ``"raise"``
            (:class:`~nas.errors.CandidateFailed`), ``"prune"`` or ``"keep"`` (train it
            from its plain initialization).
    """

    def __init__(
        self,
        client: PreflightClient | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = 600.0,
        threshold: float | None = None,
        prune: bool = True,
        constraint: bool = True,
        on_failure: OnFailure = "raise",
    ) -> None:
        if timeout is not None and not (timeout > 0):
            raise ValueError(f"timeout must be positive seconds or None, but got {timeout=}.")
        if threshold is not None and not math.isfinite(threshold):
            raise ValueError(f"threshold must be a finite number or None, but got {threshold=}.")
        if on_failure not in ("raise", "prune", "keep"):
            raise ValueError(f'on_failure must be "raise", "prune" or "keep", but got {on_failure=}.')
        self.client = client if client is not None else PreflightClient()
        self.options = dict(options or {})
        self.timeout = timeout
        self.threshold = threshold
        self.prune = prune
        self.constraint = constraint
        self.on_failure = on_failure

    def job_options(self, study_name: str | None, trial_number: int | None = None) -> dict[str, Any]:
        """The options sent with a spec: the gate's, with the study and trial filled in."""
        out = dict(self.options)
        if study_name is not None:
            out.setdefault("study", study_name)
        if trial_number is not None:
            out.setdefault("trial", trial_number)
        return out

    def submit(self, trial: optuna.Trial, spec: SpecLike) -> Candidate:
        """Queue the spec and record its candidate id, without waiting: a
        :class:`~nas.pruners.ConditioningPruner` given a client waits for it at the first
        ``should_prune()``."""
        candidate = self.client.submit(spec, self.job_options(trial.study.study_name, trial.number))
        trial.set_user_attr(ATTR_CANDIDATE_ID, candidate.id)
        return candidate

    def check(self, trial: optuna.Trial, spec: SpecLike) -> ConditioningReport | None:
        """Condition the spec, record the report in the trial, and raise
        ``optuna.TrialPruned`` if it should be pruned; returns the report (with
        ``scales``), or None when conditioning failed and ``on_failure="keep"``."""
        candidate = self.client.condition(spec, self.job_options(trial.study.study_name, trial.number), self.timeout)
        keep = self.record(trial, candidate)
        if self.prune and not keep:
            raise optuna.TrialPruned(self._prune_message(candidate))
        return candidate.report

    def __call__(self, trial: optuna.Trial, spec: SpecLike) -> ConditioningReport | None:
        return self.check(trial, spec)

    def record(self, trial: optuna.Trial, candidate: Candidate) -> bool:
        """Write the candidate's report into the trial; returns whether to keep it."""
        trial.set_user_attr(ATTR_CANDIDATE_ID, candidate.id)
        if candidate.status != "done" or candidate.report is None:
            if self.on_failure == "raise":
                candidate.require_report()  # raises CandidateFailed with the reason
            trial.set_user_attr(ATTR_VERDICT, f"failed:{self.on_failure}")
            return self.on_failure == "keep"
        report = candidate.report
        trial.set_user_attr(ATTR_SCORE, report.score)
        trial.set_user_attr(ATTR_VERDICT, report.verdict)
        trial.set_user_attr(ATTR_REASONS, report.reasons[:10])
        if self.constraint:
            self._set_margin(trial, conditioning_margin(report, self.threshold))
        return keeps(report, self.threshold)

    def prescreen(
        self,
        study: optuna.Study,
        space: Callable[[optuna.Trial], dict[str, Any]],
        n_trials: int,
    ) -> list[Screened]:
        """Ask ``n_trials`` trials, submit all their specs in one request (the worker pool
        takes them in parallel), tell the pruned ones, return the kept ones to train.

        Each kept :class:`Screened` must be told by the caller:
        ``study.tell(s.trial, value)`` after training.
        """
        if n_trials < 1:
            raise ValueError(f"n_trials must be at least 1, but got {n_trials=}.")
        trials = [study.ask() for _ in range(n_trials)]
        specs = [spec_payload(space(trial)) for trial in trials]
        candidates = self.client.condition_many(specs, self.job_options(study.study_name), self.timeout)
        kept, failure = [], None
        for trial, spec, candidate in zip(trials, specs, candidates, strict=True):
            try:
                keep = self.record(trial, candidate)
            except CandidateFailed as exc:  # tell every trial before raising the first failure
                failure = failure or exc
                study.tell(trial, state=TrialState.FAIL)
                continue
            if keep or not self.prune:
                kept.append(Screened(trial, spec, candidate))
            else:
                study.tell(trial, state=TrialState.PRUNED)
        if failure is not None:
            for screened in kept:
                study.tell(screened.trial, state=TrialState.FAIL)
            raise failure
        return kept

    def _set_margin(self, trial: optuna.Trial, margin: float) -> None:
        set_constraint = getattr(trial, "set_constraint", None)
        if set_constraint is None:  # Optuna < 5: the user attributes carry the score
            return
        if CONSTRAINT_KEY in trial.constraints:
            return  # Optuna keeps the first value and warns on a second
        set_constraint(CONSTRAINT_KEY, margin)

    def _prune_message(self, candidate: Candidate) -> str:
        reasons = "; ".join(candidate.report.reasons[:3] if candidate.report is not None else [])
        return (
            f"pruned before training by conditioning: candidate {candidate.id}, "
            f"score {candidate.score}, verdict {candidate.verdict}" + (f" ({reasons})" if reasons else "")
        )


def earlier_scores(trials: Sequence[optuna.trial.FrozenTrial], exclude_number: int) -> list[float]:
    """The recorded conditioning scores of other trials (NaN and missing left out)."""
    out = []
    for trial in trials:
        if trial.number == exclude_number:
            continue
        score = float_or_nan(trial.user_attrs.get(ATTR_SCORE))
        if not math.isnan(score):
            out.append(score)
    return out

"""Prune at the first check by conditioning, then by a wrapped pruner during training."""

from __future__ import annotations

import inspect
import math
from typing import TYPE_CHECKING

import numpy as np
import optuna
from optuna.pruners import BasePruner

from nas._numbers import is_integral, is_real
from nas.decision import decision_margin, keeps_figures
from nas.errors import WaitTimeout
from nas.gate import (
    ATTR_CANDIDATE_ID,
    ATTR_REASONS,
    ATTR_SCORE,
    ATTR_VERDICT,
    CONSTRAINT_SYSTEM_ATTR,
    OnFailure,
    earlier_scores,
    not_conditioned,
)
from nas.report import float_or_nan

if TYPE_CHECKING:
    from nas.client import PreflightClient

__all__ = ["ConditioningPruner"]

# the trial's decision, kept in the storage as SuccessiveHalvingPruner keeps its rungs: taken once per
# trial, and never confused with another study's trial of the same name and number. Stored with the
# trial's number: a retry (Optuna's RetryFailedTrialCallback, RetryHeartbeatStaleTrialCallback) copies
# the failed trial's system attributes, and its own report must decide it afresh.
_DECIDED = "preflight_pruned_by_conditioning"


def _own_decision(trial: optuna.trial.FrozenTrial) -> bool | None:
    """The decision this trial took at its first check; None before it, or when the one stored is a
    failed trial's, copied into its retry."""
    stored = trial.system_attrs.get(_DECIDED)
    if isinstance(stored, bool):  # as earlier versions stored it: taken as the trial's own
        return stored
    if isinstance(stored, list) and len(stored) == 2 and stored[0] == trial.number:
        return bool(stored[1])
    return None


class ConditioningPruner(BasePruner):
    """Pruner that prunes ill-conditioned candidates at the first ``should_prune()``.

    The conditioning report of a trial is read from its user attributes, where
    :meth:`nas.gate.ConditioningGate.check` (with ``prune=False``) records it; a trial that
    has only a candidate id (:meth:`~nas.gate.ConditioningGate.submit`) is waited for
    through ``client``, and the score and verdict it waited for are then recorded in the trial, as
    the gate records them (so the percentile rule counts them). The decision is taken once per
    trial, at its first check, and kept in the trial's system attributes:

    - ``threshold``: prune when ``score < threshold``;
    - ``percentile``: as :class:`optuna.pruners.PercentilePruner`, keep the top
      ``percentile`` percent: prune when the score is below the ``100 - percentile``
      percentile of the scores recorded by the study's other trials (higher scores are
      better). Until ``n_startup_trials`` other scores exist, the verdict decides;
    - neither: the report's verdict (``"prune"``) decides.

    A trial kept by conditioning (or never conditioned) is judged at every check by the
    ``wrapped`` pruner, e.g. :class:`optuna.pruners.MedianPruner` on the reported
    validation accuracy.

    NaN policy: a trial whose score is NaN, infinite-negative or missing from a report is
    pruned (the engine could not measure it); NaN scores of other trials are left out of
    the percentile, as :class:`optuna.pruners.PercentilePruner` leaves out NaN values.

    Works with ``study.optimize(n_jobs > 1)`` (each trial's decision is its own, kept in the storage), with
    ask-and-tell, and with several processes sharing an RDB storage (the scores of other
    trials are read from the storage).

    Example::

        study = optuna.create_study(
            direction="maximize",
            pruner=ConditioningPruner(percentile=75.0, wrapped=optuna.pruners.MedianPruner()),
        )
        gate = ConditioningGate(client, prune=False)

        def objective(trial):
            spec = space(trial)
            report = gate.check(trial, spec)   # records the score; does not prune
            if trial.should_prune():            # conditioning decides here
                raise optuna.TrialPruned()
            model = report.build_model(spec)  # the tuned init: scales, seed, draw, bias shifts
            for epoch in range(epochs):
                trial.report(train_one_epoch(model), epoch)
                if trial.should_prune():        # the wrapped pruner decides here
                    raise optuna.TrialPruned()
            ...

    Args:
        threshold: absolute score below which a trial is pruned.
        percentile: keep the top ``percentile`` percent of scores, in [0, 100].
        wrapped: pruner for the checks after the first, or None for no later pruning.
        n_startup_trials: other scored trials needed before the percentile rule applies.
        client: to wait for a trial that has only a candidate id.
        timeout: seconds to wait for such a report.
        on_failure: such a trial's candidate that the service could not condition (its job failed
            or was cancelled) or that was not done within ``timeout``: ``"prune"`` it, ``"keep"``
            it for the wrapped pruner, or ``"raise"`` (``CandidateFailed`` or ``WaitTimeout`` out
            of ``should_prune()``); recorded as the gate's ``check`` records it
            (``failed:prune`` or ``failed:keep``, with the reason).
    """

    def __init__(
        self,
        threshold: float | None = None,
        percentile: float | None = None,
        wrapped: BasePruner | None = None,
        *,
        n_startup_trials: int = 5,
        client: PreflightClient | None = None,
        timeout: float | None = 600.0,
        on_failure: OnFailure = "prune",
    ) -> None:
        if threshold is not None and percentile is not None:
            raise ValueError(f"Give threshold or percentile, not both, but got {threshold=} and {percentile=}.")
        if threshold is not None and not (is_real(threshold) and math.isfinite(threshold)):
            raise ValueError(f"threshold must be a finite number, but got {threshold=}.")
        if percentile is not None and not (is_real(percentile) and 0.0 <= percentile <= 100.0):
            raise ValueError(f"percentile must be a number between 0 and 100 inclusive, but got {percentile=}.")
        if not (is_integral(n_startup_trials) and n_startup_trials >= 0):
            raise ValueError(f"n_startup_trials must be an integer >= 0, but got {n_startup_trials=}.")
        if client is not None and not hasattr(client, "wait"):
            raise TypeError(f"client must be a nas.client.PreflightClient or None, but got {client!r}.")
        if client is not None and inspect.iscoroutinefunction(client.wait):  # Optuna calls prune() synchronously
            raise TypeError(
                "client must be a nas.client.PreflightClient; an AsyncPreflightClient cannot serve a pruner"
            )
        if wrapped is not None and not isinstance(wrapped, BasePruner):
            raise TypeError(f"wrapped must be an optuna.pruners.BasePruner or None, but got {wrapped=}.")
        if timeout is not None and not (is_real(timeout) and timeout > 0):
            raise ValueError(f"timeout must be positive seconds or None, but got {timeout=}.")
        if on_failure not in ("raise", "prune", "keep"):
            raise ValueError(f'on_failure must be "raise", "prune" or "keep", but got {on_failure=}.')
        self._on_failure: OnFailure = on_failure
        self._threshold: float | None = threshold
        self._percentile: float | None = percentile
        self._wrapped: BasePruner | None = wrapped
        self._n_startup_trials: int = int(n_startup_trials)
        self._client: PreflightClient | None = client
        self._timeout: float | None = timeout

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        decided = _own_decision(trial)
        if decided is None:
            decided, margin = self._prunes_by_conditioning(study, trial)
            storage = study._storage
            storage.set_trial_system_attr(trial._trial_id, _DECIDED, [trial.number, decided])
            if CONSTRAINT_SYSTEM_ATTR in trial.system_attrs:  # the gate recorded one: the rule that decided sets it
                storage.set_trial_system_attr(trial._trial_id, CONSTRAINT_SYSTEM_ATTR, margin)
        if decided:
            return True
        if self._wrapped is None:
            return False
        return self._wrapped.prune(study, trial)

    def _prunes_by_conditioning(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> tuple[bool, float]:
        """Whether conditioning prunes the trial, and the decision's margin as a constraint value."""
        attrs = trial.user_attrs
        if ATTR_VERDICT not in attrs and ATTR_SCORE not in attrs:
            if ATTR_CANDIDATE_ID not in attrs:
                return False, 0.0  # not gated: nothing to judge by conditioning
            if self._client is None:  # every submitted trial would be kept without a word
                raise ValueError(
                    f"trial {trial.number} was only submitted (ConditioningGate.submit), so its report must be waited "
                    "for: give the pruner a client, ConditioningPruner(client=PreflightClient(...))"
                )
            try:
                candidate = self._client.wait(str(attrs[ATTR_CANDIDATE_ID]), self._timeout)
            except WaitTimeout as exc:  # it escaped should_prune() and stopped study.optimize
                if self._on_failure == "raise" or exc.candidate is None:
                    raise
                candidate = exc.candidate
            report = candidate.report
            if candidate.status != "done" or report is None:  # as the gate's check records a failure
                if self._on_failure == "raise":
                    candidate.require_report()  # raises CandidateFailed with the reason
                study._storage.set_trial_user_attr(trial._trial_id, ATTR_VERDICT, f"failed:{self._on_failure}")
                study._storage.set_trial_user_attr(trial._trial_id, ATTR_REASONS, [not_conditioned(candidate)])
                return (True, 1.0) if self._on_failure == "prune" else (False, 0.0)  # as the gate's margins
            verdict: str | None = report.verdict
            score = float_or_nan(report.score)
            for key, value in ((ATTR_SCORE, None if math.isnan(score) else score), (ATTR_VERDICT, verdict)):
                study._storage.set_trial_user_attr(trial._trial_id, key, value)  # as the gate records them
        else:
            verdict, score = attrs.get(ATTR_VERDICT), float_or_nan(attrs.get(ATTR_SCORE))
        if verdict == "failed:keep":
            return False, 0.0  # the gate chose to train candidates it could not condition
        if isinstance(verdict, str) and verdict.startswith("failed:"):
            return True, 1.0
        cut = self._threshold
        if self._percentile is not None and not (math.isnan(score) or score == -math.inf):
            others = earlier_scores(study.get_trials(deepcopy=False), exclude_number=trial.number)
            if len(others) >= max(1, self._n_startup_trials):
                cut = float(np.percentile(np.asarray(others, dtype=np.float64), 100.0 - self._percentile))
            else:
                cut = None  # the verdict decides until the percentile has its startup trials
        prunes = not keeps_figures(score, verdict, cut)
        return prunes, decision_margin(prunes, None if math.isnan(score) else score, cut)

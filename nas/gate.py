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

The verdict skips candidates that cannot train. With ``rank_after=N`` the gate also skips ones
that would train but are predicted to do worse than most of what the search has trained: once N
trials have completed, it fits :class:`nas.ranking.Ranker` on their recorded features
(``preflight_features``: the report's score and components, its expressivity terms when
``options.expressivity`` is on, and the size) and objective values, and prunes a candidate
predicted below the ``rank_below`` quantile of theirs (recorded as ``preflight_rank``). Where
trainability is most of what separates the candidates, the fit on a few dozen trials ranks below
the score alone: leave it off there (docs/conditioning.md, section 10).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import optuna
from optuna.trial import TrialState

from nas._numbers import is_integral, is_real
from nas.build import PreflightNet, build_model
from nas.client import Candidate, PreflightClient, SpecLike, Unfinished, options_payload, spec_payload
from nas.decision import conditioning_margin, keeps, report_threshold
from nas.errors import CandidateFailed, SpecRejectedError, WaitTimeout
from nas.ranking import RankDecision, rank_among_trained, ranking_features
from nas.report import ConditioningReport, float_or_nan
from nas.spec import STUDY_NAME_LENGTH, storable_text
from nas.summary import summarize

__all__ = [
    "ATTR_CANDIDATE_ID",
    "ATTR_FEATURES",
    "ATTR_RANK",
    "ATTR_REASONS",
    "ATTR_SCORE",
    "ATTR_VERDICT",
    "not_conditioned",
    "CONSTRAINT_KEY",
    "CONSTRAINT_SYSTEM_ATTR",
    "ConditioningGate",
    "RankingStalled",
    "Screened",
    "SpecRefused",
    "conditioning_margin",
    "earlier_scores",
    "report_threshold",
    "service_study_name",
]

ATTR_CANDIDATE_ID = "preflight_candidate_id"
ATTR_SCORE = "preflight_score"
ATTR_VERDICT = "preflight_verdict"
ATTR_REASONS = "preflight_reasons"
ATTR_FEATURES = "preflight_features"  # what nas.ranking reads: score, components, expressivity, size
ATTR_RANK = "preflight_rank"  # the prediction's quantile among the completed trials' (rank_after)
CONSTRAINT_KEY = "preflight_conditioning"
# where Optuna keeps that constraint among a trial's system attributes (trial.set_constraint writes it
# once; the gate and the pruner overwrite it through the storage)
CONSTRAINT_SYSTEM_ATTR = f"constraints:{CONSTRAINT_KEY}"

OnFailure = Literal["raise", "prune", "keep"]
# RankingStalled: at least this many candidates in a row ranked below the cut with no trial completing, and
# at least as many as the trials trained (on NAS-Bench-201's replay a healthy rank gate skips up to 0.65 times
# its trained count in a row, 51 at most: docs/optuna.md)
_STALLED = 10


class RankingStalled(UserWarning):
    """``rank_after`` has ranked many candidates in a row below the cut while no trial completed."""


class SpecRefused(UserWarning):
    """A prescreen's space gave a spec the service refused; that trial failed, the rest went on."""


@dataclass(frozen=True)
class Screened:
    """A trial that passed pre-screening: train it, then ``study.tell(trial, value)``."""

    trial: optuna.Trial
    spec: dict[str, Any]
    candidate: Candidate

    @property
    def conditioned(self) -> bool:
        """Whether the candidate has a report; False for one kept without it (``on_failure="keep"``)."""
        return self.candidate.report is not None

    @property
    def report(self) -> ConditioningReport:
        """The conditioning report; raises :class:`~nas.errors.CandidateFailed` when there is none."""
        return self.candidate.require_report()

    @property
    def scales(self) -> dict[str, float]:
        """What ``nas.build_model(spec, scales=...)`` takes: the tuned multipliers ({} unconditioned)."""
        return dict(self.report.scales) if self.conditioned else {}

    @property
    def recommended_lr(self) -> float | None:
        """The rate to train the survivor at with SGD and momentum (the report's ``recommended_lr``:
        one probe step below the probe's best rate); None when the probe did not run or there is
        no report."""
        return self.report.recommended_lr if self.conditioned else None

    def build_model(self) -> PreflightNet:
        """The survivor at its tuned initialization: the spec's weights at the seed and draw the
        conditioning used, multiplied by the tuned scales, with the report's bias shifts. Without
        a report (kept by ``on_failure="keep"``): the spec's plain initialization."""
        if not self.conditioned:
            return build_model(self.spec)
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
        on_failure: when the service cannot condition a candidate (its job failed or was
            cancelled, or it was not done within ``timeout``): ``"raise"``
            (:class:`~nas.errors.CandidateFailed`, or :class:`~nas.errors.WaitTimeout`),
            ``"prune"`` or ``"keep"`` (train it from its plain initialization). A candidate that
            timed out stays queued: a later submission of the same spec shares its report.
        rank_after: once this many trials have completed, also prune a kept candidate whose
            predicted objective (:func:`nas.ranking.rank_among_trained`, fitted on them) falls
            below the ``rank_below`` quantile of theirs; None (the default): never. Needs a
            single-objective study; at least 3. With ``prune=False`` the quantile is recorded
            (``preflight_rank``) and nothing is pruned by it. Only the kept candidates complete,
            so the trained ones' median rises as the search goes on, and with it what is skipped.
        rank_below: that quantile, in (0, 1).
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
        rank_after: int | None = None,
        rank_below: float = 0.5,
    ) -> None:
        for name, flag in (("prune", prune), ("constraint", constraint)):
            if not isinstance(flag, bool):  # prune="no" is truthy: it would prune
                raise TypeError(f"{name} must be True or False, but got {name}={flag!r}.")
        if client is not None and not hasattr(client, "condition"):
            raise TypeError(f"client must be a nas.client.PreflightClient, but got {client!r}; the URL goes to it")
        if client is not None and inspect.iscoroutinefunction(client.condition):  # its calls would never be awaited
            raise TypeError(
                "client must be a nas.client.PreflightClient; an AsyncPreflightClient cannot serve Optuna's "
                "synchronous objective"
            )
        if timeout is not None and not (is_real(timeout) and timeout > 0):
            raise ValueError(f"timeout must be positive seconds or None, but got {timeout=}.")
        if threshold is not None and not (is_real(threshold) and math.isfinite(threshold)):
            raise ValueError(f"threshold must be a finite number or None, but got {threshold=}.")
        if on_failure not in ("raise", "prune", "keep"):
            raise ValueError(f'on_failure must be "raise", "prune" or "keep", but got {on_failure=}.')
        if rank_after is not None and not (is_integral(rank_after) and rank_after >= 3):
            raise ValueError(f"rank_after must be an integer of at least 3 or None, but got {rank_after=}.")
        if not (is_real(rank_below) and 0.0 < rank_below < 1.0):
            raise ValueError(f"rank_below must be a quantile in (0, 1), but got {rank_below=}.")
        self.client = client if client is not None else PreflightClient()
        self.options = options_payload(options)  # a mapping of JSON values, refused here otherwise
        self.timeout = timeout
        self.threshold = threshold
        self.prune = prune
        self.constraint = constraint
        self.on_failure = on_failure
        self.rank_after = None if rank_after is None else int(rank_after)
        self.rank_below = rank_below
        # per study: (trained trials the ranker saw, candidates it ranked below since that count)
        self._below_streak: dict[str, tuple[int, int]] = {}

    def job_options(self, study_name: str | None, trial_number: int | None = None) -> dict[str, Any]:
        """The options sent with a spec: the gate's, with the study (as :func:`service_study_name`
        writes it) and the trial filled in."""
        out = dict(self.options)
        if study_name is not None:
            out.setdefault("study", service_study_name(study_name))
        if trial_number is not None:
            out.setdefault("trial", trial_number)
        return out

    def submit(self, trial: optuna.Trial, spec: SpecLike) -> Candidate:
        """Queue the spec and record its candidate id, without waiting: a
        :class:`~nas.pruners.ConditioningPruner` given a client waits for it at the first
        ``should_prune()``."""
        candidate = self.client.submit(spec, self.job_options(_study_name(trial), trial.number))
        trial.set_user_attr(ATTR_CANDIDATE_ID, candidate.id)
        return candidate

    def check(self, trial: optuna.Trial, spec: SpecLike) -> ConditioningReport | None:
        """Condition the spec, record the report in the trial, and raise
        ``optuna.TrialPruned`` if it should be pruned; returns the report (with
        ``scales``), or None when conditioning failed (or timed out) and the trial is not
        pruned for it (``on_failure="keep"``, or ``prune=False``)."""
        study = getattr(trial, "study", None)  # an optuna.trial.FixedTrial has none
        if study is not None:
            self._check_rank_study(study)
        options = self.job_options(None if study is None else study.study_name, trial.number)
        try:
            candidate = self.client.condition(spec, options, self.timeout)
        except WaitTimeout as exc:  # not conditioned in time: a failure, as on_failure says
            if self.on_failure == "raise" or exc.candidate is None:
                raise
            candidate = exc.candidate
        keep = self.record(trial, candidate, spec)
        if self.prune and not keep:
            raise optuna.TrialPruned(self._prune_message(candidate))
        ranked = self.rank(trial) if keep else None  # recorded with prune=False too
        if self.prune and ranked is not None and not ranked.keep:
            raise optuna.TrialPruned(self._rank_message(candidate, ranked))
        return candidate.report

    def __call__(self, trial: optuna.Trial, spec: SpecLike) -> ConditioningReport | None:
        return self.check(trial, spec)

    def record(self, trial: optuna.Trial, candidate: Candidate, spec: SpecLike | None = None) -> bool:
        """Write the candidate's report into the trial (with ``spec``, the size among its ranking
        features); returns whether the verdict keeps it."""
        trial.set_user_attr(ATTR_CANDIDATE_ID, candidate.id)
        if candidate.status != "done" or candidate.report is None:
            if self.on_failure == "raise":
                candidate.require_report()  # raises CandidateFailed with the reason
            trial.set_user_attr(ATTR_VERDICT, f"failed:{self.on_failure}")
            trial.set_user_attr(ATTR_REASONS, [not_conditioned(candidate)])
            if self.constraint:  # every trial the same constraints: GPSampler refuses a study otherwise
                self._set_margin(trial, 1.0 if self.prune and self.on_failure == "prune" else 0.0)
            return self.on_failure == "keep"
        report = candidate.report
        trial.set_user_attr(ATTR_SCORE, report.score)
        trial.set_user_attr(ATTR_VERDICT, report.verdict)
        trial.set_user_attr(ATTR_REASONS, report.reasons[:10])
        trial.set_user_attr(ATTR_FEATURES, ranking_features(report, _parameters(spec)))
        if self.constraint:  # recording only, the gate decides nothing: the pruner's rule sets the margin
            self._set_margin(trial, conditioning_margin(report, self.threshold) if self.prune else 0.0)
        return keeps(report, self.threshold)

    def prescreen(
        self,
        study: optuna.Study,
        space: Callable[[optuna.Trial], dict[str, Any]],
        n_trials: int,
    ) -> list[Screened]:
        """Ask ``n_trials`` trials, submit all their specs in one request (the worker pool
        takes them in parallel), tell the pruned ones, return the kept ones to train.

        A spec the service refuses (an invalid architecture the space can propose) fails its own
        trial, with the refusal in its ``preflight_reasons`` and a :class:`SpecRefused` warning,
        and the rest are conditioned; when it refuses every spec, or the request itself, the
        refusal is raised after every asked trial is told failed.

        Each kept :class:`Screened` must be told by the caller:
        ``study.tell(s.trial, value)`` after training.
        """
        if not (is_integral(n_trials) and n_trials >= 1):
            raise ValueError(f"n_trials must be an integer of at least 1, but got {n_trials=}.")
        self._check_rank_study(study)
        trials = [study.ask() for _ in range(int(n_trials))]
        try:
            specs = [spec_payload(space(trial)) for trial in trials]
            trials, specs, candidates = self._condition_accepted(study, trials, specs)
        except BaseException:  # the space, the connection or a refusal: no asked trial is left running
            for trial in trials:
                study.tell(trial, state=TrialState.FAIL)
            raise
        kept, failure = [], None
        for trial, spec, candidate in zip(trials, specs, candidates, strict=True):
            try:
                keep = self.record(trial, candidate, spec)
                ranked = self.rank(trial) if keep else None  # recorded with prune=False too
                if ranked is not None and self.prune:
                    keep = ranked.keep
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

    def _condition_accepted(
        self, study: optuna.Study, trials: list[optuna.Trial], specs: list[dict[str, Any]]
    ) -> tuple[list[optuna.Trial], list[dict[str, Any]], list[Candidate]]:
        """Condition the specs the service accepts: a refusal that names specs of the batch (the
        service validates all or nothing and names every spec at fault, before queueing any) fails
        their trials, removed from ``trials`` and ``specs`` in place, and the rest are sent again.
        Returns the accepted trials, their specs and their candidates; raises the refusal when it
        names every spec left, or anything that is not a spec (the options, the request)."""
        unfinished: Unfinished = "raise" if self.on_failure == "raise" else "return"  # a failure, as on_failure says
        while True:
            try:
                candidates = self.client.condition_many(
                    specs, self.job_options(study.study_name), self.timeout, unfinished=unfinished
                )
                return trials, specs, candidates
            except SpecRejectedError as exc:
                refused = _refused_specs(exc, len(specs))
                if refused is None:
                    raise
                for index in refused:
                    trials[index].set_user_attr(ATTR_VERDICT, "refused")
                    trials[index].set_user_attr(ATTR_REASONS, _refusal_reasons(exc, index))
                if len(refused) == len(specs):
                    raise  # the caller tells them failed
                dropped = [trials[index] for index in refused]
                for index in reversed(refused):  # from the end: the indices before stay valid
                    del trials[index], specs[index]
                for trial in dropped:
                    study.tell(trial, state=TrialState.FAIL)
                    reasons = trial.user_attrs[ATTR_REASONS]
                    warnings.warn(
                        f"trial {trial.number}: the service refused its spec ({'; '.join(reasons)}); "
                        f"the trial failed and the other {len(specs)} were sent again",
                        SpecRefused,
                        stacklevel=3,  # the caller of prescreen
                    )

    def rank(self, trial: optuna.Trial) -> RankDecision | None:
        """Where the trial's recorded features rank among the completed trials' (recorded as
        ``preflight_rank``); None when ranking is off, the trial has no features, or fewer than
        ``rank_after`` trials have completed with theirs."""
        mine = trial.user_attrs.get(ATTR_FEATURES)
        if self.rank_after is None or mine is None or getattr(trial, "study", None) is None:
            return None
        trained = [
            t
            for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if ATTR_FEATURES in t.user_attrs and t.value is not None and math.isfinite(t.value)
        ]
        if len(trained) < self.rank_after:
            return None
        decision = rank_among_trained(
            [t.user_attrs[ATTR_FEATURES] for t in trained],
            [float(t.value) for t in trained if t.value is not None],
            mine,
            below=self.rank_below,
            higher_is_better=trial.study.direction == optuna.study.StudyDirection.MAXIMIZE,
        )
        trial.set_user_attr(ATTR_RANK, decision.quantile)
        self._watch_streak(trial.study.study_name, len(trained), decision.keep)
        return decision

    def _watch_streak(self, study_name: str, trained: int, keep: bool) -> None:
        """Warn when the ranking has put more candidates in a row below the cut than the search has
        trained (and at least ``_STALLED``) while no trial completed: only kept candidates complete,
        so the fit cannot change, and a search whose trained trials all rank high can skip every
        later candidate. Shorter runs are the rising median at work, not a stall."""
        if keep:
            self._below_streak.pop(study_name, None)
            return
        seen, streak = self._below_streak.get(study_name, (trained, 0))
        streak = streak + 1 if seen == trained else 1
        self._below_streak[study_name] = (trained, streak)
        if streak == max(_STALLED, trained):
            warnings.warn(
                f"rank_after: the last {streak} candidates of study {study_name!r} ranked below rank_below "
                f"{self.rank_below} among the same {trained} trained trials, and none completed since, so the "
                "ranking cannot change; lower rank_below, raise rank_after, or record only (prune=False)",
                RankingStalled,
                stacklevel=3,
            )

    def _check_rank_study(self, study: optuna.Study) -> None:
        if self.rank_after is not None and len(study.directions) != 1:
            raise ValueError(
                f"rank_after ranks by one objective, but study {study.study_name!r} has {len(study.directions)}."
            )

    def _rank_message(self, candidate: Candidate, ranked: RankDecision) -> str:
        return (
            f"pruned before training by rank: candidate {candidate.id} is predicted to do better than "
            f"{ranked.quantile:.2f} of the completed trials, below rank_below {self.rank_below} "
            f"(fitted on them: {ranked.ranker.describe()})"
        )

    def _set_margin(self, trial: optuna.Trial, margin: float) -> None:
        set_constraint = getattr(trial, "set_constraint", None)
        if set_constraint is None:  # Optuna < 5: the user attributes carry the score
            return
        if CONSTRAINT_KEY not in trial.constraints:
            set_constraint(CONSTRAINT_KEY, margin)
            return
        # Optuna keeps the first value and warns on a second; the one there is a failed trial's, copied
        # into its retry (RetryFailedTrialCallback), or an earlier check's of this trial: this report's wins
        storage = getattr(trial, "storage", None)
        if storage is not None:
            storage.set_trial_system_attr(trial._trial_id, CONSTRAINT_SYSTEM_ATTR, margin)

    def _prune_message(self, candidate: Candidate) -> str:
        if candidate.report is None:
            return f"pruned before training (on_failure='prune'): {not_conditioned(candidate)}"
        reasons = "; ".join(candidate.report.reasons[:3])
        return (
            f"pruned before training by conditioning: candidate {candidate.id}, "
            f"score {candidate.score}, verdict {candidate.verdict}" + (f" ({reasons})" if reasons else "")
        )


def service_study_name(name: str) -> str:
    """An Optuna study's name as the service stores it: the name itself when the service can store
    it, else its storable part (at most 480 characters, NUL dropped, a lone surrogate as "?") and
    "~" and 16 hex digits of its SHA-256, one label for one study. Optuna's in-memory, journal and
    SQLite storages take an empty name, a longer one than the service's 512 characters (Optuna's
    own RDB limit, which SQLite does not enforce) or one holding NUL, and a gate on such a study
    failed every trial with the service's 422."""
    try:
        if 0 < len(name) <= STUDY_NAME_LENGTH and storable_text(name):
            return name
    except ValueError:  # NUL or a lone surrogate
        pass
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    readable = name.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")[:480]
    return f"{readable}~{digest}"


def _study_name(trial: optuna.Trial) -> str | None:
    """The trial's study's name; None for a trial of no study (an ``optuna.trial.FixedTrial``,
    which runs an objective once with fixed parameters)."""
    study = getattr(trial, "study", None)
    return None if study is None else study.study_name


_SPEC_IN_BATCH = re.compile(r"specs\[(\d+)\](?=$|[.\[ ])")


def _refused_specs(refusal: SpecRejectedError, batch: int) -> list[int] | None:
    """The indices of the specs a batch's refusal names, in order (every issue's path starts
    ``specs[i]``: the service lists each refused spec); None when an issue names the request or
    the options, or a spec the batch does not hold."""
    issues = refusal.problem.get("errors")
    if not isinstance(issues, list) or not issues:
        return None
    indices = [i for i in map(_spec_index, issues) if i is not None]
    if len(indices) < len(issues) or max(indices) >= batch:
        return None
    return sorted(set(indices))


def _spec_index(issue: Any) -> int | None:
    """The batch index of the spec an issue's path names (``specs[3].blocks``: 3), else None."""
    match = _SPEC_IN_BATCH.match(str(issue.get("path", ""))) if isinstance(issue, Mapping) else None
    return int(match.group(1)) if match is not None else None


def _refusal_reasons(refusal: SpecRejectedError, index: int) -> list[str]:
    """The refusal's issues as the trial's reasons, each path relative to the trial's own spec."""
    prefix = f"specs[{index}]"
    reasons = []
    mine = [issue for issue in refusal.problem.get("errors", []) if _spec_index(issue) == index]
    for issue in mine[:10]:
        path = str(issue.get("path", "")).removeprefix(prefix).lstrip(".")
        reasons.append(f"spec{'.' + path if path and path[0] not in '[ ' else path}: {issue.get('message', '')}")
    return reasons


def not_conditioned(candidate: Candidate) -> str:
    """Why a candidate has no report, for its trial's reasons."""
    why = f": {candidate.error}" if candidate.error else ""
    return f"candidate {candidate.id} was not conditioned (its job is {candidate.status}{why})"


def _parameters(spec: SpecLike | None) -> int | None:
    """The spec's parameter count for the ranking's size feature; None where this client cannot
    read the spec (the service conditioned it, so a newer format is no reason to fail the trial)."""
    if spec is None:
        return None
    try:
        return summarize(spec_payload(spec)).parameters
    except ValueError:  # pydantic's ValidationError and the spec's own errors
        return None


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

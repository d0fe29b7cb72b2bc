"""ConditioningPruner in real Optuna studies, with the scores a gate records (the full
path through the service is in tests/nas/test_end_to_end.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from nas.client import PreflightClient
from nas.gate import ATTR_CANDIDATE_ID, ATTR_SCORE, ATTR_VERDICT
from nas.pruners import ConditioningPruner

optuna.logging.set_verbosity(optuna.logging.WARNING)


def gated_objective(scores: dict[int, Any], verdicts: dict[int, str] | None = None, epochs: int = 3):
    """An objective that records a score as the gate would, checks, then 'trains'."""

    def objective(trial: optuna.Trial) -> float:
        score = scores.get(trial.number)
        if score is not None or verdicts:
            trial.set_user_attr(ATTR_SCORE, None if score is None or math.isnan(score) else score)
            trial.set_user_attr(ATTR_VERDICT, (verdicts or {}).get(trial.number, "keep"))
        if trial.should_prune():
            trial.set_user_attr("pruned_at", "conditioning")
            raise optuna.TrialPruned()
        for epoch in range(epochs):
            trial.report(float(trial.number % 5), epoch)
            if trial.should_prune():
                trial.set_user_attr("pruned_at", f"epoch {epoch}")
                raise optuna.TrialPruned()
        return float(trial.number % 5)

    return objective


def pruned_by_conditioning(study: optuna.Study) -> list[int]:
    return sorted(t.number for t in study.trials if t.user_attrs.get("pruned_at") == "conditioning")


@pytest.mark.parametrize(
    ("pruner", "scores", "verdicts", "expected"),
    [
        # Verdict rule: the engine's verdict decides.
        (ConditioningPruner(), {0: 1.0, 1: -5.0, 2: 2.0}, {1: "prune"}, [1]),
        # Threshold rule: score < threshold, whatever the verdict.
        (ConditioningPruner(threshold=0.0), {0: 1.0, 1: -5.0, 2: -0.1, 3: 0.0}, {}, [1, 2]),
        # Percentile rule: keep the top 50 % of the other trials' scores once 3 exist.
        (ConditioningPruner(percentile=50.0, n_startup_trials=3), {0: 1.0, 1: 2.0, 2: 3.0, 3: 1.5, 4: 2.9}, {}, [3]),
        # Before n_startup_trials the verdict decides.
        (ConditioningPruner(percentile=50.0, n_startup_trials=3), {0: 1.0, 1: 0.5}, {1: "prune"}, [1]),
        # NaN policy: a NaN score is pruned under every rule.
        (ConditioningPruner(threshold=-100.0), {0: 1.0, 1: math.nan}, {}, [1]),
        (ConditioningPruner(percentile=100.0, n_startup_trials=1), {0: 1.0, 1: math.nan, 2: 3.0}, {}, [1]),
    ],
)
def test_the_first_check_prunes_by_conditioning(
    pruner: ConditioningPruner, scores: dict, verdicts: dict, expected: list[int]
) -> None:
    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(gated_objective(scores, verdicts), n_trials=len(scores))
    assert pruned_by_conditioning(study) == expected
    assert all(study.trials[n].state == optuna.trial.TrialState.PRUNED for n in expected)


def test_nan_scores_of_other_trials_are_left_out_of_the_percentile() -> None:
    pruner = ConditioningPruner(percentile=50.0, n_startup_trials=2)
    # Others: 1.0, NaN, 3.0 -> median of {1, 3} is 2: 2.5 is kept, 1.5 pruned.
    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(gated_objective({0: 1.0, 1: math.nan, 2: 3.0, 3: 2.5, 4: 1.5}), n_trials=5)
    assert pruned_by_conditioning(study) == [1, 4]


def test_ungated_trials_are_left_to_the_wrapped_pruner() -> None:
    wrapped = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    study = optuna.create_study(direction="maximize", pruner=ConditioningPruner(wrapped=wrapped))
    study.optimize(gated_objective({}), n_trials=8)
    assert pruned_by_conditioning(study) == []
    epochs = [t.user_attrs.get("pruned_at") for t in study.trials]
    assert any(e and e.startswith("epoch") for e in epochs), "MedianPruner prunes during training"


def test_later_steps_are_delegated_to_the_wrapped_pruner_for_kept_trials() -> None:
    wrapped = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    scores = {n: (-1.0 if n == 6 else 1.0) for n in range(10)}
    study = optuna.create_study(direction="maximize", pruner=ConditioningPruner(threshold=0.0, wrapped=wrapped))
    study.optimize(gated_objective(scores), n_trials=10)
    assert pruned_by_conditioning(study) == [6]
    during = [t.number for t in study.trials if str(t.user_attrs.get("pruned_at")).startswith("epoch")]
    assert during, "the wrapped MedianPruner still prunes kept trials during training"


def test_the_decision_is_taken_once_per_trial() -> None:
    # Once kept, a trial stays kept even when later scores move the percentile above it.
    pruner = ConditioningPruner(percentile=50.0, n_startup_trials=1)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(gated_objective({0: 1.0, 1: 2.0}), n_trials=2)
    trial = study.ask()
    trial.set_user_attr(ATTR_SCORE, 1.6)
    trial.set_user_attr(ATTR_VERDICT, "keep")
    assert trial.should_prune() is False  # median of {1, 2} is 1.5
    study.tell(study.ask(), 0.0)
    for number, score in ((3, 9.0), (4, 9.5)):
        other = study.ask()
        other.set_user_attr(ATTR_SCORE, score)
        study.tell(other, 0.0)
        assert other.number == number + 1
    assert trial.should_prune() is False


def test_ask_and_tell() -> None:
    study = optuna.create_study(direction="maximize", pruner=ConditioningPruner(threshold=0.5))
    outcomes = []
    for score in (1.0, 0.1, 0.9, -3.0):
        trial = study.ask()
        trial.set_user_attr(ATTR_SCORE, score)
        trial.set_user_attr(ATTR_VERDICT, "keep")
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            outcomes.append("pruned")
        else:
            study.tell(trial, score)
            outcomes.append("kept")
    assert outcomes == ["kept", "pruned", "kept", "pruned"]


@pytest.mark.parametrize("storage_kind", ["inmemory", "rdb"])
def test_parallel_workers_share_the_pruner(storage_kind: str, tmp_path: Path) -> None:
    storage = None if storage_kind == "inmemory" else f"sqlite:///{tmp_path / 'optuna.db'}"
    scores = {n: (-1.0 if n % 3 == 0 else 1.0) for n in range(24)}
    study = optuna.create_study(direction="maximize", storage=storage, pruner=ConditioningPruner(threshold=0.0))
    study.optimize(gated_objective(scores), n_trials=24, n_jobs=4)
    assert pruned_by_conditioning(study) == [n for n in range(24) if n % 3 == 0]


def test_two_controllers_share_scores_through_rdb_storage(tmp_path: Path) -> None:
    # Two study objects on one RDB storage stand for two controller processes: the
    # percentile of the second uses the scores the first recorded.
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = optuna.create_study(
        study_name="shared",
        storage=storage,
        direction="maximize",
        pruner=ConditioningPruner(percentile=50.0, n_startup_trials=4),
    )
    first.optimize(gated_objective({n: float(n) for n in range(4)}), n_trials=4)
    second = optuna.load_study(
        study_name="shared", storage=storage, pruner=ConditioningPruner(percentile=50.0, n_startup_trials=4)
    )
    trial = second.ask()
    trial.set_user_attr(ATTR_SCORE, 1.0)  # median of 0..3 is 1.5
    assert trial.should_prune() is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0.0, "percentile": 50.0}, "not both"),
        ({"threshold": math.inf}, "threshold"),
        ({"percentile": 101.0}, "percentile"),
        ({"percentile": -1.0}, "percentile"),
        ({"n_startup_trials": -1}, "n_startup_trials"),
        ({"n_startup_trials": 2.5}, "n_startup_trials must be an integer"),
        ({"timeout": 0.0}, "timeout"),
        # each was a raw comparison TypeError, or passed as a number
        ({"threshold": "0.1"}, "threshold must be a finite number"),
        ({"threshold": True}, "threshold must be a finite number"),
        ({"percentile": "50"}, "percentile must be a number"),
        ({"timeout": "5"}, "timeout must be positive seconds"),
    ],
)
def test_bad_arguments_are_refused_and_quoted(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ConditioningPruner(**kwargs)


def test_numpy_numbers_are_arguments_like_python_ones() -> None:
    pruner = ConditioningPruner(percentile=np.float64(50.0), n_startup_trials=np.int64(3), timeout=np.float32(5))  # type: ignore[arg-type]
    assert pruner._n_startup_trials == 3


def test_an_async_client_is_refused_where_optuna_calls_synchronously() -> None:
    from nas.client import AsyncPreflightClient

    with pytest.raises(TypeError, match="AsyncPreflightClient cannot serve a pruner"):
        ConditioningPruner(client=AsyncPreflightClient("http://127.0.0.1:1"))  # type: ignore[arg-type]


def test_a_trial_only_submitted_needs_a_client_and_is_not_kept_without_a_word() -> None:
    """Without a client, every trial that the gate only submitted was kept, whatever its report."""
    study = optuna.create_study(direction="maximize", pruner=ConditioningPruner())
    trial = study.ask()
    trial.set_user_attr(ATTR_CANDIDATE_ID, "c" * 32)
    with pytest.raises(ValueError, match="give the pruner a client"):
        trial.should_prune()


def test_a_study_made_again_under_the_same_name_gets_its_own_decisions() -> None:
    """Decisions were cached by (study name, trial number): a second study "nas" reused the first's."""
    pruner = ConditioningPruner(threshold=0.0)
    outcomes = []
    for score in (-1.0, 1.0):
        study = optuna.create_study(study_name="nas", direction="maximize", pruner=pruner)
        trial = study.ask()
        trial.set_user_attr(ATTR_SCORE, score)
        trial.set_user_attr(ATTR_VERDICT, "keep")
        outcomes.append(trial.should_prune())
    assert outcomes == [True, False]


def test_a_url_where_the_client_belongs_is_refused() -> None:
    with pytest.raises(TypeError, match="client must be a nas.client.PreflightClient"):
        ConditioningPruner(client="http://localhost:8000")  # type: ignore[arg-type]


def test_wrapped_must_be_a_pruner() -> None:
    with pytest.raises(TypeError, match="wrapped"):
        ConditioningPruner(wrapped="median")  # type: ignore[arg-type]


CONTROLLER = """
import sys, optuna
from nas.gate import ATTR_SCORE, ATTR_VERDICT
from nas.pruners import ConditioningPruner
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name="shared", storage=sys.argv[1], pruner=ConditioningPruner(threshold=0.0))
def objective(trial):
    score = trial.suggest_float("score", -1.0, 1.0)
    trial.set_user_attr(ATTR_SCORE, score)
    trial.set_user_attr(ATTR_VERDICT, "keep")
    if trial.should_prune():
        raise optuna.TrialPruned()
    return score
study.optimize(objective, n_trials=6)
"""


@pytest.mark.slow  # a subprocess or a real worker loop: several seconds
def test_controller_processes_share_one_rdb_storage(tmp_path: Path) -> None:
    import subprocess
    import sys

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.create_study(study_name="shared", storage=storage, direction="maximize")
    processes = [subprocess.Popen([sys.executable, "-c", CONTROLLER, storage]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in processes] == [0, 0]
    study = optuna.load_study(study_name="shared", storage=storage)
    assert len(study.trials) == 12
    trial: optuna.trial.FrozenTrial | optuna.Trial
    for trial in study.trials:
        assert trial.state == (PRUNED_STATE if trial.params["score"] < 0 else optuna.trial.TrialState.COMPLETE)
    # A third controller's percentile rule sees every score the two recorded.
    third = optuna.load_study(
        study_name="shared", storage=storage, pruner=ConditioningPruner(percentile=50.0, n_startup_trials=12)
    )
    median = sorted(t.params["score"] for t in study.trials)
    trial = third.ask()
    trial.set_user_attr(ATTR_SCORE, (median[5] + median[6]) / 2 - 1e-9)
    assert trial.should_prune() is True


PRUNED_STATE = optuna.trial.TrialState.PRUNED


def _answering(candidate: dict[str, Any]) -> PreflightClient:
    """A client whose service answers every request with this candidate."""
    import httpx

    from nas.client import RetryPolicy

    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=candidate))
    return PreflightClient("http://preflight.test", transport=transport, retry=RetryPolicy(attempts=1))


NOT_CONDITIONED = [
    pytest.param({"id": "c1", "status": "failed", "error": "boom"}, id="failed"),
    pytest.param({"id": "c1", "status": "queued"}, id="not-done-in-time"),
]


@pytest.mark.parametrize("answer", NOT_CONDITIONED)
@pytest.mark.parametrize(("on_failure", "pruned"), [("prune", True), ("keep", False)])
def test_a_submitted_trial_not_conditioned_is_judged_and_recorded_as_on_failure_says(
    answer: dict[str, Any], on_failure: str, pruned: bool
) -> None:
    """It was pruned with verdict None and no reason whatever the gate's on_failure, and a
    candidate not done in time raised WaitTimeout out of should_prune(), stopping study.optimize."""
    from nas.gate import ATTR_REASONS

    pruner = ConditioningPruner(client=_answering(answer), timeout=0.01, on_failure=on_failure)  # type: ignore[arg-type]
    study = optuna.create_study(direction="maximize", pruner=pruner)
    trial = study.ask()
    trial.set_user_attr(ATTR_CANDIDATE_ID, "c1")
    assert trial.should_prune() is pruned
    attrs = study.trials[-1].user_attrs
    assert attrs[ATTR_VERDICT] == f"failed:{on_failure}"
    assert attrs[ATTR_REASONS][0].startswith(f"candidate c1 was not conditioned (its job is {answer['status']}")


@pytest.mark.parametrize("answer", NOT_CONDITIONED)
def test_a_submitted_trial_not_conditioned_raises_when_asked_to(answer: dict[str, Any]) -> None:
    from nas.errors import CandidateFailed, WaitTimeout

    pruner = ConditioningPruner(client=_answering(answer), timeout=0.01, on_failure="raise")
    study = optuna.create_study(direction="maximize", pruner=pruner)
    trial = study.ask()
    trial.set_user_attr(ATTR_CANDIDATE_ID, "c1")
    with pytest.raises(CandidateFailed if answer["status"] == "failed" else WaitTimeout):
        trial.should_prune()


def _gate_answering(verdict: str, score: float, **gate: Any) -> Any:
    """A recording gate whose service answers every spec with one done candidate of this report."""
    from nas.gate import ConditioningGate
    from nas.testing import sample_report

    report = sample_report(score=score, verdict=verdict, prune_below=-0.5).model_dump(mode="json")
    client = _answering({"id": "c1", "status": "done", "score": score, "verdict": verdict, "report": report})
    return ConditioningGate(client, prune=False, **gate)


def _record_then_train(gate: Any) -> Any:
    from nas.testing import well_conditioned_mlp

    def objective(trial: optuna.Trial) -> float:
        trial.suggest_int("x", 0, 3)
        gate.check(trial, well_conditioned_mlp())
        if trial.should_prune():
            raise optuna.TrialPruned()
        return 0.5 + trial.number

    return objective


def test_a_trial_the_pruner_trains_is_feasible_whatever_the_verdict_and_one_it_prunes_is_not() -> None:
    """Recording only (prune=False), the gate set the constraint from the engine's verdict, so a
    trial the pruner's own rule trained was infeasible: study.best_trial raised "No feasible trials"
    and constraint-aware samplers read the trained trials as failures."""
    from nas.gate import CONSTRAINT_KEY

    kept = optuna.create_study(direction="maximize", pruner=ConditioningPruner(threshold=-1e9))
    kept.optimize(_record_then_train(_gate_answering("prune", -3.0)), n_trials=2)
    assert kept.best_trial.number == 1
    assert [t.constraints[CONSTRAINT_KEY] for t in kept.trials] == [-1e9 + 3.0] * 2  # the threshold rule's margin
    pruned = optuna.create_study(direction="maximize", pruner=ConditioningPruner(threshold=1.0))
    pruned.optimize(_record_then_train(_gate_answering("keep", -0.25)), n_trials=1)
    assert pruned.trials[0].state == PRUNED_STATE and pruned.trials[0].constraints[CONSTRAINT_KEY] == 1.25


def test_a_record_only_gate_marks_no_trial_infeasible_under_another_pruner() -> None:
    from nas.gate import CONSTRAINT_KEY

    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner())
    study.optimize(_record_then_train(_gate_answering("prune", -3.0)), n_trials=2)
    assert study.best_trial.number == 1 and all(t.constraints[CONSTRAINT_KEY] == 0.0 for t in study.trials)


def test_a_retried_trial_is_decided_by_its_own_report_not_the_failed_trials_copied_decision(tmp_path: Path) -> None:
    """Optuna's retry callbacks copy a failed trial's system attributes into its retry: the copied
    decision (kept, when the first try could not be conditioned in time) and constraint (0) stood,
    and a retry whose report said prune was trained."""
    from nas.gate import CONSTRAINT_KEY, CONSTRAINT_SYSTEM_ATTR
    from nas.pruners._conditioning import _DECIDED

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'r.db'}", direction="maximize")
    study.pruner = ConditioningPruner()
    failed = study.ask()
    failed.set_user_attr(ATTR_VERDICT, "failed:keep")
    failed.set_constraint(CONSTRAINT_KEY, 0.0)
    assert failed.should_prune() is False
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    copied = study.trials[0].system_attrs  # as RetryFailedTrialCallback enqueues the retry
    study.enqueue_trial({}, user_attrs={}, skip_if_exists=False)
    retry = study.ask()
    for key in (_DECIDED, CONSTRAINT_SYSTEM_ATTR):
        study._storage.set_trial_system_attr(retry._trial_id, key, copied[key])
    study._storage.set_trial_system_attr(retry._trial_id, "failed_trial", 0)
    gate = _gate_answering("prune", -3.0)
    gate.prune = True
    with pytest.raises(optuna.TrialPruned):
        gate.check(retry, {"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]})
    assert study.trials[1].constraints[CONSTRAINT_KEY] == 2.5  # this report's margin: -0.5 - (-3.0)
    assert retry.should_prune() is True

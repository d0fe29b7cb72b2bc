"""The conditioning gate in real Optuna studies against a real running service
(tests/nas/conftest.py), and its pure decision rules."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import optuna
import pytest
import torch

import nas
from nas.client import PreflightClient, RetryPolicy
from nas.gate import (
    ATTR_CANDIDATE_ID,
    ATTR_FEATURES,
    ATTR_RANK,
    ATTR_SCORE,
    ATTR_VERDICT,
    CONSTRAINT_KEY,
    ConditioningGate,
)
from nas.pruners import ConditioningPruner
from nas.testing import FAST_OPTIONS as TINY_OPTIONS
from nas.testing import ill_conditioned_mlp, mlp, well_conditioned_mlp
from nas.training import Trainer, load_digits

optuna.logging.set_verbosity(optuna.logging.WARNING)
PRUNED, COMPLETE = optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE
ILL, WELL = ill_conditioned_mlp(), well_conditioned_mlp()
SPECS = {"well": WELL, "ill": ILL}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, "timeout"),
        ({"threshold": math.nan}, "threshold"),
        ({"on_failure": "skip"}, "on_failure"),
        ({"rank_after": 2}, "rank_after"),
        ({"rank_below": 1.0}, "rank_below"),
        ({"timeout": "5"}, "timeout"),  # each was a raw comparison TypeError, or passed
        ({"rank_below": None}, "rank_below"),
        ({"threshold": "0.1"}, "threshold"),
        ({"rank_after": True}, "rank_after"),
    ],
)
def test_bad_gate_arguments_are_refused_and_quoted(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ConditioningGate(PreflightClient("http://unused.invalid"), **kwargs)


def test_gate_options_that_are_no_mapping_or_hold_a_nan_are_refused_when_the_gate_is_made() -> None:
    """options="abc" said "dictionary update sequence element #0"; a NaN failed at every check."""
    client = PreflightClient("http://unused.invalid")
    with pytest.raises(TypeError, match="options is a dict of tuning options"):
        ConditioningGate(client, options="abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^options\.tolerance is nan"):
        ConditioningGate(client, options={"tolerance": math.nan})
    assert ConditioningGate(client, options={"seed": np.int64(3)}).options == {"seed": 3}


def test_numpy_numbers_are_gate_arguments_like_python_ones() -> None:
    gate = ConditioningGate(
        PreflightClient("http://unused.invalid"),
        rank_after=np.int64(5),  # type: ignore[arg-type]  # numpy numbers are accepted
        rank_below=np.float64(0.4),
        timeout=np.float32(9),  # type: ignore[arg-type]
    )
    assert gate.rank_after == 5 and type(gate.rank_after) is int


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"prune": "no"}, "prune must be True or False"), ({"constraint": None}, "constraint must be True or False")],
)
def test_a_flag_that_is_not_a_bool_is_refused_not_read_as_truthy(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        ConditioningGate(PreflightClient("http://unused.invalid"), **kwargs)


def test_a_url_where_the_client_belongs_is_refused_saying_so() -> None:
    with pytest.raises(TypeError, match="the URL goes to it"):
        ConditioningGate("http://localhost:8000")  # type: ignore[arg-type]


def test_an_async_client_is_refused_where_optuna_calls_synchronously() -> None:
    """It passed the check, and then check() failed with "'coroutine' object has no attribute 'id'"."""
    from nas.client import AsyncPreflightClient

    with pytest.raises(TypeError, match="AsyncPreflightClient cannot serve Optuna's synchronous objective"):
        ConditioningGate(AsyncPreflightClient("http://127.0.0.1:1"))  # type: ignore[arg-type]


@pytest.mark.parametrize("n_trials", [0, 2.5, "2", True])
def test_prescreen_takes_a_whole_number_of_trials(n_trials: Any) -> None:
    gate = ConditioningGate(PreflightClient("http://127.0.0.1:1"), options=TINY_OPTIONS)
    with pytest.raises(ValueError, match="n_trials must be an integer of at least 1"):
        gate.prescreen(optuna.create_study(), arch_space, n_trials=n_trials)


def test_a_prescreen_that_cannot_submit_leaves_no_trial_running() -> None:
    client = PreflightClient("http://127.0.0.1:1", retry=RetryPolicy(attempts=1))
    gate = ConditioningGate(client, options=TINY_OPTIONS)
    study = enqueued_study(["well", "ill"], direction="maximize")
    with pytest.raises(Exception, match="127.0.0.1:1"):
        gate.prescreen(study, arch_space, n_trials=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2


def enqueued_study(archs: list[str], **kwargs: Any) -> optuna.Study:
    study = optuna.create_study(**kwargs)
    for arch in archs:
        study.enqueue_trial({"arch": arch})
    return study


def arch_space(trial: optuna.Trial) -> dict[str, Any]:
    return SPECS[trial.suggest_categorical("arch", ["well", "ill"])]


def test_an_ill_conditioned_candidate_is_pruned_and_a_well_conditioned_one_kept_end_to_end(
    client: PreflightClient,
) -> None:
    data = load_digits()
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)

    def objective(trial: optuna.Trial) -> float:
        spec = arch_space(trial)
        report = gate.check(trial, spec)  # before any training
        assert report is not None
        model = nas.build_model(spec, scales=report.scales, seed=0)
        trainer = Trainer(model, data, generator=torch.Generator().manual_seed(0))
        return max(trainer.epoch() for _ in range(3))

    study = enqueued_study(["ill", "well"], direction="maximize")
    study.optimize(objective, n_trials=2)
    ill, well = study.trials
    assert ill.state == PRUNED and ill.user_attrs[ATTR_VERDICT] == "prune"
    assert well.state == COMPLETE and well.user_attrs[ATTR_VERDICT] == "keep"
    assert well.value is not None and well.value > 0.85  # trained from the tuned initialization, on real digits
    assert ill.user_attrs[ATTR_CANDIDATE_ID] != well.user_attrs[ATTR_CANDIDATE_ID]
    assert ill.user_attrs.get(ATTR_SCORE) is None or ill.user_attrs[ATTR_SCORE] < well.user_attrs[ATTR_SCORE]
    assert ill.constraints[CONSTRAINT_KEY] > 0 >= well.constraints[CONSTRAINT_KEY]


def test_the_gate_runs_an_objective_under_a_fixed_trial(client: PreflightClient) -> None:
    """``optuna.trial.FixedTrial`` runs an objective once with fixed parameters, to debug it; it has
    no study, and check() failed with "'FixedTrial' object has no attribute 'study'"."""
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300, rank_after=3)
    trial = optuna.trial.FixedTrial({"arch": "well"})
    report = gate.check(trial, arch_space(trial))  # type: ignore[arg-type]
    assert report is not None and report.verdict == "keep"
    assert trial.user_attrs[ATTR_VERDICT] == "keep" and CONSTRAINT_KEY in trial.constraints


def test_a_study_named_as_only_some_optuna_storages_allow_is_gated_under_a_storable_label(
    client: PreflightClient,
) -> None:
    """Optuna's in-memory, journal and SQLite storages take an empty name, one over the service's
    512 characters, one holding NUL or a lone surrogate: the gate sent it as it was, and every
    trial failed with the service's 422 (or a UnicodeEncodeError in the client)."""
    from nas.gate import service_study_name

    names = ["", "s" * 513, "s" * 513 + "t", "a\x00b", "a\ud800b", "plain / name"]
    labels = [service_study_name(name) for name in names]
    assert labels[-1] == "plain / name" and len(set(labels)) == len(names)
    assert all(len(label) <= 512 for label in labels) and labels[1].startswith("s" * 480 + "~")
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    for name, label in zip(names, labels, strict=True):
        study = optuna.create_study(study_name=name, direction="maximize")
        study.enqueue_trial({"arch": "well"})
        study.optimize(lambda trial: (gate.check(trial, arch_space(trial)), 1.0)[1], n_trials=1)
        assert study.trials[0].state == COMPLETE
        assert client.study_summary(label)["total"] == 1


def test_the_gate_serves_multi_objective_studies(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        spec = arch_space(trial)
        gate.check(trial, spec)
        return 1.0, float(nas.summarize(spec).parameters)

    study = enqueued_study(["well", "ill", "well"], directions=["maximize", "minimize"])
    study.optimize(objective, n_trials=3)
    assert [t.state for t in study.trials] == [COMPLETE, PRUNED, COMPLETE]
    assert len(study.best_trials) >= 1


def test_ask_and_tell(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    study = enqueued_study(["ill", "well"], direction="maximize")
    for _ in range(2):
        trial = study.ask()
        try:
            gate.check(trial, arch_space(trial))
        except optuna.TrialPruned:
            study.tell(trial, state=PRUNED)
        else:
            study.tell(trial, 1.0)
    assert [t.state for t in study.trials] == [PRUNED, COMPLETE]


@pytest.mark.parametrize("storage_kind", ["inmemory", "rdb"])
def test_parallel_trials_n_jobs_2(client: PreflightClient, storage_kind: str, tmp_path: Path) -> None:
    """Two threads gate trials at once. The architecture follows the trial number, not
    enqueued trials: Optuna's RDB storage on SQLite can hand one enqueued trial to two
    threads (optuna/optuna#4002), a race of the storage, not of the gate."""
    # Two threads write one SQLite file: wait for its lock (sqlite3's default gives up
    # after 5 s, which a loaded machine exceeds) rather than fail the trial.
    storage = (
        None
        if storage_kind == "inmemory"
        else optuna.storages.RDBStorage(
            f"sqlite:///{tmp_path / 'optuna.db'}", engine_kwargs={"connect_args": {"timeout": 60}}
        )
    )
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    study = optuna.create_study(direction="maximize", storage=storage)

    def arch_of(number: int) -> str:
        return "ill" if number % 2 else "well"

    def objective(trial: optuna.Trial) -> float:
        gate.check(trial, SPECS[arch_of(trial.number)])
        return 1.0

    study.optimize(objective, n_trials=6, n_jobs=2)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(study.trials) == 6
    for trial in study.trials:
        ill = arch_of(trial.number) == "ill"
        assert trial.state == (PRUNED if ill else COMPLETE)
        assert trial.user_attrs[ATTR_VERDICT] == ("prune" if ill else "keep")


def test_the_pruner_decides_at_the_first_check_and_median_pruner_later(client: PreflightClient, tmp_path: Path) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, prune=False, timeout=300)  # records only
    pruner = ConditioningPruner(wrapped=optuna.pruners.MedianPruner(n_startup_trials=1))
    study = enqueued_study(
        ["ill", "well", "well"], direction="maximize", pruner=pruner, storage=f"sqlite:///{tmp_path / 'optuna.db'}"
    )
    checked = []

    def objective(trial: optuna.Trial) -> float:
        report = gate.check(trial, arch_space(trial))
        if trial.should_prune():
            checked.append((trial.number, "conditioning"))
            raise optuna.TrialPruned()
        assert report is not None
        nas.build_model(arch_space(trial), scales=report.scales)
        for step in range(3):
            trial.report(1.0 if trial.number == 1 else 0.0, step)  # the second 'well' trains worse
            if trial.should_prune():
                checked.append((trial.number, f"step {step}"))
                raise optuna.TrialPruned()
        return 1.0

    study.optimize(objective, n_trials=3)
    assert checked == [(0, "conditioning"), (2, "step 0")]
    assert [t.state for t in study.trials] == [PRUNED, COMPLETE, PRUNED]


def test_the_pruner_waits_for_a_candidate_only_submitted(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    study = enqueued_study(["ill", "well"], direction="maximize", pruner=ConditioningPruner(client=client, timeout=300))

    def objective(trial: optuna.Trial) -> float:
        gate.submit(trial, arch_space(trial))  # no wait: the pruner waits at should_prune
        if trial.should_prune():
            raise optuna.TrialPruned()
        return 1.0

    study.optimize(objective, n_trials=2)
    assert [t.state for t in study.trials] == [PRUNED, COMPLETE]
    # what it waited for is recorded as the gate records it: the percentile rule reads these
    assert [t.user_attrs[ATTR_VERDICT] for t in study.trials] == ["prune", "keep"]
    assert isinstance(study.trials[1].user_attrs[ATTR_SCORE], float)


def test_the_percentile_rule_applies_to_trials_that_were_only_submitted(client: PreflightClient) -> None:
    """The scores the pruner waited for were never written to the trials, so the percentile
    never had its startup scores, and every trial the verdict kept was kept."""
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    pruner = ConditioningPruner(percentile=50.0, n_startup_trials=2, client=client, timeout=300)
    specs = [mlp(2, "relu"), mlp(3, "relu"), mlp(8, "tanh")]
    study = optuna.create_study(direction="maximize", pruner=pruner)

    def objective(trial: optuna.Trial) -> float:
        gate.submit(trial, specs[trial.number])
        if trial.should_prune():
            raise optuna.TrialPruned()
        return 1.0

    study.optimize(objective, n_trials=3)
    scores = [t.user_attrs[ATTR_SCORE] for t in study.trials]
    median = float(np.median(scores[:2]))
    assert (study.trials[2].state == PRUNED) == (scores[2] < median), (scores, study.trials[2].state)


@pytest.mark.parametrize("on_failure", ["prune", "keep"])
def test_a_wait_that_times_out_is_a_failure_under_on_failure(
    client: PreflightClient, on_failure: Literal["prune", "keep"]
) -> None:
    """A candidate not conditioned within the timeout raised WaitTimeout whatever on_failure said,
    so one slow job stopped the study. Here the job waits for a GPU worker that this service lacks."""
    width = {"prune": 37, "keep": 41}[on_failure]  # 37, 41, 43, 47: widths no other test submits (the jobs stay queued)
    gate = ConditioningGate(client, options=TINY_OPTIONS | {"device": "cuda"}, timeout=0.5, on_failure=on_failure)
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    try:
        if on_failure == "prune":
            with pytest.raises(optuna.TrialPruned, match="was not conditioned"):
                gate.check(trial, mlp(1, "relu", width))
        else:
            assert gate.check(trial, mlp(1, "relu", width)) is None
    finally:
        client.cancel(trial.user_attrs[ATTR_CANDIDATE_ID])
    assert trial.user_attrs[ATTR_VERDICT] == f"failed:{on_failure}"
    assert "queued" in trial.user_attrs["preflight_reasons"][0]
    # a constraint on every trial, or GPSampler refuses the study
    assert trial.constraints[CONSTRAINT_KEY] == (1.0 if on_failure == "prune" else 0.0)


def test_a_wait_that_times_out_raises_under_on_failure_raise(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS | {"device": "cuda"}, timeout=0.5)
    with pytest.raises(nas.errors.WaitTimeout) as caught:
        gate.check(optuna.create_study().ask(), mlp(1, "relu", 43))
    client.cancel(caught.value.candidate.id)


def test_a_prescreen_keeps_a_timed_out_candidate_to_train_from_its_plain_init(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS | {"device": "cuda"}, timeout=0.5, on_failure="keep")
    study = optuna.create_study(direction="maximize")
    (screened,) = gate.prescreen(study, lambda trial: mlp(1, "relu", 47), n_trials=1)
    client.cancel(screened.candidate.id)
    assert not screened.conditioned and screened.scales == {} and screened.recommended_lr is None
    assert screened.build_model()(torch.zeros(2, 64)).shape == (2, 10)


def test_prescreening_submits_all_specs_at_once_and_returns_the_kept(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    study = enqueued_study(["well", "ill", "ill", "well"], direction="maximize")
    kept = gate.prescreen(study, arch_space, n_trials=4)
    assert [s.trial.number for s in kept] == [0, 3]
    for screened in kept:
        model = screened.build_model()
        seed = screened.report.environment.seed
        draw = screened.report.environment.draw
        shifts = screened.report.bias_shifts
        assert shifts  # the survivor's biases are centered: build_model must carry them
        reference = nas.build_model(screened.spec, scales=screened.scales, seed=seed, draw=draw, bias_shifts=shifts)
        for (name, p), (_, q) in zip(model.state_dict().items(), reference.state_dict().items(), strict=True):
            assert torch.equal(p, q), name
        assert model(torch.zeros(2, 64)).shape == (2, 10)
        study.tell(screened.trial, 1.0)
    assert [t.state for t in study.trials] == [COMPLETE, PRUNED, PRUNED, COMPLETE]
    assert all(t.user_attrs[ATTR_VERDICT] == "prune" for t in study.trials if t.state == PRUNED)


NO_PARAMETERS = {"input_shape": [64], "blocks": [{"layers": [{"type": "relu"}]}]}
ZERO_WIDTH = {"input_shape": [64], "blocks": [{"layers": [{"type": "linear", "out": 0}]}]}


def test_a_prescreen_fails_only_the_trials_whose_spec_the_service_refuses(client: PreflightClient) -> None:
    """The service validates a batch all or nothing, so one invalid architecture failed every
    trial of the prescreen; now it fails its own trial, saying why, and the rest are conditioned."""
    from nas.gate import SpecRefused

    specs = SPECS | {"no_parameters": NO_PARAMETERS, "zero_width": ZERO_WIDTH}
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    study = enqueued_study(["no_parameters", "well", "zero_width", "ill", "well"], direction="maximize")
    with pytest.warns(SpecRefused) as warned:
        kept = gate.prescreen(study, lambda t: specs[t.suggest_categorical("arch", list(specs))], n_trials=5)
    assert [s.trial.number for s in kept] == [1, 4]
    assert [str(w.message).split(":")[0] for w in warned] == ["trial 0", "trial 2"]
    FAIL = optuna.trial.TrialState.FAIL
    assert [t.state for t in study.trials] == [
        FAIL,
        optuna.trial.TrialState.RUNNING,
        FAIL,
        PRUNED,
        optuna.trial.TrialState.RUNNING,
    ]
    refused = study.trials[2]
    assert refused.user_attrs[ATTR_VERDICT] == "refused"
    assert refused.user_attrs["preflight_reasons"][0].startswith("spec.blocks[0].layers[0] (linear).out: ")
    assert "no parameters" in study.trials[0].user_attrs["preflight_reasons"][0]
    assert len(study.trials[0].user_attrs["preflight_reasons"]) == 1  # its own reasons, not trial 2's


def _refused_submissions(url: str) -> float:
    """POST /v1/candidates answered 422 so far, read off the service's metrics."""
    import httpx

    line = 'preflight_request_seconds_count{method="POST",route="/v1/candidates",status="422"} '
    found = [row for row in httpx.get(f"{url}/metrics").text.splitlines() if row.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


def test_a_prescreen_drops_every_refused_spec_after_one_refusal(client: PreflightClient, live_service: Any) -> None:
    """The service names every refused spec of a batch, so the gate sends the batch again once,
    not once per refused spec."""
    specs = SPECS | {"zero_width": ZERO_WIDTH}
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    archs = ["zero_width", "well", "zero_width", "zero_width", "well"]
    study = enqueued_study(archs, direction="maximize")
    before = _refused_submissions(live_service.url)
    with pytest.warns(nas.gate.SpecRefused) as warned:
        kept = gate.prescreen(study, lambda t: specs[t.suggest_categorical("arch", list(specs))], n_trials=5)
    assert _refused_submissions(live_service.url) - before == 1
    assert [s.trial.number for s in kept] == [1, 4]
    assert [str(w.message).split(":")[0] for w in warned] == ["trial 0", "trial 2", "trial 3"]
    assert [t.state for t in study.trials if t.number in (0, 2, 3)] == [optuna.trial.TrialState.FAIL] * 3
    assert all(study.trials[i].user_attrs[ATTR_VERDICT] == "refused" for i in (0, 2, 3))
    for screened in kept:
        study.tell(screened.trial, 1.0)


def test_a_prescreen_whose_every_spec_is_refused_raises_with_every_trial_failed(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300)
    study = optuna.create_study()
    with pytest.raises(nas.errors.SpecRejectedError, match="2 of 2 specs refused"):
        gate.prescreen(study, lambda trial: ZERO_WIDTH, n_trials=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2
    assert all(t.user_attrs[ATTR_VERDICT] == "refused" for t in study.trials)


def test_a_refusal_of_the_options_fails_the_whole_prescreen(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS | {"no_such_option": 1}, timeout=300)
    study = enqueued_study(["well", "ill"], direction="maximize")
    with pytest.raises(nas.errors.SpecRejectedError, match="no_such_option"):
        gate.prescreen(study, arch_space, n_trials=2)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2
    assert all(ATTR_VERDICT not in t.user_attrs for t in study.trials)


def test_rank_after_prunes_a_trainable_candidate_predicted_below_the_trained_ones(client: PreflightClient) -> None:
    """The objective here is the network's size, which the ranking's features include: once six
    trials have completed, a narrower network than any of them is predicted worst and pruned
    before training, though its verdict keeps it, and a wider one is kept."""
    gate = ConditioningGate(client, options=TINY_OPTIONS, timeout=300, rank_after=6, rank_below=0.5)
    widths = [12, 16, 32, 64, 128, 256, 8, 512]

    def objective(trial: optuna.Trial) -> float:
        spec = mlp(2, "relu", trial.suggest_categorical("width", widths))
        gate.check(trial, spec)
        return math.log10(nas.summarize(spec).parameters)

    study = optuna.create_study(direction="maximize")
    for width in widths:
        study.enqueue_trial({"width": width})
    study.optimize(objective, n_trials=len(widths))
    *trained, narrow, wide = study.trials
    assert all(t.state == COMPLETE and ATTR_RANK not in t.user_attrs for t in trained)
    assert trained[2].user_attrs[ATTR_FEATURES]["log_params"] == pytest.approx(trained[2].value)
    assert narrow.state == PRUNED and narrow.user_attrs[ATTR_VERDICT] == "keep"
    assert narrow.user_attrs[ATTR_RANK] < 0.5
    assert wide.state == COMPLETE and wide.user_attrs[ATTR_RANK] >= 0.5
    # pre-screening ranks against the same completed trials
    for size in (10, 1024):
        study.enqueue_trial({"size": size})
    kept = gate.prescreen(study, lambda trial: mlp(2, "relu", trial.suggest_int("size", 1, 2048)), n_trials=2)
    assert [s.spec["blocks"][0]["layers"][0]["out"] for s in kept] == [1024]
    assert study.trials[-2].state == PRUNED and study.trials[-2].user_attrs[ATTR_VERDICT] == "keep"
    # with prune=False the gate records where the narrow network ranks and leaves the decision to the pruner
    recorder = ConditioningGate(client, options=TINY_OPTIONS, timeout=300, rank_after=6, prune=False)
    trial = study.ask()
    assert recorder.check(trial, mlp(2, "relu", 8)) is not None
    assert trial.user_attrs[ATTR_RANK] < 0.5


def test_ranking_that_skips_every_candidate_while_nothing_completes_warns_once() -> None:
    """Only kept candidates complete, so once the trained trials all rank high the fit cannot
    change and every later candidate may be skipped: a fuzzing pass found a search stalled so,
    silently. The gate warns at the tenth candidate in a row, and the decisions are unchanged."""
    from nas.gate import RankingStalled

    gate = ConditioningGate(PreflightClient("http://127.0.0.1:1"), rank_after=3)
    study = optuna.create_study(direction="maximize")
    for score, value in ((-1.0, 0.5), (0.0, 0.9), (1.0, 0.9)):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={ATTR_FEATURES: {"score": score}}))
    decisions = []
    with pytest.warns(RankingStalled, match="the last 10 candidates of study") as caught:
        for _ in range(12):
            trial = study.ask()
            trial.set_user_attr(ATTR_FEATURES, {"score": -2.0})
            ranked = gate.rank(trial)
            assert ranked is not None
            decisions.append(ranked.keep)
            study.tell(trial, state=PRUNED)
    assert decisions == [False] * 12
    assert sum(isinstance(w.message, RankingStalled) for w in caught) == 1
    kept = study.ask()
    kept.set_user_attr(ATTR_FEATURES, {"score": 2.0})
    ranked = gate.rank(kept)
    assert ranked is not None and ranked.keep  # the streak ends with a candidate kept


def test_a_run_of_skips_shorter_than_the_trained_count_is_not_a_stall() -> None:
    """The trained trials' median rises as the search goes on, so runs of skips grow with it: on
    NAS-Bench-201's replay a healthy rank gate skips up to 0.65 times its trained count in a row.
    With 20 trained, 10 skips in a row do not warn; 20 do."""
    import warnings

    from nas.gate import RankingStalled

    gate = ConditioningGate(PreflightClient("http://127.0.0.1:1"), rank_after=3)
    study = optuna.create_study(direction="maximize")
    for i in range(20):
        study.add_trial(optuna.trial.create_trial(value=0.5 + i / 100, user_attrs={ATTR_FEATURES: {"score": float(i)}}))

    def skip() -> None:
        trial = study.ask()
        trial.set_user_attr(ATTR_FEATURES, {"score": -5.0})
        ranked = gate.rank(trial)
        assert ranked is not None and not ranked.keep
        study.tell(trial, state=PRUNED)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RankingStalled)
        for _ in range(19):
            skip()
    with pytest.warns(RankingStalled, match="the last 20 candidates of study"):
        skip()


def test_rank_after_refuses_a_multi_objective_study(client: PreflightClient) -> None:
    gate = ConditioningGate(client, options=TINY_OPTIONS, rank_after=3)
    study = optuna.create_study(directions=["maximize", "minimize"])
    with pytest.raises(ValueError, match="one objective"):
        gate.check(study.ask(), WELL)

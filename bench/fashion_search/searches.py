"""One seed of the search: the ten searches, round robin one trial each, on one ``Evaluator``.

Every search uses TPE with the same seed (so the ten random start-up trials are the same
networks in all ten), 30 trials by default, the validation accuracy after each epoch as the
reported value and the last one as the objective. The gated searches use the product's gate and
pruner on the engine run in this process.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import optuna

from bench.fashion_search.evaluate import Evaluator
from bench.fashion_search.space import search_space
from nas.client import Candidate
from nas.gate import ConditioningGate
from nas.pruners import ConditioningPruner
from nas.report import ConditioningReport

__all__ = ["FIXED_RATE", "SEARCHES", "Search", "TrialRecord", "run_seed"]

STARTUP_TRIALS = 10


def _median() -> optuna.pruners.BasePruner:
    # steps are 1-based epochs: a trial may be stopped after its first epoch, once 5 have finished
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0)


def _hyperband(epochs: int) -> Callable[[], optuna.pruners.BasePruner]:
    return lambda: optuna.pruners.HyperbandPruner(min_resource=1, max_resource=epochs, reduction_factor=3)


# the best fixed rate on benchmark v2's development set when the search ran (still so, by 0.003 over 0.01:
# docs/conditioning.md, section 9); part of the cached seeds' meaning
FIXED_RATE = 0.03


class Search(NamedTuple):
    """How a search treats a trial: conditioned first (and charged for it), skipped on a ``prune``
    verdict, stopped during training by a pruner, trained at a fixed rate instead of the sampled one,
    skipped when ranked below the median of the completed trials (``rank_after``: the gate's),
    trained from an init peer of benchmark v2 (``init``, e.g. ``lsuv``: its forward passes on the
    conditioning's batch are charged as the trial's conditioning)."""

    conditioned: bool
    skips: bool
    pruner: str | None = None
    fixed_lr: float | None = None
    rank_after: int | None = None
    init: str | None = None


# "tuned, no gate" separates the gate's skipping from the tuned init and rate its survivors train
# with; "no gate, rate 0.03" asks whether a sensible fixed rate alone does what the recommended one does;
# "lsuv, no gate" whether the twenty-line init a practitioner would add (LSUV, level with the tuned
# init on the start-up networks) does what the tuned init and its rate do (added after the other nine
# had run: the simplest baseline that could explain "tuned, no gate"'s gain).
SEARCHES: dict[str, Search] = {
    "no gate": Search(False, False),
    "no gate, rate 0.03": Search(False, False, fixed_lr=FIXED_RATE),
    "median": Search(False, False, "median"),
    "hyperband": Search(False, False, "hyperband"),
    "tuned, no gate": Search(True, False),
    "preflight gate": Search(True, True),
    "gate + median": Search(True, True, "median"),
    "gate + hyperband": Search(True, True, "hyperband"),
    # the gate that also ranks: once the random start-up trials have completed, a proposal that
    # nas.ranking (fitted on them and every later completed trial) predicts below their median is skipped
    "gate + rank": Search(True, True, rank_after=STARTUP_TRIALS),
    "lsuv, no gate": Search(False, False, init="lsuv"),
}


@dataclass
class TrialRecord:
    """A trial as a search saw it: what it cost and reached."""

    number: int
    name: str
    state: str  # complete | pruned-before | pruned-during
    lr: float
    epochs: int = 0
    train_seconds: float = 0.0
    train_steps: int = 0
    condition_seconds: float = 0.0
    condition_steps: float = 0.0  # the engine's counted training steps
    val: float | None = None  # the last reported validation accuracy
    test: float | None = None  # the test accuracy after the last epoch trained
    final_val: float | None = None  # complete trials: the objective
    score: float | None = None
    verdict: str | None = None  # gated searches, and (not charged) the ungated one
    params: dict[str, Any] = field(default_factory=dict)


class _Engine:
    """What ``ConditioningGate`` asks of a client (``condition``), answered by the engine in this
    process through the ``Evaluator``'s cache: the gate's own keep/prune rule and trial records run
    unchanged, without the service's HTTP and queue."""

    def __init__(self, evaluator: Evaluator, seed: int) -> None:
        self.evaluator, self.seed = evaluator, seed
        self.last: tuple[ConditioningReport, float] | None = None

    def condition(self, spec: dict[str, Any], options: Any = None, timeout: float | None = None) -> Candidate:
        self.last = self.evaluator.condition(spec, self.seed)
        report = self.last[0]
        return Candidate(id=report.spec_hash or spec.get("name", "candidate"), status="done", report=report)


def _fill(record: TrialRecord, report: ConditioningReport, seconds: float | None) -> None:
    """The conditioning's figures into the record; ``seconds`` None: seen, not charged."""
    record.score, record.verdict = _finite(report.score), report.verdict
    if seconds is not None:
        record.condition_seconds = seconds
        record.condition_steps = float((report.tuning.budget if report.tuning else {}).get("counted_steps") or 0.0)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _objective(
    name: str, evaluator: Evaluator, seed: int, epochs: int, records: list[TrialRecord]
) -> Callable[[optuna.Trial], float]:
    search = SEARCHES[name]
    engine = _Engine(evaluator, seed)
    # with a pruner during training, ConditioningPruner takes the verdict at the first should_prune()
    gate = (
        ConditioningGate(engine, prune=search.skips and search.pruner is None, rank_after=search.rank_after)  # type: ignore[arg-type]
        if search.conditioned
        else None
    )

    def objective(trial: optuna.Trial) -> float:
        spec, lr = search_space(trial)
        record = TrialRecord(trial.number, spec["name"], "complete", search.fixed_lr or lr, params=dict(trial.params))
        records.append(record)
        report = None
        if gate is not None:
            engine.last = None
            try:
                report = gate.check(trial, spec)
            except optuna.TrialPruned:
                record.state = "pruned-before"
                raise
            finally:
                if engine.last is not None:
                    _fill(record, *engine.last)
            assert report is not None  # noqa: S101 - the engine always answers with a report
            if trial.should_prune():  # ConditioningPruner: the first check decides by conditioning
                record.state = "pruned-before"
                raise optuna.TrialPruned()
            record.lr = report.recommended_lr or lr
        else:  # what the gate would have said, for the report only: not charged
            _fill(record, evaluator.condition(spec, seed)[0], None)
        if search.init is not None:
            record.condition_seconds, record.condition_steps = evaluator.init_cost(spec, seed, search.init)
        for step in range(1, epochs + 1):
            done = evaluator.epochs(spec, record.lr, seed, step, report, peer=search.init)[-1]
            record.epochs, record.val, record.test = step, done.val, done.test
            record.train_seconds += done.seconds
            record.train_steps += done.steps
            trial.report(done.val, step)
            if trial.should_prune():
                record.state = "pruned-during"
                raise optuna.TrialPruned()
        record.final_val = done.val
        return float(done.val)

    return objective


def _pruner(name: str, epochs: int) -> optuna.pruners.BasePruner:
    search = SEARCHES[name]
    make = {None: optuna.pruners.NopPruner, "median": _median, "hyperband": _hyperband(epochs)}[search.pruner]
    return ConditioningPruner(wrapped=make()) if search.skips and search.pruner else make()


def run_seed(
    evaluator: Evaluator,
    seed: int,
    trials: int,
    epochs: int,
    log: Callable[[str], None] = print,
    names: list[str] | None = None,
) -> dict[str, Any]:
    """The searches of one seed (``names``: these of them), interleaved one trial each (each search's
    trials in order; the searches share nothing but the cached trainings, so a subset runs as it
    would among all)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    runs = []
    for name in names or SEARCHES:
        study = optuna.create_study(
            study_name=f"fashion-search-{name.replace(' ', '-')}-seed{seed}",
            direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS),
            pruner=_pruner(name, epochs),
        )
        records: list[TrialRecord] = []
        runs.append((name, study, _objective(name, evaluator, seed, epochs, records), records))
    for number in range(trials):
        for _name, study, objective, _records in runs:
            study.optimize(objective, n_trials=1)
        log(f"seed {seed}: trial {number + 1}/{trials} of each search")
    return {name: [asdict(r) for r in records] for name, _s, _o, records in runs}

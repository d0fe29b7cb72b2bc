"""`preflight demo`: an Optuna architecture search on real data, with and without Preflight.

On scikit-learn's handwritten digits (MLPs and residual MLPs), or with ``--dataset
fashion-mnist`` on 14 x 14 Fashion-MNIST images (CNNs and residual CNNs, ``nas.fashion_mnist``),
the same search (same sampler, same seed, same number of trials) runs four times on the
embedded default (a SQLite file, the API and a worker in this process, on a free port):

1. ``no gate``: every candidate is trained from its plain initialization;
2. ``median pruner``: the same, with Optuna's MedianPruner stopping weak trainings early;
3. ``preflight gate``: every candidate is conditioned first; those the service prunes are
   never trained, the others train from the tuned initialization (``report.build_model``);
4. ``gate + median pruner``: both, as one study pruner: ``ConditioningPruner`` decides at
   the first ``should_prune()`` and hands later steps to MedianPruner.

It prints a table (trials, pruned before training, compute spent, best validation
accuracy) and writes plots and ``results.json`` into the output folder. Compute is what
was spent on this machine: training seconds, plus the worker's seconds for conditioning
in the gated search.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas.report import ConditioningReport

__all__ = ["register"]

SEARCHES = ("no gate", "median pruner", "preflight gate", "gate + median pruner")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo", help="an Optuna NAS on scikit-learn's digits or Fashion-MNIST, with and without the conditioning gate"
    )
    demo.add_argument(
        "--dataset",
        choices=sorted(DATASETS),
        default="digits",
        help="digits: MLPs and residual MLPs on scikit-learn's 8x8 digits (default); fashion-mnist: CNNs and "
        "residual CNNs on 14x14 Fashion-MNIST images (3,000 for training), read from the IDX files of Debian's "
        "dataset-fashion-mnist package or PREFLIGHT_FASHION_MNIST_DIR",
    )
    demo.add_argument("--trials", type=int, default=20, help="trials per search (default 20)")
    demo.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="training epochs of a survivor (default: 20 on digits, 4 on fashion-mnist)",
    )
    demo.add_argument("--out", default="preflight-demo-output", help="output folder (default ./preflight-demo-output)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument(
        "--device",
        default="auto",
        help="device of the embedded worker and of the trainings (auto, cpu, cuda:N); with --url, of the trainings",
    )
    demo.add_argument("--steps", type=int, default=None, help="tuning steps per candidate (default: the engine's)")
    demo.add_argument("--bnp", action="store_true", help="train gated survivors with the BNP preconditioner")
    demo.add_argument(
        "--gaussian",
        action="store_true",
        help="condition on a Gaussian batch with random probe labels (the service's default) instead of "
        "uploading a labelled batch of the training split",
    )
    demo.add_argument("--url", help="use a running service at this URL instead of the embedded one")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.add_argument("--no-plots", action="store_true", help="skip the figures")
    demo.set_defaults(handler=_demo)


@dataclass
class TrialRecord:
    number: int
    name: str
    state: str  # complete | pruned-before | pruned-during
    epochs: int
    accuracy: float | None
    train_seconds: float
    condition_seconds: float = 0.0
    score: float | None = None
    verdict: str | None = None
    reason: str | None = None  # the conditioning report's first reason (gated searches)
    candidate_id: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def compute(self) -> float:
        return self.train_seconds + self.condition_seconds


@dataclass
class SearchResult:
    name: str
    wall_seconds: float = 0.0
    trials: list[TrialRecord] = field(default_factory=list)

    @property
    def pruned_before(self) -> int:
        return sum(t.state == "pruned-before" for t in self.trials)

    @property
    def pruned_during(self) -> int:
        return sum(t.state == "pruned-during" for t in self.trials)

    @property
    def compute(self) -> float:
        return sum(t.compute for t in self.trials)

    @property
    def epochs(self) -> int:
        return sum(t.epochs for t in self.trials)

    @property
    def best(self) -> TrialRecord | None:
        done = [t for t in self.trials if t.accuracy is not None and t.state == "complete"]
        return max(done, key=lambda t: t.accuracy or 0.0) if done else None


# dataset -> training epochs of a survivor by default
DATASETS = {"digits": 20, "fashion-mnist": 4}


def _check_args(args: argparse.Namespace) -> str | None:
    if args.epochs is None:
        args.epochs = DATASETS[args.dataset]
    if args.trials < 1:
        return f"--trials must be at least 1, but got {args.trials}"
    if args.epochs < 1:
        return f"--epochs must be at least 1, but got {args.epochs}"
    if args.steps is not None and (problem := _steps_problem(args.steps)):  # the service refused it after two trainings
        return problem
    if not 0 <= args.seed < 2**32:  # numpy's and scikit-learn's seeds: refused only once the service ran
        return f"--seed must be in [0, 2**32), but got {args.seed}"
    return _check_device(args)


def _steps_problem(steps: int) -> str | None:
    """What the engine's options say of ``--steps`` (their bounds, in one place), or None."""
    from pydantic import ValidationError

    from nas.options import ConditionOptions

    try:
        ConditionOptions.model_validate({"steps": steps})
    except ValidationError as refused:
        return f"--steps {steps}: {refused.errors()[0]['msg'].lower()}"
    return None


def _check_device(args: argparse.Namespace) -> str | None:
    """Sets ``args.train_device``, where the trainings run (and the embedded worker conditions): the CPU
    or a CUDA device that is present (``worker.engine.device.resolve_device``'s rule), refused before
    any work otherwise (torch parses ``mps`` or ``cuda:99`` as devices; they would fail only after the
    service had started)."""
    from worker.engine.device import resolve_device

    try:
        device = resolve_device(args.device)
    except ValueError as refused:  # an unknown device, or DeviceUnavailable (a ValueError too)
        return f"--device: {refused}"
    args.train_device = str(device)  # recorded in results.json with the other arguments
    return None


def _demo(args: argparse.Namespace) -> int:
    import sys

    problem = _check_args(args)
    if problem:
        print(f"preflight demo: {problem}", file=sys.stderr)
        return 2
    if not args.no_plots:  # the figures come last: a missing matplotlib said so after every search
        import matplotlib  # noqa: F401 - a ModuleNotFoundError: the CLI names the extra (exit 6)
    # Read once, before any work: a missing or damaged dataset is one line saying how to get
    # it, not a traceback once the service runs.
    data = _load(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:  # before the searches, not at their end: results.json and the figures go here
        tempfile.TemporaryFile(dir=out).close()
    except OSError as error:
        print(f"preflight demo: cannot write to --out {out} ({error.strerror or error})", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if args.url:
        results = _run_all(args, data, args.url, out)
    else:
        from service.embedded import EmbeddedService

        # A fresh store each run, so every candidate is really conditioned (no cache hits).
        with tempfile.TemporaryDirectory(prefix="preflight-demo-") as folder:
            url = f"sqlite:///{Path(folder) / 'preflight.db'}"
            print(f"starting the embedded service (SQLite in {folder}, worker device {args.device}) ...")
            with EmbeddedService(url, device=args.device, poll_seconds=0.05) as service:
                print(f"service at {service.url}")
                results = _run_all(args, data, service.url, out)
    print()
    print(_table(results))
    print()
    print(_what_happened(results))
    print(
        f"\ncompute = training seconds + the worker's conditioning seconds; "
        f"total wall time {time.perf_counter() - started:.0f} s"
    )
    (out / "results.json").write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items() if k != "handler"},
                "searches": [
                    {"name": r.name, "wall_seconds": r.wall_seconds, "trials": [asdict(t) for t in r.trials]}
                    for r in results["searches"]
                ],
                "score_vs_accuracy": results["score_vs_accuracy"],
                "apjn": results["apjn"],
            },
            indent=2,
        )
    )
    if not args.no_plots:
        from service.cli._demo_plots import write_plots

        for path in write_plots(results, out):
            print(f"wrote {path}")
    print(f"wrote {out / 'results.json'}")
    return 0


def search_space(n_classes: int = 10, dataset: str = "digits") -> Any:
    """The demo's space, a custom one built from the ready families, chosen by the trial: on
    digits MLPs or residual MLPs, on Fashion-MNIST CNNs or residual CNNs. Wide enough to hold
    hopeless candidates: deep sigmoid or tanh stacks, gains far from 1, no normalization."""
    from nas.space import CNNSpace, MLPSpace, ResidualSpace

    common: dict[str, Any] = {
        "n_classes": n_classes,
        "gain": (0.25, 4.0),
        "activations": ("relu", "gelu", "tanh", "sigmoid"),
        "init_schemes": ("fan_in", "arithmetic", "geometric", "torch_default"),
    }
    plain: CNNSpace | MLPSpace
    if dataset == "fashion-mnist":
        image = {**common, "input_shape": [1, 14, 14]}
        plain = CNNSpace(
            stages=(1, 3),
            convs_per_stage=(1, 4),
            channels=(8, 24),
            kernels=(3,),
            norms=("none", "batchnorm"),
            prefix="cnn_",
            **image,
        )
        residual = ResidualSpace(
            depth=(2, 8), width=(8, 16), body_layers=(1, 2), norms=("none", "batchnorm"), prefix="res_", **image
        )
        names = ["cnn", "residual"]
    else:
        vector = {**common, "input_shape": [64], "norms": ("none", "layernorm")}
        plain = MLPSpace(depth=(2, 14), width=(32, 128), prefix="mlp_", **vector)
        residual = ResidualSpace(depth=(2, 10), width=(32, 128), body_layers=(1, 2), prefix="res_", **vector)
        names = ["mlp", "residual"]

    def space(trial: Any) -> dict[str, Any]:
        family = trial.suggest_categorical("family", names)
        return plain(trial) if family == names[0] else residual(trial)

    return space


def _run_all(args: argparse.Namespace, data: Any, url: str, out: Path) -> dict[str, Any]:
    import optuna
    import torch

    from nas.client import PreflightClient

    # The demo's networks are tiny: one intra-op thread each for training and the embedded
    # worker beats two threads contending (OpenMP spin-waits) on a 2-core machine.
    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _quiet_interrupted_trials()
    options: dict[str, Any] = {"seed": args.seed}
    if args.steps is not None:
        options["steps"] = args.steps
    with PreflightClient(url, timeout=60.0) as client:
        if not args.gaussian:  # condition and probe on 64 real training images, with their labels
            options["data"] = client.upload_batch(data.x_train[:64], data.y_train[:64])
        runs = [_search(name, position, args, data, client, options) for position, name in enumerate(SEARCHES)]
        # Round robin, one trial of each search in turn: the four see the same load on
        # this machine, so their compute (wall seconds) compares fairly.
        try:
            for _ in range(args.trials):
                for run in runs:
                    run()
        finally:
            for run in runs:
                run.close()
        searches = [run.result for run in runs]
        extra = _score_ungated(searches)
        profiles = _apjn_profiles(client, searches[SEARCHES.index("preflight gate")])
    return {"searches": searches, "score_vs_accuracy": extra, "apjn": profiles, "dataset": args.dataset}


class _NoInterruptTraceback(logging.Filter):
    """Optuna logs a trial that a Ctrl-C ended with the whole traceback (through httpx's or
    torch's frames) before it lets the interrupt through: its one line is what a user needs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt):
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_interrupted_trials() -> None:
    """Install :class:`_NoInterruptTraceback` once, on the logger of Optuna's trial loop."""
    trial_loop = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _NoInterruptTraceback) for f in trial_loop.filters):
        trial_loop.addFilter(_NoInterruptTraceback())


def _load(args: argparse.Namespace) -> Any:
    if args.dataset == "fashion-mnist":
        from nas.fashion_mnist import load_fashion_mnist

        return load_fashion_mnist(seed=args.seed)
    from nas.training import load_digits

    return load_digits(seed=args.seed)


def _apjn_profiles(client: Any, gated: SearchResult) -> dict[str, Any]:
    """The per-block APJN before and after tuning of the gated search's best candidate and
    of its worst-scored pruned one."""
    chosen = {}
    if gated.best is not None:
        chosen["best"] = gated.best
    pruned = [t for t in gated.trials if t.state == "pruned-before" and t.candidate_id]
    if pruned:
        chosen["pruned"] = min(pruned, key=lambda t: t.score if t.score is not None and _finite(t.score) else -math.inf)
    out = {}
    for role, record in chosen.items():
        report = client.get(str(record.candidate_id)).report
        out[role] = {
            "name": record.name,
            "score": record.score,
            "verdict": record.verdict,
            "accuracy": record.accuracy if role == "best" else None,
            "blocks": [b.model_dump(mode="json") for b in report.blocks] if report else [],
            "reasons": list(report.reasons) if report else [],
        }
    return out


class _Run:
    """One search, advanced one trial per call."""

    def __init__(self, study: Any, objective: Any, result: SearchResult, bar: Any, args: argparse.Namespace) -> None:
        self.study, self.objective, self.result, self.bar, self.args = study, objective, result, bar, args

    def __call__(self) -> None:
        started = time.perf_counter()
        self.study.optimize(self.objective, n_trials=1)
        self.result.wall_seconds += time.perf_counter() - started
        result, best = self.result, self.result.best
        accuracy = f"{best.accuracy:.4f}" if best and best.accuracy is not None else "-"
        self.bar.set_postfix_str(
            f"best acc {accuracy}, pruned {result.pruned_before} before + {result.pruned_during} "
            f"during training, compute {result.compute:.0f} s",
            refresh=False,
        )
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
        if self.args.no_progress:
            result, best = self.result, self.result.best
            print(
                f"{result.name}: {len(result.trials)} trials, pruned {result.pruned_before} before + "
                f"{result.pruned_during} during training, compute {result.compute:.0f} s, best accuracy "
                f"{f'{best.accuracy:.4f}' if best and best.accuracy is not None else '-'}",
                flush=True,
            )


def _search(
    name: str, position: int, args: argparse.Namespace, data: Any, client: Any, options: dict[str, Any]
) -> _Run:
    import optuna
    import torch

    import nas
    from nas.gate import ATTR_CANDIDATE_ID, ConditioningGate
    from nas.pruners import ConditioningPruner
    from nas.training import Trainer

    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if name == "median pruner":
        pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2)
    if name == "gate + median pruner":
        pruner = ConditioningPruner(wrapped=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2))
    study = optuna.create_study(
        study_name=f"demo-{name.replace(' ', '-')}-{int(time.time())}",
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=10),
        pruner=pruner,
    )
    gate = None
    if name in ("preflight gate", "gate + median pruner"):
        # With the study's ConditioningPruner the gate only records; should_prune decides.
        gate = ConditioningGate(client, options=options, timeout=600.0, prune=name == "preflight gate")
    space = search_space(data.n_classes, args.dataset)
    result = SearchResult(name)
    optimizer = _bnp_factory() if (args.bnp and gate is not None) else None

    def objective(trial: optuna.Trial) -> float:
        spec = space(trial)
        record = TrialRecord(trial.number, spec["name"], "complete", 0, None, 0.0, params=dict(trial.params))
        result.trials.append(record)
        report = None
        if gate is not None:
            try:
                report = gate.check(trial, spec)
            except optuna.TrialPruned:
                _fill_conditioning(record, client, trial.user_attrs.get(ATTR_CANDIDATE_ID))
                record.state = "pruned-before"
                raise
            _fill_conditioning(record, client, trial.user_attrs.get(ATTR_CANDIDATE_ID), report)
            if trial.should_prune():  # ConditioningPruner: the first check decides by conditioning
                record.state = "pruned-before"
                raise optuna.TrialPruned()
        # The conditioning seed (options["seed"]) and draw: the tuned scales and bias shifts belong
        # to those weights, and every search trains the same weights for the same spec.
        model = report.build_model(spec) if report is not None else nas.build_model(spec, seed=args.seed)
        trainer = Trainer(
            model,
            data,
            optimizer=optimizer,
            generator=torch.Generator().manual_seed(args.seed + trial.number),
            device=args.train_device,
        )
        accuracy = 0.0
        for epoch in range(args.epochs):
            accuracy = trainer.epoch()
            record.epochs, record.train_seconds, record.accuracy = trainer.epochs, trainer.seconds, accuracy
            trial.report(accuracy, epoch)
            if trial.should_prune():
                record.state = "pruned-during"
                raise optuna.TrialPruned()
        return accuracy

    return _Run(study, objective, result, _progress(args, name, position), args)


def _fill_conditioning(
    record: TrialRecord, client: Any, candidate_id: Any, report: ConditioningReport | None = None
) -> None:
    """Copy the score, verdict and the worker's seconds of a candidate into the record."""
    if candidate_id is None:
        return
    candidate = client.get(str(candidate_id))
    report = report or candidate.report
    record.candidate_id = candidate.id
    record.score, record.verdict = candidate.score, candidate.verdict
    record.reason = report.reasons[0] if report is not None and report.reasons else None
    timings = candidate.data.get("timings") or {}
    seconds = timings.get("run_seconds")
    if seconds is None:
        seconds = report.tuning.seconds if report is not None else 0.0
    record.condition_seconds = float(seconds)


def _score_ungated(searches: list[SearchResult]) -> list[dict[str, Any]]:
    """Conditioning score against the accuracy a *plain* training reached, at no extra cost:
    the ungated search's trials whose architecture a gated search also proposed (the
    sampler's random start-up trials coincide across the searches, same seed) and had
    conditioned. ``gated_accuracy``: what the same architecture reached when a gated search
    trained it to the end (from the tuned init, at the recommended rate), else None."""
    scored: dict[str, TrialRecord] = {}
    for search in searches:
        if search.name not in ("preflight gate", "gate + median pruner"):
            continue
        for t in search.trials:
            key = json.dumps(t.params, sort_keys=True)
            if t.candidate_id is not None and (key not in scored or scored[key].state != "complete"):
                scored[key] = t  # a complete training over one a pruner stopped
    points = []
    for trial in searches[0].trials:
        twin = scored.get(json.dumps(trial.params, sort_keys=True))
        if twin is None or trial.accuracy is None:
            continue
        points.append(
            {
                "number": trial.number,
                "name": trial.name,
                "accuracy": trial.accuracy,
                "score": twin.score,
                "verdict": twin.verdict,
                "reason": twin.reason,
                "gated_accuracy": twin.accuracy if twin.state == "complete" else None,
            }
        )
    return points


def _bnp_factory() -> Any:
    """SGD under the engine's BNP gradient preconditioner, imported only when asked for."""
    import torch

    from worker.engine.bnp import BNP

    def factory(model: Any) -> Any:
        return BNP(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model)

    return factory


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_postfix_str(self, text: str, refresh: bool = True) -> None: ...
    def close(self) -> None: ...


def _progress(args: argparse.Namespace, name: str, position: int) -> Any:
    if args.no_progress:
        return _NoBar()
    from tqdm import tqdm

    width = max(len(n) for n in SEARCHES)
    return tqdm(total=args.trials, desc=f"{name:>{width}}", unit="trial", position=position, dynamic_ncols=True)


def _table(results: dict[str, Any]) -> str:
    rows = [
        (
            "search",
            "trials",
            "pruned before training",
            "pruned during",
            "epochs trained",
            "compute (s)",
            "best val. accuracy",
            "best candidate",
        )
    ]
    for r in results["searches"]:
        best = r.best
        rows.append(
            (
                r.name,
                str(len(r.trials)),
                str(r.pruned_before),
                str(r.pruned_during),
                str(r.epochs),
                f"{r.compute:.1f}",
                f"{best.accuracy:.4f}" if best and best.accuracy is not None else "-",
                best.name if best else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


DIVERGED = 0.2  # a validation accuracy at or below this on 10 classes: the run diverged or learned nothing
NEAR_BEST = 0.05  # a pruned candidate this close to the best accuracy was a false prune


def _accuracy(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} (diverged)" if value <= DIVERGED else f"{value:.3f}"


def _what_happened(results: dict[str, Any]) -> str:
    """The demo's findings in words: what the gate pruned and why, its verdicts checked against the
    same architectures trained without it (false prunes, false keeps), and whether it paid."""
    searches = {s.name: s for s in results["searches"]}
    lines = ["What happened:"]
    gated = searches.get("preflight gate")
    if gated is not None:
        pruned = [t for t in gated.trials if t.state == "pruned-before"]
        lines.append(
            f"- The gate pruned {len(pruned)} of {len(gated.trials)} candidates before training"
            + (":" if pruned else ".")
        )
        lines += [f"  - {t.name} (score {t.score:.3g}): {t.reason or 'no reason given'}" for t in pruned[:8]]
        if len(pruned) > 8:
            lines.append(f"  - ... and {len(pruned) - 8} more (results.json)")
    points = results.get("score_vs_accuracy") or []
    if points:
        best = max(p["accuracy"] for p in points)
        false_prunes = [p for p in points if p["verdict"] == "prune" and p["accuracy"] >= best - NEAR_BEST]
        failed_keeps = [p for p in points if p["verdict"] == "keep" and p["accuracy"] <= DIVERGED]
        rescued = [p for p in failed_keeps if (p.get("gated_accuracy") or 0.0) > DIVERGED]
        false_keeps = [p for p in failed_keeps if p not in rescued]
        lines.append(
            f"- Checked against the same {len(points)} architectures trained without the gate: "
            f"{len(false_prunes)} false prune(s) (pruned, yet within {NEAR_BEST} of the best {best:.3f}), "
            f"{len(false_keeps)} false keep(s) (kept, yet diverged or learned nothing, and not trained better "
            "by the gated search)"
            + (
                f"; {len(rescued)} kept that failed without the gate and trained from the tuned init at the "
                "recommended rate."
                if rescued
                else "."
            )
        )
        lines += [f"  - false prune: {p['name']}, trained to {_accuracy(p['accuracy'])}" for p in false_prunes[:5]]
        lines += [f"  - false keep: {p['name']}, trained to {_accuracy(p['accuracy'])}" for p in false_keeps[:5]]
        lines += [
            f"  - trained with the gate: {p['name']}, {_accuracy(p['accuracy'])} without it, "
            f"{_accuracy(p['gated_accuracy'])} with it"
            for p in rescued[:5]
        ]
    plain = searches.get("no gate")
    if gated is not None and plain is not None and plain.best is not None and gated.best is not None:
        ratio = gated.compute / plain.compute if plain.compute else math.nan
        verdict = "cost more than it saved" if ratio > 1 else "saved compute"
        lines.append(
            f"- Finding: the gate {verdict}: {ratio:.2f}x the ungated search's compute for a best accuracy of "
            f"{_accuracy(gated.best.accuracy)} against {_accuracy(plain.best.accuracy)}."
        )
    diverged = sum(t.accuracy is not None and t.accuracy <= DIVERGED for s in searches.values() for t in s.trials)
    lines.append(f"- Runs that diverged or learned nothing (accuracy <= {DIVERGED}): {diverged}.")
    return "\n".join(lines)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)

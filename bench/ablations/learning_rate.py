"""Does the probe's best rate say at which rate to train? The report's recommended learning rate.

The trainability probe (``worker.engine.probe``) runs a few SGD steps (momentum 0.9) at each of its
rates from the tuned weights; the rate that reached the lowest loss is the report's
``recommended_lr``. Benchmark v2's protocol S trains the same tuned network with the same optimizer
at every rate of {0.1, 0.03, 0.01} and keeps the best (the grid a tuner would search). Trained at
the recommended rate alone, a search would spend a third of that grid's training: what does it
lose, against the grid's best and against the simplest alternative, one fixed rate for every
candidate (the one that did best on the development set)?

``python -m bench.ablations.learning_rate`` reruns the shipped probe on every candidate's cached
tuned network (benchmark v2's Preflight stage: its scales, draw and seed) and reads the trained
runs of protocol S (and, for comparison, W, whose AdamW rates the SGD probe does not speak to).
The fixed rate and any choice here are made on the development set (seed 0); the frozen test set
(seeds 0 to 2) is only reported. Results are cached under ``bench/results/learning_rate/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.pipeline.candidates import Candidate
from bench.pipeline.run import imap_spawned, read_json, write_json
from bench.v2.analysis import group_of, read_stage
from bench.v2.candidates import dev_set, test_set
from bench.v2.protocols import PROTOCOLS
from bench.v2.stages import BATCH, Stage, dataset, tuned_model
from bench.v2.stats import Interval, bootstrap, paired_difference
from nas.options import ConditionOptions
from nas.report import RECOMMENDED_LR_FACTOR

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "learning_rate"
CACHE = ROOT / "bench" / "results" / "v2"
SETS = {"dev": (dev_set, (0,)), "test": (test_set, (0, 1, 2))}


def _probe_one(args: tuple[dict[str, Any], int]) -> str:
    """The shipped probe on one candidate's tuned network at one seed (cached)."""
    from worker.engine import seeds
    from worker.engine.probe import run_probe

    cand, seed = args
    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path = OUT / f"s{seed}" / f"{candidate.id}.json"
    pre = read_stage(CACHE, Stage("preflight", seed), candidate) or {}
    tuned = _tuned_fingerprint(pre)
    if path.exists() and read_json(path).get("tuned") == tuned:
        return f"{candidate.id} s{seed} cached"
    if pre.get("scales") is None:
        write_json(path, {"error": "no scales", "tuned": tuned})
        return f"{candidate.id} s{seed} no scales"
    x, y = dataset(candidate.dataset).batch(BATCH)
    model = tuned_model(candidate, seed, pre)
    shipped = ConditionOptions()
    probe = run_probe(
        model,
        x,
        y,
        steps=shipped.probe_steps,
        lrs=shipped.probe_lrs,
        momentum=shipped.probe_momentum,
        seed=seed + seeds.PROBE,
    )
    write_json(path, {"best_lr": probe.best_lr, "loss": probe.loss, "tuned": tuned})
    return f"{candidate.id} s{seed} {probe.best_lr}"


def _tuned_fingerprint(pre: dict[str, Any]) -> str:
    """What a cached probe depends on (the tuned scales, draw and bias shifts of benchmark v2's
    Preflight stage, and the shipped probe's settings): a cached probe of anything else is rerun."""
    shipped = ConditionOptions()
    probe = [shipped.probe_steps, list(shipped.probe_lrs), shipped.probe_momentum]
    parts: list[Any] = [pre.get("scales"), pre.get("draw"), probe]
    parts += [pre["bias_shifts"]] if pre.get("bias_shifts") else []  # a network before the centering keeps its key
    blob = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _accuracies(run: dict[str, Any], chance: float) -> np.ndarray:
    """Test accuracy at each rate; a diverged or missing figure counts as chance."""
    return np.array([a if a is not None and math.isfinite(a) else chance for a in run["test_accuracy"]])


def _rows(set_name: str) -> list[dict[str, Any]]:
    """Per (candidate, seed): the probe's rate and protocol S's accuracy at every rate."""
    make, seeds = SETS[set_name]
    rows = []
    for candidate in make():
        for seed in seeds:
            probe_path = OUT / f"s{seed}" / f"{candidate.id}.json"
            trained = read_stage(CACHE, Stage("train", seed, "sgd", "tuned"), candidate)
            if trained is None or not probe_path.exists():
                continue
            probe, run = read_json(probe_path), trained["run"]
            classes = round(math.exp(trained["chance"]))  # chance is ln C
            rows.append(
                {
                    "id": candidate.id,
                    "group": group_of(candidate.dataset),
                    "seed": seed,
                    "best_lr": probe.get("best_lr"),
                    "accuracy": _accuracies(run, 1.0 / classes),
                    "best": int(run["best"]),
                }
            )
    return rows


def _at(rows: list[dict[str, Any]], pick: Any) -> np.ndarray:
    """Per candidate, its test accuracy at the rate ``pick(row)`` chooses (an index into S's
    rates), averaged over its seeds: the candidates, not the (candidate, seed) rows, are what the
    intervals resample, since a candidate's seeds are not independent draws."""
    return _per_candidate(rows, [row["accuracy"][pick(row)] for row in rows])


def _per_candidate(rows: list[dict[str, Any]], values: list[float]) -> np.ndarray:
    by_id: dict[str, list[float]] = {}
    for row, value in zip(rows, values, strict=True):
        by_id.setdefault(row["id"], []).append(float(value))
    return np.array([np.mean(v) for v in by_id.values()])


def _nearest(rates: tuple[float, ...], lr: float) -> int:
    return int(np.argmin([abs(math.log(rate / lr)) for rate in rates]))


def _rules(rates: tuple[float, ...]) -> dict[str, Any]:
    """The ways to pick one rate per candidate, as functions of a row: an index into S's rates.
    A probe rule falls back to 0.03 where no rate had a finite probe loss."""

    def probe(factor: float) -> Any:
        def pick(row: dict[str, Any]) -> int:
            lr = row["best_lr"]
            return _nearest(rates, lr * factor) if lr else _nearest(rates, 0.03)

        return pick

    return {
        "the probe's best rate": probe(1.0),
        f"the probe's best rate x {RECOMMENDED_LR_FACTOR:g} (the report's recommended_lr)": probe(
            RECOMMENDED_LR_FACTOR
        ),
        **{f"always {rate:g}": (lambda _row, i=i: i) for i, rate in enumerate(rates)},
    }


def _mean_of(values: np.ndarray) -> Any:
    """The statistic a bootstrap resamples: the mean of ``values`` over the drawn candidates."""
    return lambda index: float(values[index].mean())


def _fmt(interval: Interval, signed: bool = False) -> str:
    f = "+.3f" if signed else ".3f"
    return f"{interval.point:{f}} [{interval.low:{f}}, {interval.high:{f}}]"


def report() -> str:
    """Mean test accuracy under S when each candidate trains at the one rate a rule picks, on the
    development set (where the rules are compared) and on the frozen test set (reported)."""
    rates = PROTOCOLS["sgd"].lrs
    rules = _rules(rates)
    sets = {"dev": _rows("dev"), "test": _rows("test")}
    dev_mean = {name: float(_at(sets["dev"], pick).mean()) for name, pick in rules.items()}
    fixed = max((name for name in rules if name.startswith("always")), key=dev_mean.__getitem__)
    recommended = next(name for name in rules if "recommended_lr" in name)
    lines = [
        "| rule | dev: mean test accuracy | test: mean test accuracy |",
        "|---|---|---|",
    ]
    for name, pick in [*rules.items(), ("the grid's best (three trainings)", lambda row: row["best"])]:
        figures = []
        for rows in sets.values():
            accuracy = _at(rows, pick)
            figures.append(_fmt(bootstrap(_mean_of(accuracy), len(accuracy))))
        lines.append(f"| {name} | {' | '.join(figures)} |")
    lines += [
        "",
        f"Candidates: dev {len({r['id'] for r in sets['dev']})} (seed 0), test {len({r['id'] for r in sets['test']})} "
        "(seeds 0 to 2, averaged per candidate; the intervals resample candidates). The best fixed rate on the "
        f"development set: {fixed.removeprefix('always ')}.",
        "",
        "| set | group | n | recommended_lr is S's best rate | recommended_lr - best fixed rate (dev's) "
        "| recommended_lr - the grid's best |",
        "|---|---|---|---|---|---|",
    ]
    for set_name, rows_all in sets.items():
        for group in [*sorted({r["group"] for r in rows_all}), "all"]:
            rows = [r for r in rows_all if group in ("all", r["group"])]
            ours, one, grid = (_at(rows, rule) for rule in (rules[recommended], rules[fixed], lambda r: r["best"]))
            agree = _per_candidate(rows, [float(rules[recommended](r) == r["best"]) for r in rows])
            n = len(agree)
            if n < 5:
                continue
            versus_fixed = paired_difference(_mean_of(ours), _mean_of(one), n)
            versus_grid = paired_difference(_mean_of(ours), _mean_of(grid), n)
            lines.append(
                f"| {set_name} | {group} | {n} | {_fmt(bootstrap(_mean_of(agree), n))} | "
                f"{_fmt(versus_fixed, signed=True)} | {_fmt(versus_grid, signed=True)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ablations.learning_rate", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.report_only:
        tasks = [(c.to_json(), seed) for make, seeds in SETS.values() for c in make() for seed in seeds]
        for i, message in enumerate(imap_spawned(_probe_one, tasks, args.jobs, nice=5)):
            if (i + 1) % 50 == 0:
                print(f"{i + 1}/{len(tasks)} {message}", flush=True)
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

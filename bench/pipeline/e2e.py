"""End to end: the demo's search with the gate, without it, and with MedianPruner.

Runs ``preflight demo`` (``service/cli/demo_commands.py``: an Optuna TPE search over MLPs and
residual MLPs on digits, three searches with the same sampler seed) once per seed in a
subprocess, and reads its ``results.json``. For each search it measures the compute
(training seconds plus, for the gated search, the worker's conditioning seconds, in trial
order) spent until a trial first reaches the best validation accuracy the ungated search
finds with the same seed; the target is a gated / ungated ratio of at most 0.5.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "compute_to_reach",
    "e2e",
    "epochs_to_reach",
    "oracle_gate_ratio",
    "oracle_sentence",
    "summarize_seed",
    "survivors_score_spearman",
]

SEEDS = (0, 1, 2, 3, 4)
TRIALS = 20  # the demo's defaults (`preflight demo`, `make demo`)
EPOCHS = 20
# A trial whose training ended below this validation accuracy did not train (chance: 0.1).
FAILED_TO_TRAIN = 0.5


def compute_to_reach(trials: list[dict[str, Any]], target: float) -> float:
    """Compute spent, in trial order, up to and including the first trial whose accuracy
    reaches ``target``; ``inf`` if none does.

    >>> compute_to_reach([{"accuracy": 0.5, "train_seconds": 2.0, "condition_seconds": 1.0},
    ...                   {"accuracy": 0.9, "train_seconds": 3.0, "condition_seconds": 0.0}], 0.9)
    6.0
    """
    spent = 0.0
    for t in trials:
        spent += float(t.get("train_seconds") or 0.0) + float(t.get("condition_seconds") or 0.0)
        if t.get("accuracy") is not None and t["accuracy"] >= target:
            return spent
    return math.inf


def epochs_to_reach(trials: list[dict[str, Any]], target: float) -> float:
    """Training epochs spent, in trial order, until a trial first reaches ``target``
    (conditioning not counted: a load-independent view of the training compute)."""
    spent = 0
    for t in trials:
        spent += int(t.get("epochs") or 0)
        if t.get("accuracy") is not None and t["accuracy"] >= target:
            return float(spent)
    return math.inf


def oracle_gate_ratio(trials: list[dict[str, Any]], target: float, floor: float = FAILED_TO_TRAIN) -> float:
    """What a perfect gate that costs nothing would get on these very trials: it skips every
    trial whose training ended below ``floor`` (the ones that did not train), the others
    train as they did. Its compute to ``target`` over the trials' own: the most that pruning
    before training can save while the sampler proposes the same candidates (``inf`` when
    no trial reaches ``target``).

    >>> oracle_gate_ratio([{"accuracy": 0.1, "train_seconds": 3.0},
    ...                    {"accuracy": 0.9, "train_seconds": 1.0}], 0.9)
    0.25
    """
    spent = kept = 0.0
    for t in trials:
        seconds = float(t.get("train_seconds") or 0.0)
        spent += seconds
        accuracy = t.get("accuracy")
        if accuracy is not None and accuracy >= floor:
            kept += seconds
        if accuracy is not None and accuracy >= target:
            return kept / spent if spent > 0 else math.nan
    return math.inf


def oracle_sentence(result: dict[str, Any]) -> str:
    """The bound on flagging of an ``e2e`` result in words, per seed and median."""
    per_seed = ", ".join(f"{f['oracle_gate_ratio']:.2f}" for f in result["seeds"].values())
    return (
        "A perfect gate that cost nothing and skipped every candidate whose training failed "
        f"(validation accuracy below {FAILED_TO_TRAIN}) would, on the ungated search's own "
        f"proposals, reach its best at {per_seed} x its compute (seeds in order; median "
        f"{result['median_oracle_gate_ratio']:.2f}; `bench.pipeline.e2e.oracle_gate_ratio`)"
    )


def summarize_seed(results: dict[str, Any]) -> dict[str, Any]:
    searches = {s["name"]: s["trials"] for s in results["searches"]}
    ungated = searches["no gate"]
    best = max((t["accuracy"] for t in ungated if t.get("accuracy") is not None), default=math.nan)
    base = compute_to_reach(ungated, best)
    out: dict[str, Any] = {"ungated_best_accuracy": best, "oracle_gate_ratio": oracle_gate_ratio(ungated, best)}
    for name, trials in searches.items():
        spent = compute_to_reach(trials, best)
        accs = [t["accuracy"] for t in trials if t.get("accuracy") is not None]
        out[name] = {
            "best_accuracy": max(accs, default=math.nan),
            "compute_to_ungated_best": spent,
            "ratio_to_ungated": spent / base if base > 0 else math.nan,
            "epochs_to_ungated_best": epochs_to_reach(trials, best),
            "epochs_ratio_to_ungated": epochs_to_reach(trials, best) / epochs_to_reach(ungated, best),
            "total_compute": sum(
                float(t.get("train_seconds") or 0) + float(t.get("condition_seconds") or 0) for t in trials
            ),
            "conditioning_seconds": sum(float(t.get("condition_seconds") or 0) for t in trials),
            "training_seconds": sum(float(t.get("train_seconds") or 0) for t in trials),
            "pruned_before": sum(t["state"] == "pruned-before" for t in trials),
            "pruned_during": sum(t["state"] == "pruned-during" for t in trials),
        }
    return out


def survivors_score_spearman(runs: list[dict[str, Any]]) -> dict[str, float]:
    """How well the score ranks the candidates that do train: its Spearman with the accuracy
    the gated search's survivors reached (those that trained, pooled over the demo's runs)."""
    from bench.pipeline.metrics import spearman

    scores, accuracies = [], []
    for results in runs:
        for search in results["searches"]:
            if search["name"] != "preflight gate":
                continue
            for t in search["trials"]:
                trained = t["state"] == "complete" and (t.get("accuracy") or 0.0) >= FAILED_TO_TRAIN
                if trained and t.get("score") is not None:
                    scores.append(float(t["score"]))
                    accuracies.append(float(t["accuracy"]))
    return {"n": len(scores), "spearman": spearman(scores, accuracies) if len(scores) > 2 else math.nan}


def e2e(
    out: Path, seeds: tuple[int, ...] = SEEDS, trials: int = TRIALS, epochs: int = EPOCHS, log=print
) -> dict[str, Any]:
    """Run (or reuse) the demo for each seed; per-seed figures and the median ratios. A seed's
    cached run is reused only when it had the same trials, epochs and engine (its source hash)."""
    from bench.pipeline.run import engine_version

    per_seed: dict[int, dict[str, Any]] = {}
    runs: list[dict[str, Any]] = []
    failures: dict[int, str] = {}
    for seed in seeds:
        folder = out / "e2e" / f"seed{seed}"
        results = folder / "results.json"
        engine = folder / "engine_version"
        cached = (
            results.exists()
            and {k: json.loads(results.read_text())["args"].get(k) for k in ("trials", "epochs")}
            == {"trials": trials, "epochs": epochs}
            and engine.exists()
            and engine.read_text().strip() == engine_version()
        )
        if not cached:
            log(f"e2e: demo seed {seed} ({trials} trials, {epochs} epochs) ...")
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "service.cli",
                    "demo",
                    "--trials",
                    str(trials),
                    "--epochs",
                    str(epochs),
                    "--seed",
                    str(seed),
                    "--out",
                    str(folder),
                    "--no-plots",
                    "--no-progress",
                    "--device",
                    "cpu",
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                failures[seed] = (done.stdout + done.stderr)[-800:]
                continue
            engine.write_text(engine_version() + "\n")
        runs.append(json.loads(results.read_text()))
        per_seed[seed] = summarize_seed(runs[-1])
    if not per_seed:
        return {
            "seeds": {},
            "median_ratio": {},
            "failures": failures,
            "trials": trials,
            "epochs": epochs,
        }
    first = next(iter(per_seed.values()))
    names = [n for n in first if isinstance(first[n], dict)]
    median = {n: statistics.median(f[n]["ratio_to_ungated"] for f in per_seed.values()) for n in names}
    return {
        "seeds": per_seed,
        "median_ratio": median,
        "median_oracle_gate_ratio": statistics.median(f["oracle_gate_ratio"] for f in per_seed.values()),
        "survivors_score_spearman": survivors_score_spearman(runs),
        "failures": failures,
        "trials": trials,
        "epochs": epochs,
    }

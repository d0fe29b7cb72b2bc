"""The search's figures from its trial records (``searches.TrialRecord`` as JSON).

A search returns its *incumbent*: the complete trial with the best validation accuracy so far;
what it found is that trial's test accuracy. Compute is spent in trial order (training seconds
plus conditioning seconds). Per seed: the compute each search spends until its incumbent reaches
the ungated search's final test accuracy (over the ungated search's own), the incumbents of a
search and the ungated one at equal compute, and the same ratio for a *perfect free gate* that
skips, on the ungated search's own proposals, every trial that did not train. Over seeds:
medians and means with bootstrap intervals (resampling seeds).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from bench.v2.stats import Interval, bootstrap

__all__ = [
    "FAILED_TO_TRAIN",
    "NEVER",
    "best_at",
    "compute_to_reach",
    "figures",
    "in_macs",
    "incumbent_path",
    "perfect_gate",
    "seed_figures",
]

Trials = list[dict[str, Any]]

# A full training that ends below this validation accuracy did not train (chance is 0.1).
FAILED_TO_TRAIN = 0.5
NEVER = 1e9  # a compute ratio standing for "never reached", above any real one
CHANCE = 0.1  # ten classes: what a search that has finished no trial yet has found
WITHIN = 0.01  # the supplementary target: the ungated best less one point of accuracy
NEAR_BEST = 0.05  # a flagged network this close to the ungated best validation accuracy was a false flag


def _compute(trial: dict[str, Any]) -> float:
    return float(trial.get("train_seconds") or 0.0) + float(trial.get("condition_seconds") or 0.0)


def incumbent_path(trials: Trials) -> list[tuple[float, float]]:
    """``(compute spent, incumbent's test accuracy)`` after each trial (nan before a first complete one).

    >>> incumbent_path([{"state": "complete", "final_val": 0.5, "test": 0.4, "train_seconds": 2.0},
    ...                 {"state": "complete", "final_val": 0.3, "test": 0.9, "train_seconds": 1.0}])
    [(2.0, 0.4), (3.0, 0.4)]
    """
    spent, best_val, best_test, path = 0.0, -math.inf, math.nan, []
    for trial in trials:
        spent += _compute(trial)
        if trial["state"] == "complete" and trial.get("final_val") is not None and trial["final_val"] > best_val:
            best_val, best_test = float(trial["final_val"]), float(trial["test"])
        path.append((spent, best_test))
    return path


def compute_to_reach(trials: Trials, target: float) -> float:
    """Compute spent until the incumbent's test accuracy first reaches ``target`` (inf: never)."""
    for spent, test in incumbent_path(trials):
        if not math.isnan(test) and test >= target - 1e-12:
            return spent
    return math.inf


def best_at(trials: Trials, budget: float) -> float:
    """The incumbent's test accuracy after the last trial that ended within ``budget`` (nan: none)."""
    found = math.nan
    for spent, test in incumbent_path(trials):
        if spent > budget + 1e-9:
            break
        found = test
    return found


def _found(trials: Trials, budget: float) -> float:
    found = best_at(trials, budget)
    return CHANCE if math.isnan(found) else found


def in_macs(searches: dict[str, Trials]) -> dict[str, Trials]:
    """The trials with their seconds replaced by billions of multiply-accumulates, a measure no load
    on the machine can stretch: a training step is 3 forward passes of its minibatch, each epoch adds
    a forward pass of the validation images, a counted conditioning step is a training step at the
    conditioning batch (``report.tuning.budget``)."""
    import optuna

    from bench.fashion_search.evaluate import BATCH, CONDITION_IMAGES, DATA
    from bench.fashion_search.space import search_space
    from nas.summary import summarize

    macs: dict[str, float] = {}

    def forward(params: dict[str, Any]) -> float:
        key = repr(sorted(params.items()))
        if key not in macs:
            macs[key] = summarize(search_space(optuna.trial.FixedTrial(params))[0]).macs / 1e9
        return macs[key]

    val_images = DATA["val_per_class"] * 10
    steps_per_epoch = math.ceil(DATA["train_per_class"] * 10 / BATCH)
    out: dict[str, Trials] = {}
    for name, trials in searches.items():
        out[name] = []
        for t in trials:
            per_sample = forward(t["params"])
            steps = int(t.get("train_steps") or 0)
            # validated epochs: those that ended without a non-finite loss (a diverged epoch and the
            # ones after it train and validate nothing, nas.training.Trainer)
            validated = min(int(t.get("epochs") or 0), steps // steps_per_epoch)
            train = (3 * BATCH * steps + val_images * validated) * per_sample
            condition = 3 * CONDITION_IMAGES * float(t.get("condition_steps") or 0.0) * per_sample
            out[name].append({**t, "train_seconds": train, "condition_seconds": condition})
    return out


def _failed(trial: dict[str, Any]) -> bool:
    return trial["state"] == "complete" and (trial.get("final_val") or 0.0) < FAILED_TO_TRAIN


def perfect_gate(trials: Trials) -> Trials:
    """The ungated search's trials as a perfect, free gate would run them: every trial that did not
    train (validation accuracy below ``FAILED_TO_TRAIN``) skipped at no cost, the others as they ran."""
    return [
        {**t, "state": "pruned-before", "train_seconds": 0.0, "condition_seconds": 0.0} if _failed(t) else t
        for t in trials
    ]


def _final(trials: Trials) -> float:
    path = incumbent_path(trials)
    return path[-1][1] if path else math.nan


def _flagging(ungated: Trials) -> dict[str, Any]:
    """The gate's verdicts on the ungated search's proposals (computed, not charged) against what
    their full training did."""
    best_val = max((t["final_val"] for t in ungated if t.get("final_val") is not None), default=math.nan)
    flagged = [t.get("verdict") == "prune" for t in ungated]
    failed = [_failed(t) for t in ungated]
    hits = sum(f and b for f, b in zip(flagged, failed, strict=True))
    return {
        "proposals": len(ungated),
        "failed": sum(failed),
        "flagged": sum(flagged),
        "precision": hits / sum(flagged) if sum(flagged) else math.nan,
        "recall": hits / sum(failed) if sum(failed) else math.nan,
        "false_flags_near_best": [
            t["name"]
            for t, f in zip(ungated, flagged, strict=True)
            if f and (t.get("final_val") or 0.0) >= best_val - NEAR_BEST
        ],
    }


def twins(ungated: Trials, gated: Trials) -> list[dict[str, Any]]:
    """The networks both searches proposed at the same trial number (TPE's random start-up trials
    coincide) and both trained fully: the spec's init at ``ungated``'s rate against the tuned init at
    the recommended rate."""
    pairs = []
    for plain, tuned in zip(ungated, gated, strict=False):
        if plain["params"] == tuned["params"] and plain["state"] == tuned["state"] == "complete":
            pairs.append(
                {
                    "name": plain["name"],
                    "spec": plain["test"],
                    "tuned": tuned["test"],
                    "lr": plain["lr"],
                    "recommended_lr": tuned["lr"],
                }
            )
    return pairs


def seed_figures(searches: dict[str, Trials]) -> dict[str, Any]:
    """One seed's figures for every search, against the ungated search (``"no gate"``)."""
    ungated = searches["no gate"]
    target = _final(ungated)
    base = compute_to_reach(ungated, target)
    total_ungated = sum(_compute(t) for t in ungated)
    # when even the ungated best did not train, a flagging gate has nothing to skip that is not the best
    perfect = compute_to_reach(perfect_gate(ungated), target) / base if target >= FAILED_TO_TRAIN else 1.0
    out: dict[str, Any] = {
        "target": target,
        "perfect_ratio": perfect,
        "flagging": _flagging(ungated),
        # the verdict against the training it is about: the gate's way (tuned init, recommended rate)
        "flagging_tuned": _flagging(searches["tuned, no gate"]) if "tuned, no gate" in searches else None,
        # against the search that trains every proposal the gate's way (it skips none)
        "twins": twins(ungated, searches.get("tuned, no gate", [])),
        "twins_fixed_rate": twins(searches.get("no gate, rate 0.03", []), searches.get("tuned, no gate", [])),
        "searches": {},
    }
    near_base = compute_to_reach(ungated, target - WITHIN)
    for name, trials in searches.items():
        total = sum(_compute(t) for t in trials)
        budget = min(total, total_ungated)
        ratio = compute_to_reach(trials, target) / base
        saving = 1.0 - perfect
        out["searches"][name] = {
            "ratio": ratio,
            "ratio_within": compute_to_reach(trials, target - WITHIN) / near_base,
            "total": total,
            "total_ratio": total / total_ungated,
            "best": _final(trials),
            "equal_compute_difference": _found(trials, budget) - _found(ungated, budget),
            "realised": _realised(ratio, saving),
            "condition_share": sum(float(t.get("condition_seconds") or 0.0) for t in trials) / total if total else 0.0,
            "complete": sum(t["state"] == "complete" for t in trials),
            "failed": sum(_failed(t) for t in trials),
            "train_seconds_complete": sum(float(t["train_seconds"]) for t in trials if t["state"] == "complete"),
            "pruned_before": sum(t["state"] == "pruned-before" for t in trials),
            "pruned_during": sum(t["state"] == "pruned-during" for t in trials),
            "path": incumbent_path(trials),
        }
    return out


def _realised(ratio: float, saving: float) -> float:
    """The share of a perfect gate's saving a search realised: ``(1 - ratio) / saving``. A search
    that never reached the target realised none of it, and less than any that did at whatever
    cost: ``-inf`` (``-NEVER`` once a median is taken), not a seed left out (nan only where a
    perfect gate saves nothing, so that no share is defined)."""
    if saving <= 0:
        return math.nan
    return (1.0 - ratio) / saving if math.isfinite(ratio) else -math.inf


def _over_seeds(values: list[float], statistic: str) -> Interval:
    """A median or mean over seeds with its bootstrap interval. A seed that never reached a target (inf)
    stays in as ``NEVER``, a finite stand-in above any ratio, so that a resample whose median is
    "never" counts as such instead of being dropped (the bootstrap drops non-finite resamples); a
    seed where the figure is undefined (nan) is left out of the median. The median is taken with the
    infinities in place, so that the median of an even count whose upper middle seed never reached
    it is "never" too (averaging the stand-in with a ratio would give a meaningless finite number)."""
    array = np.asarray(values, dtype=np.float64)
    if statistic == "median":  # each end a resample's median, never one interpolated with the stand-in
        return bootstrap(lambda i: _median_or_never(array[i]), len(array), method="inverted_cdf")
    return bootstrap(lambda i: float(np.nanmean(array[i])), len(array))


def _median_or_never(values: np.ndarray) -> float:
    if np.isnan(values).all():
        return math.nan
    median = float(np.nanmedian(values))  # an even count's middle pair with an infinity is that infinity
    if math.isinf(median):
        return NEVER if median > 0 else -NEVER
    return median


def _unskipped(name: str, present: Any) -> str:
    """The search trained as ``name`` is, without skipping (itself when it skips nothing)."""
    from bench.fashion_search.searches import SEARCHES

    return "tuned, no gate" if SEARCHES[name].conditioned and "tuned, no gate" in present else "no gate"


def figures(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Medians (ratios) and means (differences) over seeds, with bootstrap intervals over seeds."""
    if not per_seed:
        return {"seeds": 0}
    from bench.fashion_search.searches import SEARCHES

    names = [n for n in SEARCHES if n in next(iter(per_seed.values()))["searches"]]
    seeds = sorted(per_seed)
    out: dict[str, Any] = {
        "seeds": len(seeds),
        "perfect_ratio": _over_seeds([per_seed[s]["perfect_ratio"] for s in seeds], "median"),
        "searches": {},
    }
    for name in names:
        rows = [per_seed[s]["searches"][name] for s in seeds]
        out["searches"][name] = {
            "ratio": _over_seeds([r["ratio"] for r in rows], "median"),
            "ratio_within": _over_seeds([r["ratio_within"] for r in rows], "median"),
            "total_ratio": _over_seeds([r["total_ratio"] for r in rows], "median"),
            "equal_compute_difference": _over_seeds([r["equal_compute_difference"] for r in rows], "mean"),
            "best": _over_seeds([r["best"] for r in rows], "mean"),
            "realised": _over_seeds([r["realised"] for r in rows], "median"),
            # the skipping alone: compute to the ungated best over that of the search trained the same way
            # without skipping ("tuned, no gate" for the gated searches, "no gate" for the others)
            "skipping_ratio": _over_seeds(
                [
                    r["ratio"] / per_seed[s]["searches"][_unskipped(name, names)]["ratio"]
                    for r, s in zip(rows, seeds, strict=True)
                ],
                "median",
            ),
            "pruned_before": sum(r["pruned_before"] for r in rows),
            "pruned_during": sum(r["pruned_during"] for r in rows),
            "condition_share": statistics.mean(r["condition_share"] for r in rows),
        }
    return out

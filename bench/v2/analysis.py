"""Benchmark v2's figures from the cache: ground truths, predictors with their costs, targets.

Ground truth of a candidate under protocol P from initialization I (A: the spec's init, B:
Preflight's tuned init), over the seeds computed so far: test accuracy = the mean over seeds of
the best rate's test accuracy; training loss = the median over seeds of the best final training
loss (a diverged seed counts as ``inf``); *untrainable* = untrainable on at least half the seeds.

Every predictor follows higher = better and carries its cost in training steps of the candidate
at batch 64: *counted* for Preflight and the short-training baselines (the passes they make),
*timed* (seconds / one training step timed in the same process) for the zero-cost proxies.
Rankings are computed within a dataset only (accuracies of different datasets are not comparable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.pipeline.candidates import Candidate
from bench.pipeline.metrics import kendall, precision_at_recall, spearman
from bench.pipeline.run import read_json
from bench.v2.stages import INIT_PEERS, Stage, cached
from bench.v2.stats import Interval, bootstrap, paired_difference, spearman_rows

__all__ = ["GROUPS", "Row", "figures", "load_rows", "read_stage", "rescored", "truth"]

GROUPS = {"fashion_mnist": "Fashion-MNIST", "digits": "digits (8x8)", "breast_cancer": "breast cancer"}
TRUTHS = {"A": "spec", "B": "tuned"}
RECALL = 0.8
MIN_FOR_INTERVALS = 10


def group_of(dataset: str) -> str:
    return next(g for g in GROUPS if dataset.startswith(g))


@dataclass
class Row:
    candidate: Candidate
    set: str
    chance: float = math.nan
    preflight: dict[str, Any] | None = None
    proxies: dict[str, Any] | None = None
    baselines: dict[str, Any] | None = None
    runs: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)  # (protocol, init) -> per seed

    @property
    def group(self) -> str:
        return group_of(self.candidate.dataset)

    @property
    def family(self) -> str:
        return self.candidate.family


def read_stage(
    out: Any, stage: Stage, candidate: Candidate, scale: float = 1.0, any_engine: bool = False
) -> dict[str, Any] | None:
    """One cached stage's result for ``candidate``, or None when it is missing or stale (its
    fingerprint no longer matches its inputs; ``any_engine``: Preflight's by whichever engine)."""
    fresh = cached(out, stage, candidate, scale, any_engine)
    return read_json(out / stage.key / f"{candidate.id}.json") if fresh else None


def rescored(pre: dict[str, Any] | None) -> dict[str, Any] | None:
    """A cached Preflight stage with its score and verdict recomputed from its components by the
    shipped calibration (``worker.engine.score``), so that a refit needs no rerun of the stage."""
    if not pre or not pre.get("components"):
        return pre
    from nas.options import Thresholds
    from worker.engine.score import score

    result = score(pre["components"], Thresholds())
    return pre | {"score": result.score, "verdict": result.verdict, "cached_score": pre.get("score")}


def load_rows(
    candidates: Iterable[Candidate], set_name: str, out: Any, seeds: int, scale: float, any_engine: bool = False
) -> list[Row]:
    """Everything the cache holds for each candidate (stages not computed yet are missing);
    ``any_engine``: Preflight's stage as whichever engine computed it (the report names it; the
    calibration reads only this checkout's engine)."""
    rows = []
    for c in candidates:
        row = Row(c, set_name)
        row.preflight = rescored(read_stage(out, Stage("preflight", 0), c, scale, any_engine))
        row.proxies = read_stage(out, Stage("proxies"), c, scale)
        row.baselines = read_stage(out, Stage("baselines"), c, scale)
        for protocol, inits in (("sgd", ("spec", "tuned", *INIT_PEERS)), ("adamw", ("spec", "tuned", *INIT_PEERS))):
            for init in inits:
                got = [read_stage(out, Stage("train", s, protocol, init), c, scale) for s in range(seeds)]
                runs = [g for g in got if g and g.get("run")]
                if runs:
                    row.runs[(protocol, init)] = runs
                    row.chance = runs[0]["chance"]
        rows.append(row)
    return rows


def truth(row: Row, protocol: str, init: str) -> dict[str, Any] | None:
    runs = row.runs.get((protocol, init))
    if not runs:
        return None
    best = [r["run"]["best"] for r in runs]
    losses = [r["run"]["final_loss"][b] for r, b in zip(runs, best, strict=True)]
    accs = [r["run"]["test_accuracy"][b] for r, b in zip(runs, best, strict=True)]
    untrainable = [
        all(r["run"]["diverged"]) or not loss < 0.5 * r["chance"] for r, loss in zip(runs, losses, strict=True)
    ]
    return {
        "accuracy": float(np.mean(accs)),
        "loss": float(np.median(losses)),
        "untrainable": sum(untrainable) >= len(untrainable) / 2,
        "seeds": len(runs),
    }


def _neg(value: Any) -> float:
    return math.nan if value is None else -float(value)


def predictors(row: Row, truth_name: str) -> dict[str, tuple[float, float]]:
    """(score, cost in training steps) of every method on this candidate, for ground truth A
    (proxies on the spec's init) or B (on the tuned init)."""
    out: dict[str, tuple[float, float]] = {}
    pre = row.preflight or {}
    if pre:
        score = pre.get("score")
        out["preflight"] = (math.nan if score is None else float(score), float(pre.get("counted_cost") or math.nan))
        out["preflight_probe_component"] = (_neg((pre.get("components") or {}).get("probe_loss")), math.nan)
    base = row.baselines or {}
    for name in ("probe_full", "probe_quarter", "lsuv_probe", "lsuv_probe_equal"):
        if name in base:
            out[name] = (_neg(base[name]["loss"]), float(base[name]["cost"]))
    first = row.runs.get(("sgd", "spec"))
    if first:
        run, epochs = first[0]["run"], first[0]["epochs"]
        per_epoch = len(run["curves"][0]) // epochs
        value = min(float(np.mean(c[:per_epoch])) for c in run["curves"])
        out["first_epoch"] = (-value if math.isfinite(value) else -math.inf, run["steps_per_rate"] / epochs * 3)
    side = "spec" if truth_name == "A" else "tuned"
    step = float((row.proxies or {}).get("step_seconds") or math.nan)  # timed beside the proxies
    for name, value in ((row.proxies or {}).get(side) or {}).items():
        out[f"proxy:{name}"] = (float(value["score"]), float(value["seconds"]) / step if step > 0 else math.nan)
    return out


def _stat(
    kind: str, scores: np.ndarray, acc: np.ndarray, loss: np.ndarray, bad: np.ndarray
) -> tuple[Callable[[np.ndarray], Any], bool]:
    """The statistic, and whether it takes the whole index matrix (vectorized over resamples)."""
    if kind == "spearman_accuracy":
        return spearman_rows(scores, acc), True
    if kind == "spearman_loss":
        return spearman_rows(scores, -loss), True
    if kind == "kendall_accuracy":
        return (lambda i: kendall(scores[i], acc[i])), False
    return (lambda i: precision_at_recall(scores[i], bad[i], RECALL) if bad[i].any() else math.nan), False


STATISTICS = ("spearman_accuracy", "spearman_loss", "kendall_accuracy", "precision_at_recall")
HEADLINE = ("spearman_accuracy", "spearman_loss", "precision_at_recall")
# Not equal-cost peers of Preflight's score: its own probe component, and the first epoch (far costlier)
NOT_EQUAL_COST = ("preflight", "preflight_probe_component", "first_epoch")
# LSUV then the engine's probe, sized to Preflight's counted cost on each candidate: always among the
# equal-cost peers (its mean cost can pass Preflight's by a little where LSUV's passes alone leave
# less than one probe step)
ALWAYS_EQUAL_COST = ("lsuv_probe_equal",)
# LSUV then a 15-step probe at three rates, counted at LSUV's worst case (about 4.6 times Preflight's
# cost): not an equal-cost peer; the answers also give the target lines with it among the peers
COSTLIER_PEERS = ("lsuv_probe",)


def ranking(rows: list[Row], truth_name: str, protocol: str, resamples: int) -> dict[str, Any]:
    """Every method's ranking and flagging figures against one ground truth, and the target lines:
    Preflight minus the best equal-cost baseline (the best by point estimate, on these candidates:
    a choice that favours the baseline)."""
    init = TRUTHS[truth_name]
    keep = [(r, t) for r in rows if (t := truth(r, protocol, init)) is not None and r.preflight]
    if not keep:
        return {"n": 0}
    acc = np.array([t["accuracy"] for _, t in keep])
    loss = np.array([t["loss"] for _, t in keep])
    bad = np.array([t["untrainable"] for _, t in keep])
    preds = [predictors(r, truth_name) for r, _ in keep]
    names = sorted({k for p in preds for k in p})
    methods: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    n = len(keep)
    reps = resamples if n >= MIN_FOR_INTERVALS else 0
    for name in names:
        scores = np.array([p.get(name, (math.nan, math.nan))[0] for p in preds])
        costs = np.array([p.get(name, (math.nan, math.nan))[1] for p in preds])
        arrays[name] = scores
        figures = {}
        for kind in STATISTICS:
            stat, vectorized = _stat(kind, scores, acc, loss, bad)
            # Kendall is reported as a point: its interval follows Spearman's, at 50x the cost
            figures[kind] = bootstrap(stat, n, reps if kind != "kendall_accuracy" else 0, rows=vectorized)
        methods[name] = {
            "figures": {k: v.to_json() for k, v in figures.items()},
            "cost": float(np.nanmean(costs)) if np.isfinite(costs).any() else math.nan,
        }
    preflight_cost = methods["preflight"]["cost"]
    peers = [
        m
        for m in names
        if m in ALWAYS_EQUAL_COST
        or (m not in NOT_EQUAL_COST and m not in COSTLIER_PEERS and not methods[m]["cost"] > 1.05 * preflight_cost)
    ]
    if not peers:  # the peers' stages are not computed yet for this engine's tuned init
        return {"n": 0}
    costlier = [m for m in names if m in COSTLIER_PEERS]

    def targets_against(candidates: list[str]) -> dict[str, Any]:
        targets = {}
        for kind in HEADLINE:
            best = max(candidates, key=lambda m: _finite(methods[m]["figures"][kind]["point"]))
            (first, rows), (second, _) = (_stat(kind, arrays[m], acc, loss, bad) for m in ("preflight", best))
            diff = paired_difference(first, second, n, reps, rows=rows)
            # met: the difference's whole interval above zero; None: too few candidates for an interval
            met = None if math.isnan(diff.low) else diff.above_zero
            targets[kind] = {"best_peer": best, "difference": diff.to_json(), "met": met}
        return targets

    return {
        "n": n,
        "untrainable": int(bad.sum()),
        "seeds": min(t["seeds"] for _, t in keep),
        "methods": methods,
        "equal_cost_peers": peers,
        "targets": targets_against(peers),
        # the same with the costlier LSUV pipeline among the peers
        "targets_costlier": targets_against(peers + costlier) if costlier else {},
        "points": {
            "accuracy": acc.tolist(),
            "loss": loss.tolist(),
            "untrainable": bad.tolist(),
            "preflight": arrays["preflight"].tolist(),
            **{m: arrays[m].tolist() for m in ("probe_full", "first_epoch") if m in arrays},
        },
    }


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf


def _seed_mean_loss(row: Row, protocol: str, init: str) -> float:
    t = truth(row, protocol, init)
    return math.nan if t is None else t["loss"]


def untrainable_pairs(tuned: list[bool], peer: list[bool], resamples: int) -> dict[str, Any]:
    """How many of the same candidates are untrainable from the tuned init and from a peer, and
    the paired difference of the shares, peer minus tuned (above 0: the tuned init leaves fewer
    untrainable), with its interval. Candidates where both diverged count here: they are
    untrainable from both."""
    bad_tuned, bad_peer = np.array(tuned, dtype=float), np.array(peer, dtype=float)
    n = len(bad_tuned)
    reps = resamples if n >= MIN_FOR_INTERVALS else 0

    def fewer(i: np.ndarray) -> float:
        return float((bad_peer[i] - bad_tuned[i]).mean())

    return {
        "n": n,
        "tuned": int(bad_tuned.sum()),
        "peer": int(bad_peer.sum()),
        "fewer": (
            bootstrap(fewer, n, reps) if reps else Interval(fewer(np.arange(n)), math.nan, math.nan, n)
        ).to_json(),
    }


def tuning(rows: list[Row], protocol: str, resamples: int) -> dict[str, Any]:
    """Tuned init vs each init peer: the share of candidates where the tuned init ends at a lower
    training loss (pairs where both diverged left out), its interval, the same share where at least
    one of the two trains (``wins_either_trains``), the mean test-accuracy difference, the share per
    family, and the untrainable candidates of each (``untrainable_pairs``)."""
    peers = ("spec", *INIT_PEERS)
    result: dict[str, Any] = {}
    for peer in peers:
        pairs = []
        either_trains: list[bool] = []
        bad: list[tuple[bool, bool]] = []
        for r in rows:
            tuned, other = truth(r, protocol, "tuned"), truth(r, protocol, peer)
            if tuned is None or other is None:
                continue
            bad.append((tuned["untrainable"], other["untrainable"]))
            if math.isinf(tuned["loss"]) and math.isinf(other["loss"]):
                continue
            pairs.append((r.family, tuned["loss"], other["loss"], tuned["accuracy"] - other["accuracy"]))
            either_trains.append(not (tuned["untrainable"] and other["untrainable"]))
        if not pairs:
            continue
        wins = np.array([t < o for _, t, o, _ in pairs], dtype=float)
        ties = np.array([t == o for _, t, o, _ in pairs], dtype=float)
        gain = np.array([d for *_, d in pairs])
        n = len(pairs)
        reps = resamples if n >= MIN_FOR_INTERVALS else 0

        def share(i: np.ndarray, wins: np.ndarray = wins) -> float:
            return float(wins[i].mean())

        def accuracy(i: np.ndarray, gain: np.ndarray = gain) -> float:
            return float(gain[i].mean())

        families: dict[str, list[float]] = {}
        for (family, *_), w in zip(pairs, wins, strict=True):
            families.setdefault(family, []).append(float(w))
        trains = np.array(either_trains)
        trained_wins = wins[trains]
        m = len(trained_wins)

        def trained_share(i: np.ndarray, wins: np.ndarray = trained_wins) -> float:
            return float(wins[i].mean())

        result[peer] = {
            "n": n,
            "ties": int(ties.sum()),
            "wins": (
                bootstrap(share, n, reps) if reps else Interval(share(np.arange(n)), math.nan, math.nan, n)
            ).to_json(),
            # a pair where neither init trains is decided by the last digits of two losses near chance
            # (bootstrap gives no interval below MIN_FOR_INTERVALS pairs, and nan for none)
            "wins_either_trains": bootstrap(trained_share, m, resamples if m >= MIN_FOR_INTERVALS else 0).to_json(),
            "accuracy_gain": (
                bootstrap(accuracy, n, reps) if reps else Interval(accuracy(np.arange(n)), math.nan, math.nan, n)
            ).to_json(),
            "families": {f: {"n": len(v), "wins": float(np.mean(v))} for f, v in sorted(families.items())},
            "untrainable": untrainable_pairs([t for t, _ in bad], [o for _, o in bad], resamples),
        }
    return result


def stage_costs(rows: list[Row]) -> dict[str, Any]:
    """Preflight's counted cost per stage and its seconds per stage, means over the candidates with a
    report (a stage that ran on some only, as the probe's lower rate, counts 0 where it did not)."""
    reports = [pre for r in rows if (pre := r.preflight or {}).get("counted") is not None]

    def means(field: str) -> dict[str, float]:
        stages = sorted({k for pre in reports for k in (pre.get(field) or {})})
        return {k: float(np.mean([float((pre.get(field) or {}).get(k, 0.0)) for pre in reports])) for k in stages}

    return {"counted": means("counted"), "seconds": means("timings"), "n": len(rows)}


def components(rows: list[Row], resamples: int) -> dict[str, Any]:
    """What each of the score's components ranks alone (lower component = better), against ground
    truth A under SGD: the contribution a stage's figure could make to the score."""
    keep = [(r, t) for r in rows if (t := truth(r, "sgd", "spec")) is not None and r.preflight]
    if len(keep) < 3:
        return {}
    acc = np.array([t["accuracy"] for _, t in keep])
    names = sorted({k for r, _ in keep for k in (r.preflight.get("components") or {})})  # type: ignore[union-attr]
    out = {}
    reps = resamples if len(keep) >= MIN_FOR_INTERVALS else 0
    for name in names:
        values = np.array([_neg((r.preflight.get("components") or {}).get(name)) for r, _ in keep])  # type: ignore[union-attr]

        out[name] = bootstrap(spearman_rows(values, acc), len(keep), reps, rows=True).to_json()
    return out


NEAR_BEST = 0.05  # the verdict must never prune a candidate within 5 points of its dataset's best


def verdict(rows: list[Row], protocol: str, resamples: int) -> dict[str, Any]:
    """The shipped verdict (the cut fitted on the development set) against ground truth B's
    untrainable candidates: precision and recall with intervals, and the pruned candidates that
    trained to within ``NEAR_BEST`` of the best test accuracy of their dataset (from the tuned init)."""
    keep = [(r, t) for r in rows if (t := truth(r, protocol, "tuned")) is not None and r.preflight]
    if not keep:
        return {"n": 0}
    flags = np.array([r.preflight.get("verdict") == "prune" for r, _ in keep])  # type: ignore[union-attr]
    bad = np.array([t["untrainable"] for _, t in keep])
    acc = np.array([t["accuracy"] for _, t in keep])
    n = len(keep)
    reps = resamples if n >= MIN_FOR_INTERVALS else 0

    def precision(i: np.ndarray) -> float:
        return float((flags[i] & bad[i]).sum() / flags[i].sum()) if flags[i].any() else math.nan

    def recall(i: np.ndarray) -> float:
        return float((flags[i] & bad[i]).sum() / bad[i].sum()) if bad[i].any() else math.nan

    near = [r.candidate.id for (r, _), f, a in zip(keep, flags, acc, strict=True) if f and a >= acc.max() - NEAR_BEST]
    return {
        "n": n,
        "flagged": int(flags.sum()),
        "untrainable": int(bad.sum()),
        "precision": bootstrap(precision, n, reps).to_json(),
        "recall": bootstrap(recall, n, reps).to_json(),
        "pruned_near_best": near,
        "best_accuracy": float(acc.max()),
    }


def costs(rows: list[Row]) -> dict[str, float]:
    """Preflight's counted cost per candidate (every stage, the probe included): median and 90th
    percentile, against the target of at most 20 and 30."""
    values = [float(r.preflight["counted_cost"]) for r in rows if r.preflight and r.preflight.get("counted_cost")]
    if not values:
        return {"n": 0}
    return {"n": len(values), "median": float(np.median(values)), "p90": float(np.percentile(values, 90))}


def figures(rows: list[Row], resamples: int) -> dict[str, Any]:
    """All figures for one set of candidates, per dataset group."""
    result: dict[str, Any] = {}
    for group in GROUPS:
        members = [r for r in rows if r.group == group]
        if not members:
            continue
        entry: dict[str, Any] = {"n": len(members), "ranking": {}, "tuning": {}}
        for truth_name in TRUTHS:
            for protocol in ("sgd", "adamw"):
                entry["ranking"][f"{truth_name}/{protocol}"] = ranking(members, truth_name, protocol, resamples)
        for protocol in ("sgd", "adamw"):
            entry["tuning"][protocol] = tuning(members, protocol, resamples)
        entry["stage_costs"] = stage_costs(members)
        entry["verdict"] = {protocol: verdict(members, protocol, resamples) for protocol in ("sgd", "adamw")}
        entry["cost"] = costs(members)
        scored = [r.preflight for r in members if r.preflight and r.preflight.get("probe_loss") is not None]
        entry["score_vs_probe"] = (
            spearman([float(p["score"]) for p in scored], [-float(p["probe_loss"]) for p in scored])
            if len(scored) >= 3
            else None
        )
        entry["components"] = components(members, resamples)
        entry["families"] = sorted({r.family for r in members})
        result[group] = entry
    return result

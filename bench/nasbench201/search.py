"""A search on NAS-Bench-201 where skipping can pay: the gate's ranking (``nas.ranking``) replayed
on random proposals from the scored cells, with the table's accuracy as what training would give.

Each repeat draws a random order of the reported cells (a stratified sample by accuracy decile,
so an order of them is a random search of the space, up to the sample). The ungated search trains
the first ``PROPOSALS``. A gated search trains its first ``AFTER`` proposals, then, before training
each next one, fits :class:`nas.ranking.Ranker` on what it has trained so far (their features and
accuracies, never any other cell's) and skips the proposal when its prediction falls below the
``BELOW`` quantile of theirs; like :class:`nas.gate.ConditioningGate` with ``rank_after=AFTER``,
it skips a ``prune`` verdict first, from the first proposal on. No
development sample is used: the search fits its own weights. The baselines that could explain a
gain use the same rule on one feature, with no fit: MeCo's score on the spec's init (the best
zero-cost proxy of the report), the size, and Preflight's verdict alone (skipping ``prune``); the
perfect flagging gate skips, for free, every cell below 20 %.

Compute: a training costs the cell's multiply-accumulates (NAS-Bench-201 trains every cell for the
same 200 epochs at the same batch size, so its cost scales with them); a gated search also pays
for every proposal what its rule measures: the conditioning's counted steps at the batch of 64
against the training's 200 epochs of 50,000 images (about 1e-4 of a training), and a third of a
step for a forward pass (the expressivity terms, MeCo); the size is free. Figures: the compute to reach
the ungated search's best accuracy, as a ratio of the ungated search's compute to reach it; and,
at equal compute, a gated search that keeps proposing until it has spent what the ungated one
spent, its best accuracy minus the ungated one's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nas.ranking import quantile_among, rank_among_trained

__all__ = [
    "AFTER",
    "BELOW",
    "PROPOSALS",
    "REPEATS",
    "SearchFigures",
    "learning_curve_lines",
    "report_lines",
    "rows",
    "simulate",
]

PROPOSALS = 100  # the ungated search's trainings
# trainings before the ranking starts (the gate's rank_after): where the fit overtakes MeCo on the development cells
AFTER = 30
BELOW = 0.5  # skip a proposal predicted below this quantile of the trained ones (rank_below)
REPEATS = 200  # random orders
TRAINING_IMAGES, EPOCHS, BATCH = 50_000, 200, 64  # NAS-Bench-201's CIFAR-10 training; the conditioning batch
FLAG_BELOW = 20.0  # the perfect flagging gate's line (accuracy, %)
RANKED = "rank gate (Preflight's features, fitted by the search)"


def rows(results: Sequence[dict[str, Any]]) -> list[dict[str, float | None]]:
    """Each cell's ranking features as ``nas.ranking.ranking_features`` reads them from a report:
    the conditioning's score and components, the expressivity terms and ``log10`` of the
    parameters."""
    out = []
    for r in results:
        components = r["preflight"].get("components") or {}
        expressivity = r.get("expressivity") or {}
        row = {k: _finite(components.get(k)) for k in components} | {"score": _finite(r["preflight"].get("score"))}
        row |= {"naswot": _finite(expressivity.get("naswot")), "meco": _finite(expressivity.get("meco"))}
        row["log_params"] = float(r["proxies"]["params"]["score"]) / math.log(10)  # the proxy is ln(count)
        out.append(row)
    return out


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


# A rule sees the trained proposals (indices) and one proposal, and says whether to train it.
Rule = Callable[[list[int], int], bool]


@dataclass(frozen=True)
class SearchFigures:
    """Per repeat: the compute ratio to reach the ungated best (inf: never, within the stream), and
    the best accuracy at the ungated search's total compute minus the ungated search's best."""

    to_best: np.ndarray
    at_equal_compute: np.ndarray
    trained: np.ndarray  # proposals trained within the ungated search's first PROPOSALS


def simulate(
    results: Sequence[dict[str, Any]], repeats: int = REPEATS, skip_runs: list[tuple[int, float]] | None = None
) -> dict[str, SearchFigures]:
    """Every search of the module's docstring on ``repeats`` random orders of ``results``; with
    ``skip_runs``, appends per order the rank gate's longest run of rank prunes in a row and its
    largest ratio to the trained count (what ``nas.gate.RankingStalled`` watches)."""
    accuracy = np.array([r["accuracy"] for r in results], dtype=np.float64)
    cost = np.exp(np.array([r["proxies"]["flops"]["score"] for r in results], dtype=np.float64))  # ln MACs
    step = BATCH / (TRAINING_IMAGES * EPOCHS) * cost  # a counted step, in trainings' compute
    counted = np.array([r["preflight"]["counted_cost"] for r in results], dtype=np.float64)
    one_pass = step / 3  # a forward pass: what the engine counts for its expressivity terms, MeCo's cost
    features = rows(results)
    meco = np.array([_proxy(r, "meco") for r in results])
    size = np.array([f["log_params"] for f in features])
    verdict = np.array([r["preflight"].get("verdict") == "prune" for r in results])

    def quantile_rule(values: np.ndarray) -> Rule:
        def keep(trained: list[int], i: int) -> bool:
            if len(trained) < AFTER:
                return True
            return quantile_among(values[trained], float(values[i])) >= BELOW

        return keep

    run = {"now": 0, "longest": 0, "ratio": 0.0}  # the rank gate's run of rank prunes in this order

    def ranked(trained: list[int], i: int) -> bool:
        if verdict[i]:  # the gate skips a prune verdict first, from the first proposal on
            return False
        if len(trained) < AFTER:
            return True
        decision = rank_among_trained(
            [features[j] for j in trained], accuracy[trained].tolist(), features[i], below=BELOW
        )
        run["now"] = 0 if decision.keep else run["now"] + 1
        run["longest"] = max(run["longest"], run["now"])
        run["ratio"] = max(run["ratio"], run["now"] / len(trained))
        return decision.keep

    # each search's rule and what it costs per proposal before any training
    searches: dict[str, tuple[Rule, np.ndarray]] = {
        RANKED: (ranked, counted * step + one_pass),  # the conditioning and the expressivity pass
        "MeCo, same rule": (quantile_rule(meco), one_pass),
        "size, same rule": (quantile_rule(size), 0 * cost),
        "Preflight's verdict alone": (lambda trained, i: not verdict[i], counted * step),
        "perfect flagging gate": (lambda trained, i: accuracy[i] >= FLAG_BELOW, 0 * cost),
    }
    rng = np.random.default_rng(0)
    out: dict[str, list[tuple[float, float, int]]] = {name: [] for name in searches}
    for _ in range(repeats):
        order = rng.permutation(len(results))
        base = order[:PROPOSALS]
        base_spent = np.cumsum(cost[base])
        best = accuracy[base].max()
        base_to_best = base_spent[int(np.argmax(accuracy[base] >= best))]
        run.update(now=0, longest=0, ratio=0.0)
        for name, (rule, charge) in searches.items():
            out[name].append(_replay(order, rule, accuracy, cost, charge, best, base_to_best, base_spent[-1]))
        if skip_runs is not None:
            skip_runs.append((int(run["longest"]), float(run["ratio"])))
    return {
        name: SearchFigures(*(np.array(column, dtype=np.float64) for column in zip(*values, strict=True)))
        for name, values in out.items()
    }


def _proxy(result: dict[str, Any], name: str) -> float:
    score = float(result["proxies"][name]["score"])
    return score if math.isfinite(score) else -math.inf


def _replay(
    order: np.ndarray,
    rule: Rule,
    accuracy: np.ndarray,
    cost: np.ndarray,
    conditioning: np.ndarray,
    target: float,
    base_to_best: float,
    budget: float,
) -> tuple[float, float, int]:
    """One gated search along ``order``: (compute to reach ``target`` over ``base_to_best``, its
    best within ``budget`` minus ``target``'s search's best, proposals trained of the first
    ``PROPOSALS``)."""
    trained: list[int] = []
    spent, reached, best_in_budget, trained_early = 0.0, math.inf, -math.inf, 0
    for position, i in enumerate(order):
        spent += conditioning[i]
        if spent > budget and math.isfinite(reached):
            break
        if not rule(trained, int(i)):
            continue
        spent += cost[i]
        trained.append(int(i))
        trained_early += position < PROPOSALS
        if spent <= budget:
            best_in_budget = max(best_in_budget, accuracy[i])
        if accuracy[i] >= target and math.isinf(reached):
            reached = spent / base_to_best
        if spent > budget and math.isfinite(reached):
            break
    return reached, best_in_budget - target, trained_early


def report_lines(results: Sequence[dict[str, Any]], repeats: int = REPEATS) -> list[str]:
    """The report's section: each search's figures over the repeats."""
    from bench.v2.stats import bootstrap

    lines = ["", "## A search where skipping can pay: the gate's ranking replayed on random proposals", ""]
    if len(results) < 2 * PROPOSALS:
        return [*lines, f"Not run: {len(results)} cells scored (at least {2 * PROPOSALS} are needed).", ""]
    runs: list[tuple[int, float]] = []
    figures = simulate(results, repeats, runs)
    longest = np.array([n for n, _ in runs])
    lines += [
        f"`bench/nasbench201/search.py`: {repeats} random orders of the {len(results)} reported cells, the table's "
        f"accuracy as what training gives. The ungated search trains {PROPOSALS} proposals; a gated one trains its "
        f"first {AFTER}, then skips a proposal predicted below the {BELOW:.1f} quantile of those it has trained "
        f"(`ConditioningGate(rank_after={AFTER}, rank_below={BELOW})`: `nas.ranking` fitted on the search's own "
        "trained cells, leave-one-out ridge, no development sample). The single-feature rows use the same rule with "
        "no fit. Compute: multiply-accumulates of a training (every cell trains 200 epochs), plus what each rule "
        "measures per proposal (the conditioning's counted steps, a forward pass for MeCo or the expressivity "
        "terms). Medians and 2.5 / 97.5 percentiles over the orders; the difference at equal compute is a mean "
        "with a bootstrap interval over the orders. The orders share one pool "
        "of cells, so the spread is that of the search's order, not of the space: an interval narrows as orders "
        'are added, and "above" or "below" below says a difference is no accident of the order, not that it '
        "would hold on other cells of the space.",
        "",
        "| search | compute to the ungated best | never reached | best at equal compute, minus no gate "
        "| trained of the first 100 |",
        "|---|---|---|---|---|",
    ]
    for name, f in figures.items():
        ratio = f.to_best
        low, mid, high = np.percentile(ratio, [2.5, 50, 97.5], method="inverted_cdf")  # "never" is inf
        diff = bootstrap(lambda i, d=f.at_equal_compute: float(np.mean(d[i])), len(ratio))
        lines.append(
            f"| {name} | {_ratio(mid)} [{_ratio(low)}, {_ratio(high)}] | {np.mean(~np.isfinite(ratio)):.2f} | "
            f"{diff.point:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] | {np.median(f.trained):.0f} |"
        )
    ours = figures[RANKED]
    lines += [
        "",
        "Accuracies in points of the table's percent. The rank gate against each other search on the same orders "
        "(paired): the share of orders where it reaches the ungated best first, where the other does (each by more "
        "than 1 % of the ungated compute; within it, both usually found it among the first trainings, which every "
        "rule trains), and its best at equal compute minus theirs (mean, bootstrap interval):",
        "",
    ]
    for name, f in figures.items():
        if name == RANKED:
            continue
        n = len(f.to_best)
        with np.errstate(invalid="ignore"):  # never against never: a tie
            gap = np.where(np.isinf(ours.to_best) & np.isinf(f.to_best), 0.0, ours.to_best - f.to_best)
        first, second = float(np.mean(gap < -0.01)), float(np.mean(gap > 0.01))
        diff = bootstrap(lambda i, d=ours.at_equal_compute - f.at_equal_compute: float(np.mean(d[i])), n)
        lines.append(
            f"- {name}: first on {first:.2f} of the orders, {name.split(',')[0]} first on {second:.2f}; at equal "
            f"compute {diff.point:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] ({_side(diff)})"
        )
    lines += [
        "",
        "Runs of skips (what `nas.gate.RankingStalled` watches): the rank gate's longest run of proposals ranked "
        f"below the cut in a row is a median {np.median(longest):.0f} per order and {longest.max()} at most; "
        f"{np.mean(longest >= 10):.2f} of the orders have one of 10 or more, and the longest, at its end, is at "
        f"most {max(r for _, r in runs):.2f} times the number of cells trained then. The gate warns only once a "
        "run exceeds that number (and 10): here, never.",
    ]
    return lines


def _side(interval: Any) -> str:
    return "above" if interval.low > 0 else "below" if interval.high < 0 else "not distinguishable"


def _ratio(value: float) -> str:
    return "never" if not math.isfinite(value) else f"{value:.2f}"


CURVE_SIZES = (15, 20, 30, 50, 100)  # trained cells the fit is given
CURVE_DRAWS = 100


def learning_curve_lines(dev: Sequence[dict[str, Any]]) -> list[str]:
    """How many trained cells the fit needs, on the development cells alone: fitted on ``k`` of
    them drawn at random, its Spearman on the rest of them, against MeCo's term (the engine's) and
    MeCo's proxy (the spec's init) on the same rest. This chose ``AFTER``."""
    from bench.pipeline.metrics import ranking_curve, ranking_curve_cells

    features, accuracy = rows(dev), np.array([r["accuracy"] for r in dev], dtype=np.float64)
    baselines = {
        "term": [f["meco"] if f["meco"] is not None else -math.inf for f in features],
        "proxy": [_proxy(r, "meco") for r in dev],
    }
    lines = [
        "",
        "How many trained cells the fit needs (the development cells alone: fitted on k of them drawn at random, "
        f"{CURVE_DRAWS} draws, Spearman on the rest of them; mean, and the 10th percentile over the draws). "
        f"`AFTER` = {AFTER} is where the fit overtakes MeCo's term here; a first look at the search above used 20 "
        "(rank gate and MeCo's rule level at equal compute, as at 30):",
        "",
        "| trained cells k | the fit | 10th percentile | MeCo's term (engine) | MeCo's proxy (spec init) |",
        "|---|---|---|---|---|",
    ]
    rng = np.random.default_rng(0)
    for k in (size for size in CURVE_SIZES if size < len(dev) - 10):
        curve = ranking_curve(features, accuracy, k, CURVE_DRAWS, rng, baselines)
        lines.append(f"| {k} | {' | '.join(ranking_curve_cells(curve))} |")
    return lines

"""Write docs/benchmarks.md (benchmark v2) and its plots from the cache: the frozen test set first,
per dataset, then the development set, then what became of v1's claims."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from bench.machine import cpu_model
from bench.pipeline.fashion_mnist import RESOLUTION, TEST_PER_CLASS, TRAIN_PER_CLASS
from bench.pipeline.run import write_json
from bench.v2 import analysis, gaussian_path, pruners
from bench.v2.candidates import DEV_FAMILIES, TEST_ONLY_FAMILIES
from bench.v2.protocols import ADAMW, EPOCHS, EVAL_TRAIN, PROTOCOLS, SGD
from bench.v2.stages import INIT_PEERS
from bench.v2.stats import RESAMPLES

__all__ = ["PLOT_DIR", "write"]

PLOT_DIR = "benchmarks/v2"
LABELS = {
    "spearman_accuracy": "Spearman with test accuracy",
    "spearman_loss": "Spearman with training loss",
    "precision_at_recall": "best precision of flagging at recall >= 0.8",
    "kendall_accuracy": "Kendall with test accuracy",
}


def _iv(figure: dict[str, Any], digits: int = 2) -> str:
    point, low, high = figure["point"], figure["low"], figure["high"]
    if point is None or (isinstance(point, float) and math.isnan(point)):
        return "n/a"
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return f"{point:.{digits}f}"
    return f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _signed(figure: dict[str, Any]) -> str:
    point, low, high = figure["point"], figure["low"], figure["high"]
    if isinstance(point, float) and math.isnan(point):
        return "n/a"
    if isinstance(low, float) and math.isnan(low):
        return f"{point:+.2f} (no interval)"
    return f"{point:+.2f} [{low:+.2f}, {high:+.2f}]"


def _side(figure: dict[str, Any], value: float) -> int:
    """+1 when the figure's whole interval is above ``value``, -1 when below, 0 when it holds
    ``value`` or has no interval: the only way a difference counts here."""
    low, high = figure["low"], figure["high"]
    if not math.isnan(low) and low > value:
        return 1
    if not math.isnan(high) and high < value:
        return -1
    return 0


def _machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU used"
    return f"{cpu_model()}, {os.cpu_count()} logical CPUs, {gpu}, torch {torch.__version__}"


def _completeness(rows: list[analysis.Row], seeds: int) -> str:
    trains = sum(len(v) for r in rows for v in r.runs.values())
    # the spec's and the tuned init (A and B) and every init peer, under each protocol, at each seed
    expected = len(rows) * (2 + len(INIT_PEERS)) * len(PROTOCOLS) * seeds
    done = sum(1 for r in rows if r.preflight and r.baselines and r.proxies)
    return (
        f"{len(rows)} candidates; Preflight, proxies and baselines on {done}; "
        f"{trains} of {expected} (candidate, init, protocol, seed) trainings in the cache; {_engines(rows)}"
    )


def _engines(rows: list[analysis.Row]) -> str:
    """Which engines (``bench.pipeline.run.engine_version``, a hash of the engine's source) computed
    the Preflight stages read here."""
    from collections import Counter

    from bench.pipeline.run import engines_named

    counts = Counter(r.preflight.get("engine_version") or "unrecorded" for r in rows if r.preflight)
    if not counts:
        return "no Preflight stage yet"
    named, stale = engines_named({engine: f"on {n}" for engine, n in counts.items()})
    hint = " (an engine's source changed since; `make bench` recomputes those)" if stale else ""
    return f"Preflight's stage by engine: {named}{hint}"


def _cost_estimate(out: Path, sets: dict[str, list[Any]], seeds: int) -> str:
    """The whole benchmark's CPU time, from the wall seconds of the tasks cached so far (per dataset
    group and stage kind), over every task of both sets."""
    import numpy as np

    from bench.pipeline.run import read_json

    group_of_id = {c.id: analysis.group_of(c.dataset) for candidates in sets.values() for c in candidates}
    seen: dict[tuple[str, str], list[float]] = {}
    for path in out.glob("*/**/*.json"):
        kind, group = path.relative_to(out).parts[0], group_of_id.get(path.stem)
        if group is None:  # not a candidate's result (figures.json), or a candidate no longer sampled
            continue
        try:
            seen.setdefault((group, kind), []).append(float(read_json(path)["wall_seconds"]))
        except (KeyError, ValueError):
            continue
    per_candidate = {"preflight": seeds, "proxies": 1, "baselines": 1, "train": seeds * (4 + len(INIT_PEERS))}
    total, missing = 0.0, set()
    for candidates in sets.values():
        for c in candidates:
            group = analysis.group_of(c.dataset)
            for kind, count in per_candidate.items():
                if (group, kind) in seen:
                    total += count * float(np.mean(seen[(group, kind)]))
                else:
                    missing.add(f"{group} {kind}")
    text = f"about {total / 3600:.1f} CPU-hours ({total / 7200:.1f} h with 2 workers)"
    return text + (f"; not yet measured, so not counted: {', '.join(sorted(missing))}" if missing else "")


def _targets_table(entry: dict[str, Any]) -> list[str]:
    lines = [
        "| ground truth | n (untrainable) | seeds | question | Preflight | best equal-cost peer | peer | "
        "Preflight - peer | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, rank in entry["ranking"].items():
        if not rank.get("n"):
            lines.append(f"| {key} | 0 | - | not computed yet | | | | | |")
            continue
        for kind in analysis.HEADLINE:
            target = rank["targets"][kind]
            peer = target["best_peer"]
            met = {True: "**met**", False: "missed", None: "no interval (too few)"}[target["met"]]
            lines.append(
                f"| {key} | {rank['n']} ({rank['untrainable']}) | {rank['seeds']} | {LABELS[kind]} | "
                f"{_iv(rank['methods']['preflight']['figures'][kind])} | {peer} | "
                f"{_iv(rank['methods'][peer]['figures'][kind])} | {_signed(target['difference'])} | {met} |"
            )
    return lines


def _methods_table(rank: dict[str, Any]) -> list[str]:
    lines = [
        "| method | cost (training steps) | Spearman accuracy | Spearman loss | Kendall accuracy | "
        "precision at recall 0.8 |",
        "|---|---|---|---|---|---|",
    ]
    methods = rank["methods"]
    order = sorted(methods, key=lambda m: -_finite(methods[m]["figures"]["spearman_accuracy"]["point"]))
    for m in order:
        f = methods[m]["figures"]
        cost = methods[m]["cost"]
        lines.append(
            f"| {m} | {'-' if math.isnan(cost) else f'{cost:.1f}'} | {_iv(f['spearman_accuracy'])} | "
            f"{_iv(f['spearman_loss'])} | {_iv(f['kendall_accuracy'])} | {_iv(f['precision_at_recall'])} |"
        )
    return lines


def _finite(value: float) -> float:
    return value if isinstance(value, int | float) and math.isfinite(value) else -math.inf


def _tuning_table(tuning: dict[str, Any]) -> list[str]:
    lines = [
        "| protocol | tuned vs | n | tuned ends lower (share) | where either trains: n, share | test accuracy, "
        "tuned - peer | untrainable: tuned / peer (share, peer - tuned) | families where tuned loses (share < 0.5) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for protocol, peers in tuning.items():
        for peer, t in peers.items():
            losing = ", ".join(f"{f} {v['wins']:.2f} of {v['n']}" for f, v in t["families"].items() if v["wins"] < 0.5)
            wins = t["wins"]
            verdict = {1: " (**better**)", -1: " (**worse**)", 0: ""}[_side(wins, 0.5)]
            lines.append(
                f"| {protocol} | {peer} | {t['n']} | {_iv(wins)}{verdict} | {_either_trains(t)} | "
                f"{_signed(t['accuracy_gain'])} | "
                f"{_untrainable(t.get('untrainable'))} | {losing or '-'} |"
            )
    return lines


def _either_trains(figure: dict[str, Any]) -> str:
    """The share without the pairs where neither init trains (an older cached analysis: ``-``)."""
    share = figure.get("wins_either_trains")
    return "-" if share is None else f"{share['n']}, {_iv(share)}"


def _untrainable(figure: dict[str, Any] | None) -> str:
    """``tuned / peer, difference``, with **fewer** or **more** when the difference's interval
    excludes 0 (an older cached analysis without the counts: ``-``)."""
    if figure is None:
        return "-"
    fewer = figure["fewer"]
    verdict = {1: " (**fewer**)", -1: " (**more**)", 0: ""}[_side(fewer, 0.0)]
    return f"{figure['tuned']} / {figure['peer']}, {_signed(fewer)}{verdict}"


def _pruner_table(result: dict[str, Any]) -> list[str]:
    if "methods" not in result:
        return [f"Not enough candidates with every stage computed ({result.get('n', 0)})."]
    m = result["methods"]
    lines = [
        f"{result['n']} candidates, {result['orders']} random orders; the pool's best test accuracy "
        f"{result['pool_best']:.3f}.",
        "",
        "| search | compute (x training all) | regret | Preflight-ranked regret at that compute | "
        "the same, trained from the spec's init | probe-ranked regret at that compute (from the spec's init) | "
        "orders too short for a ranked search |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in pruners.PRUNERS:
        f = m[name]
        lines.append(
            f"| Optuna {name} | {f['compute_ratio']:.2f} | {f['regret']:.3f} | "
            f"{_regret(f['preflight_ranked_regret'])} | {_regret(f.get('preflight_ranked_spec_init_regret'))} | "
            f"{_regret(f['probe_ranked_regret'])} | "
            f"{f['ranked_undefined_orders']} of {result['orders']} |"
        )
    g = m["preflight_gate"]
    lines.append(
        f"| Preflight gate ({g['skipped']} skipped) | {g['compute_ratio']:.2f} | {g['regret']:.3f} | - | - | - | - |"
    )
    return lines


def _regret(value: float) -> str:
    return "- (scoring every candidate costs more)" if math.isnan(value) else f"{value:.3f}"


def _stage_table(costs: dict[str, Any]) -> list[str]:
    lines = ["| stage | counted steps (mean) | seconds (mean) |", "|---|---|---|"]
    for name, value in costs["seconds"].items():
        counted = costs["counted"].get(
            f"counted_{name}", costs["counted"].get("probe_counted_steps" if name == "probe" else "", math.nan)
        )
        lines.append(f"| {name} | {counted:.1f} | {value:.3f} |")
    return lines


def _verdict_table(entry: dict[str, Any]) -> list[str]:
    lines = [
        "| protocol | n (untrainable) | flagged | precision | recall | pruned within 5 points of the best |",
        "|---|---|---|---|---|---|",
    ]
    rows = [(protocol, v) for protocol, v in entry.get("verdict", {}).items()]
    default = entry.get("verdict_default_path") or {}
    if default.get("n"):
        rows.append((f"sgd, the default path (no data; engine {', '.join(default['engines'])})", default))
    for label, v in rows:
        if not v.get("n"):
            continue
        near = ", ".join(v["pruned_near_best"]) or "none"
        lines.append(
            f"| {label} | {v['n']} ({v['untrainable']}) | {v['flagged']} | {_iv(v['precision'])} | "
            f"{_iv(v['recall'])} | {near} |"
        )
    cost = entry.get("cost", {})
    if cost.get("n"):
        lines += [
            "",
            f"Counted cost per candidate, the probe included: median {cost['median']:.1f}, 90th percentile "
            f"{cost['p90']:.1f} training steps (target: at most 20 and 30).",
        ]
    return lines


def _section(title: str, entry: dict[str, Any], replay: dict[str, Any], plots: dict[str, str]) -> list[str]:
    lines = [f"### {title}", "", f"{entry['n']} candidates; families: {', '.join(entry['families'])}.", ""]
    lines += [
        "**Targets** (Preflight's score against the best peer that costs no more, per ground truth and protocol)",
        "",
    ]
    lines += _targets_table(entry) + [""]
    for key in ("A/sgd", "B/sgd", "A/adamw", "B/adamw"):
        rank = entry["ranking"].get(key, {})
        if rank.get("n"):
            lines += [
                f"**Every method, ground truth {key}** ({rank['n']} candidates, {rank['untrainable']} untrainable)",
                "",
            ]
            lines += _methods_table(rank) + [""]
    lines += [
        "**Tuned init against each init peer** (a share counts every pair but those where both diverged, so "
        "also the pairs where neither init trains, whose order hangs on two losses near chance; the next "
        "column leaves those out)",
        "",
    ]
    lines += _tuning_table(entry["tuning"]) + [""]
    lines += ["**Optuna's pruners replayed, and Preflight at equal compute**", ""] + _pruner_table(replay) + [""]
    lines += ["**The verdict** (the cut fitted on the development set) against ground truth B", ""]
    lines += _verdict_table(entry) + [""]
    if entry["stage_costs"]["n"]:
        lines += ["**What each stage of the conditioning costs**", ""] + _stage_table(entry["stage_costs"]) + [""]
    if entry["components"]:
        lines += [
            "**What each component ranks alone** (Spearman of minus the component with test accuracy, "
            "ground truth A/sgd)",
            "",
        ]
        lines += ["| component | Spearman |", "|---|---|"]
        lines += [f"| {k} | {_iv(v)} |" for k, v in entry["components"].items()] + [""]
    for caption, path in plots.items():
        lines += [f"![{caption}]({path})", ""]
    return lines


def _plots(rows: list[analysis.Row], entry: dict[str, Any], folder: Path, stem: str) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from bench.pipeline.metrics import precision_recall_curve

    folder.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    rank = entry["ranking"].get("A/sgd", {})
    if rank.get("n"):
        p = rank["points"]
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.scatter(p["preflight"], p["accuracy"], s=12, c=["red" if b else "black" for b in p["untrainable"]])
        ax.set_xlabel("Preflight score")
        ax.set_ylabel("test accuracy (ground truth A, SGD)")
        ax.set_title(stem)
        fig.tight_layout()
        fig.savefig(folder / f"{stem}_score_vs_accuracy.png", dpi=90)
        plt.close(fig)
        made["score against test accuracy (red: untrainable)"] = f"{PLOT_DIR}/{stem}_score_vs_accuracy.png"
        if any(p["untrainable"]):
            fig, ax = plt.subplots(figsize=(5, 4))
            for name in ("preflight", "probe_full", "first_epoch"):
                if name in p:
                    precision, recall = precision_recall_curve(p[name], p["untrainable"])
                    cut = ~np.isnan(precision)  # the thresholds a score can cut at
                    ax.plot(recall[cut], precision[cut], label=name)
            ax.set_xlabel("recall of untrainable")
            ax.set_ylabel("precision")
            ax.legend()
            fig.tight_layout()
            fig.savefig(folder / f"{stem}_flagging_pr.png", dpi=90)
            plt.close(fig)
            made["precision-recall of flagging (ground truth A, SGD)"] = f"{PLOT_DIR}/{stem}_flagging_pr.png"
    peers = [p for p in ("spec", *INIT_PEERS)]
    fig, axes = plt.subplots(1, len(peers), figsize=(2.4 * len(peers), 2.6), sharey=True)
    drawn = False
    for ax, peer in zip(axes, peers, strict=True):
        pairs = [(analysis.truth(r, "sgd", peer), analysis.truth(r, "sgd", "tuned")) for r in rows]
        pairs = [
            (a["loss"], b["loss"])
            for a, b in pairs
            if a and b and math.isfinite(a["loss"]) and math.isfinite(b["loss"])
        ]
        if pairs:
            drawn = True
            x, y = np.array(pairs).T
            ax.scatter(x, y, s=6)
            top = max(x.max(), y.max())
            ax.plot([0, top], [0, top], color="grey", lw=0.8)
        ax.set_title(peer, fontsize=8)
        ax.set_xlabel("peer's loss", fontsize=7)
    axes[0].set_ylabel("tuned init's loss", fontsize=7)
    fig.tight_layout()
    if drawn:
        fig.savefig(folder / f"{stem}_tuned_vs_peers.png", dpi=90)
        made["final training loss, tuned init against each init peer (SGD; below the line: tuned better)"] = (
            f"{PLOT_DIR}/{stem}_tuned_vs_peers.png"
        )
    plt.close(fig)
    return made


def _protocol_lines(seeds: int, scale: float) -> list[str]:
    return [
        f"- **Data.** Fashion-MNIST: a stratified {10 * TRAIN_PER_CLASS}-image subset of the 60,000 training "
        f"images and a stratified {10 * TEST_PER_CLASS}-image subset of the 10,000 test images (seed 0), each "
        f"image's 2x2 blocks averaged (28x28 -> {RESOLUTION}x{RESOLUTION}), standardized; digits (8x8) and breast "
        "cancer as in v1 (70/30 stratified split). The subsets and the resolution are what fits the CPU budget.",
        f"- **Protocol S** (shared with the probe): SGD, momentum {SGD.momentum}, batch {SGD.batch_size}, constant "
        f"rates {{{', '.join(f'{r:g}' for r in SGD.lrs)}}}, abort above 100 ln C. **Protocol W** (shared with "
        f"nothing Preflight does): AdamW (weight decay {ADAMW.weight_decay}), batch {ADAMW.batch_size}, rates "
        f"{{{', '.join(f'{r:g}' for r in ADAMW.lrs)}}}, 5 % linear warm-up then cosine to zero.",
        f"- **Epochs**: {', '.join(f'{k} {round(v * scale) or 1}' for k, v in EPOCHS.items())}; the final "
        f"training loss is on {EVAL_TRAIN:,} training samples in eval mode; the best rate by that loss is the run's "
        "result.",
        f"- **Seeds**: {seeds} per (candidate, init, rate); the seed fixes the weights and the batch order. "
        "Tables say how many seeds every candidate had when the report was written.",
        "- **Untrainable**: the best rate's final training loss is at least ln C / 2, or every rate diverged, "
        "on at least half the seeds.",
        "- **Costs** in training steps of the candidate at batch 64: counted (Preflight's budget and probe, the "
        "probe baselines, LSUV at its worst case of 10 forwards per layer, the first epoch at three rates), timed "
        "for the zero-cost proxies (their seconds over one training step of the candidate timed in the same "
        "process, before them).",
        "- **Preflight**: the engine's defaults: an orthogonal draw, the closed-form balancing, AutoInit with one "
        "Hutchinson vector, the head's std by BatchNorm, every biased layer's output centered on the batch, then "
        "the probe (5 steps at 0.1 and 0.03), all within a budget of 20 counted training steps; the diagnostics "
        "off (docs/conditioning.md, section 8).",
        "- **Init peers** (`bench/pipeline/inits.py`, on the same 64-sample batch): PyTorch's default, Kaiming, "
        "Xavier, orthogonal, LSUV, GradInit, and `lsuv_centered`: LSUV, then the engine's centering, the peer "
        "that tells the tuning's share of the tuned init's gain from the centering's.",
        "- **Baselines**: `probe_full` = the probe's loop (SGD, momentum 0.9, the 64-sample batch) at the three "
        "rates of protocol S, 0.1 / 0.03 / 0.01 (the engine's probe was that loop at 15 steps until benchmark v2), "
        "from the spec's init, with its steps set so its counted cost equals "
        "Preflight's on that candidate; `probe_quarter` at a quarter of it; `lsuv_probe_equal` = LSUV, then the "
        "engine's own probe (0.1 and 0.03, momentum 0.9) for the steps that bring the whole to Preflight's counted "
        "cost on that candidate, LSUV's forward passes counted as they ran (a third of a step each): the pipeline a "
        "practitioner would run instead, at Preflight's cost; `lsuv_probe` = LSUV, then the loop at three rates for "
        "15 steps, counted at LSUV's worst case (10 passes per layer), several times Preflight's cost (the answers "
        "give it); "
        "`first_epoch` = the lowest mean mini-batch loss of the first epoch of protocol S from "
        "the spec's init (not equal-cost: a whole epoch at three rates); `proxy:params` and `proxy:flops` = size "
        "alone; `proxy:*` = the zero-cost proxies, on the spec's init for ground truth A and on the tuned init for B.",
        "- **Best equal-cost peer**: the peer with the best point estimate on the same candidates, among those "
        "whose mean cost is at most 1.05 times Preflight's, and `lsuv_probe_equal` (sized to Preflight's cost; it "
        "costs more only where LSUV's passes alone leave less than one probe step). Choosing it on the test set "
        "favours the peer, not Preflight. The answers also give the lines with `lsuv_probe` among the peers. "
        "Until this engine's test figures had been read, `lsuv_probe` was always among the equal-cost peers and "
        "`lsuv_probe_equal` did not exist; the change follows the target's definition (equal counted cost) and "
        "adds the stronger equal-cost LSUV peer, so it can only make the targets harder to meet.",
        f"- **Intervals**: percentile bootstrap over candidates, {RESAMPLES} resamples, paired for differences; "
        "a target is met only when the whole interval of the difference is above zero. Groups with fewer than "
        f"{analysis.MIN_FOR_INTERVALS} candidates get point estimates only.",
        f"- **Sets**: the development set is v1's 160 candidates and 84 Fashion-MNIST ones "
        f"({', '.join(DEV_FAMILIES)}); the frozen test set is 40 candidates of v1's families at another seed and "
        f"64 Fashion-MNIST ones, with two families the development set does not have "
        f"({', '.join(TEST_ONLY_FAMILIES)}). Nothing in the product was chosen, fitted or tuned on it.",
    ]


def _answers(test: dict[str, Any], replays: dict[str, Any]) -> list[str]:
    """The brief's questions, answered from the frozen test set's figures."""
    lines = []
    for group, entry in test.items():
        name = analysis.GROUPS[group]
        met, missed, open_, peers = _target_lines(entry, "targets")
        lines.append(
            f"- **{name}, score against the best equal-cost baseline** ({entry['n']} candidates): "
            f"{len(met)} of {len(met) + len(missed)} target lines met"
            + (f" ({'; '.join(met)})" if met else "")
            + (f"; best peers: {', '.join(sorted(peers))}" if peers else "")
            + (f"; not computed yet: {', '.join(open_)}" if open_ else "")
            + "."
            + _costlier_answer(entry)
        )
        worse: list[str] = []
        better: list[str] = []
        even: list[str] = []
        for protocol, table in entry["tuning"].items():
            for peer, t in table.items():
                wins = t["wins"]
                {1: better, -1: worse, 0: even}[_side(wins, 0.5)].append(f"{peer} ({protocol}, {_iv(wins)})")
        if better or worse or even:
            groups = (("better than", better), ("worse than", worse), ("not distinguishable from", even))
            verdicts = [f"{verdict} {', '.join(peers)}" for verdict, peers in groups if peers]
            lines.append(
                f"- **{name}, tuned init against the init peers** (share of candidates where the tuned init ends at "
                f"a lower training loss): {'; '.join(verdicts)}."
            )
        fewer: list[str] = []
        level: list[str] = []
        for protocol, table in entry["tuning"].items():
            for peer, t in table.items():
                if (bad := t.get("untrainable")) is None:
                    continue
                label = f"{peer} ({protocol}, {bad['tuned']} against {bad['peer']})"
                (fewer if _side(bad["fewer"], 0.0) > 0 else level).append(label)
        if fewer or level:
            parts = [
                f"{verdict} {', '.join(peers)}"
                for verdict, peers in (("fewer than", fewer), ("not fewer than", level))
                if peers
            ]
            lines.append(
                f"- **{name}, untrainable candidates, tuned init against each peer** (the difference of the shares "
                f"above 0 on its whole interval counts as fewer): {'; '.join(parts)}."
            )
        replay = replays.get(group, {})
        if "methods" in replay:
            gate = replay["methods"]["preflight_gate"]
            median = replay["methods"]["median"]
            lines.append(
                f"- **{name}, search**: Preflight's gate spends {gate['compute_ratio']:.2f} of training every "
                f"candidate, regret {gate['regret']:.3f}; Optuna's MedianPruner {median['compute_ratio']:.2f}, regret "
                f"{median['regret']:.3f}; at the MedianPruner's compute, ranking by Preflight's score has regret "
                f"{_regret(median['preflight_ranked_regret'])} ("
                f"{_regret(median.get('preflight_ranked_spec_init_regret'))} trained from the spec's init, as the "
                f"probe's are), by the equal-cost probe {_regret(median['probe_ranked_regret'])}."
            )
        if line := _verdict_answer(name, entry):
            lines.append(line)
        costs = entry["stage_costs"]
        if costs["n"]:
            counted = costs["counted"]
            total = counted.get("counted_steps", 0.0)  # every stage, the probe included
            alone = entry.get("score_vs_probe")
            lines.append(
                f"- **{name}, cost**: Preflight counts {total:.1f} training steps per candidate, "
                f"{counted.get('probe_counted_steps', 0.0):.0f} of them the probe"
                + (
                    f"; Spearman between the score and its probe component alone: {alone:.2f} (what each "
                    "component ranks alone is in the table below)"
                    if alone is not None and math.isfinite(alone)
                    else ""
                )
                + "."
            )
    return lines


def _verdict_answer(name: str, entry: dict[str, Any]) -> str:
    """The verdict's target (precision and recall >= 0.85, none pruned within 5 points of the best),
    with data and on the service's default path, against ground truth B under protocol S."""
    parts = []
    for path, v in (
        ("with data", entry.get("verdict", {}).get("sgd", {})),
        ("on the default path (no data)", entry.get("verdict_default_path") or {}),
    ):
        if not v.get("n"):
            continue
        near = len(v["pruned_near_best"])
        parts.append(
            f"{path} {v['flagged']} flagged of {v['untrainable']} untrainable, precision {_iv(v['precision'])}, "
            f"recall {_iv(v['recall'])}, {near} pruned within 5 points of the best"
        )
    if not parts:
        return ""
    return (
        f"- **{name}, verdict** (the cut fitted on the development set; ground truth B, protocol S; target: "
        f"precision and recall >= 0.85): {'; '.join(parts)}."
    )


V1_CLAIMS = [
    ("Ranking (A, held-out): Preflight Spearman 0.59 vs best peer 0.55: met", "A/sgd", "spearman_loss"),
    ("Ranking (B, held-out): Preflight Spearman 0.84 vs best peer 0.51: met", "B/sgd", "spearman_loss"),
    ("Flagging (B, held-out): precision 1.00 at recall 0.84: met", "B/sgd", "precision_at_recall"),
]


def _target_lines(
    entry: dict[str, Any], which: str, name_peer: bool = False
) -> tuple[list[str], list[str], list[str], set[str]]:
    """The score's target lines of one dataset (``which``: ``targets``, or ``targets_costlier``
    with the costlier LSUV pipeline among the peers): those met and missed, each with its
    difference (``name_peer``: and its peer), those without an interval, and the best peers."""
    met: list[str] = []
    missed: list[str] = []
    open_: list[str] = []
    peers: set[str] = set()
    for key, rank in entry["ranking"].items():
        if not rank.get("n"):
            open_.append(key)
            continue
        for kind, target in (rank.get(which) or {}).items():
            label = f"{key} {LABELS[kind]}"
            peers.add(target["best_peer"])
            if target["met"] is None:
                open_.append(label + " (too few for an interval)")
            else:
                line = f"{label}: {_signed(target['difference'])}" + (
                    f" against {target['best_peer']}" if name_peer else ""
                )
                (met if target["met"] else missed).append(line)
    return met, missed, open_, peers


def _costlier_answer(entry: dict[str, Any]) -> str:
    """The score's target lines with the costlier LSUV pipeline among the peers as well
    (``lsuv_probe``: LSUV counted at its worst case and a 15-step probe at three rates)."""
    met, missed, _, peers = _target_lines(entry, "targets_costlier", name_peer=True)
    total = len(met) + len(missed)
    if not total:
        return ""
    costs = {
        round(float(rank["methods"][m]["cost"]), 1)
        for rank in entry["ranking"].values()
        for m in analysis.COSTLIER_PEERS
        if m in rank.get("methods", {})
    }
    added = ", ".join(analysis.COSTLIER_PEERS)
    cost = f" at {min(costs):.1f}" + (f" to {max(costs):.1f}" if max(costs) > min(costs) else "") if costs else ""
    return (
        f" With {added} among the peers too ({cost.strip()} counted steps, not an equal-cost peer): "
        f"{len(met)} of {total} met"
        + (f" ({'; '.join(met)})" if met else "")
        + f"; best peers: {', '.join(sorted(peers))}."
    )


def _v1_claims(test: dict[str, Any]) -> list[str]:
    lines = []
    for claim, key, kind in V1_CLAIMS:
        parts = []
        for group, entry in test.items():
            rank = entry["ranking"].get(key, {})
            if not rank.get("n"):
                continue
            target = rank["targets"][kind]
            status = {True: "holds", False: "**missed**", None: "no interval (too few)"}[target["met"]]
            parts.append(
                f"{analysis.GROUPS[group]}: Preflight - {target['best_peer']} = {_signed(target['difference'])}, "
                f"{status}"
            )
        lines.append(f"- v1: {claim}. v2 test set, against the best equal-cost peer: " + ("; ".join(parts) or "n/a"))
    tuned = []
    for group, entry in test.items():
        spec = entry["tuning"].get("sgd", {}).get("spec")
        if spec:
            low = spec["wins"]["low"]
            status = "n/a, no interval (too few)" if math.isnan(low) else "holds" if low >= 0.8 else "**missed**"
            tuned.append(f"{analysis.GROUPS[group]}: {_iv(spec['wins'])} of {spec['n']}, {status}")
    lines.append(
        "- v1: tuned better than the spec's init on 82 % of survivors (target >= 80 %): met. v2 test set, all "
        "candidates (no survivor selection), protocol S: " + ("; ".join(tuned) or "n/a")
    )
    lines.append(
        "- v1: the gated search's compute target (<= 0.5 of the ungated) was already missed; v2's replay is "
        "the pruner table above."
    )
    return lines


def write(
    sets: dict[str, list[Any]],
    out: Path,
    docs: Path,
    *,
    seeds: int,
    scale: float,
    walls: dict[str, float],
    planned_seeds: int | None = None,
    note: str = "",
) -> Path:
    """Analyze the cache (the first ``seeds`` seeds) and write ``docs/benchmarks.md``, its plots and
    ``<out>/figures.json``; the size estimate is for ``planned_seeds`` (default ``seeds``)."""
    resamples = RESAMPLES
    all_figures: dict[str, Any] = {}
    lines = [
        "# Benchmark v2: does Preflight beat the cheapest honest baselines?",
        "",
        "Generated by `make bench` (`python -m bench.v2`; cached stages under `bench/results/v2`, committed, "
        "`--report-only` rewrites this page). v1's report, on 8x8 digits only, is kept as "
        "[benchmarks-v1.md](benchmarks-v1.md) (older docs and comments that cite `docs/benchmarks.md` for the "
        "output std or the calibration mean that page). NAS-Bench-201, scored against its published trained "
        "accuracies without training, is in [nasbench201.md](nasbench201.md) (`python -m bench.nasbench201`); "
        "a Fashion-MNIST architecture search run with and without the gate and Optuna's pruners, in "
        "[fashion-search.md](fashion-search.md) (`python -m bench.fashion_search`); the recommended learning "
        "rate's measurement in docs/conditioning.md, section 9.",
        "",
        (f"Machine: {_machine()}. Written" if walls else f"Rewritten from the cached stages on {_machine()}, at")
        + f" {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}"
        + ("." if walls else " (the machines that computed the stages: see the note)."),
        "Wall time of this run: "
        + (", ".join(f"{k} {v / 60:.0f} min" for k, v in walls.items()) or "report only (cached stages)")
        + ".",
        "",
        "## Protocol",
        "",
        *_protocol_lines(seeds, scale),
        "",
    ]
    body: list[str] = []
    for set_name in ("test", "dev"):
        candidates = sets.get(set_name, [])
        # after a run every Preflight stage is this engine's; a report of cached stages may read an
        # earlier engine's, and the completeness line names the engines
        rows = analysis.load_rows(candidates, set_name, out, seeds, scale, any_engine=True)
        figures = analysis.figures(rows, resamples)
        for group, entry in figures.items():  # the service's default path, where it was computed
            members = [r for r in rows if r.group == group]
            entry["verdict_default_path"] = gaussian_path.default_path_verdict(members, "sgd", resamples)
        replays = {g: pruners.replay([r for r in rows if r.group == g]) for g in figures}
        all_figures[set_name] = {"figures": figures, "pruners": replays}
        title = (
            "The frozen test set (the tables that count)"
            if set_name == "test"
            else ("The development set (for developing the product; not the tables that count)")
        )
        body += [f"## {title}", "", f"Completeness: {_completeness(rows, seeds)}.", ""]
        for group, entry in figures.items():
            stem = f"{set_name}_{group}"
            group_rows = [r for r in rows if r.group == group]
            plots = _plots(group_rows, entry, docs / PLOT_DIR, stem) if set_name == "test" else {}
            body += _section(f"{analysis.GROUPS[group]} ({set_name})", entry, replays[group], plots)
    lines[7:7] = ([note, ""] if note else []) + [
        f"Seeds read for this report: {seeds}. Size: the whole benchmark (both sets, every stage, "
        f"{planned_seeds or seeds} seeds) takes {_cost_estimate(out, sets, planned_seeds or seeds)}, estimated "
        "from the tasks computed so far.",
        "",
    ]
    test_figures = all_figures.get("test", {})
    lines += ["## Answers, on the frozen test set", ""]
    lines += _answers(test_figures.get("figures", {}), test_figures.get("pruners", {})) + [""]
    lines += ["## v1's claims, re-examined on the frozen test set", ""]
    lines += _v1_claims(all_figures.get("test", {}).get("figures", {})) + [""]
    lines += body
    docs.mkdir(parents=True, exist_ok=True)
    path = docs / "benchmarks.md"
    path.write_text("\n".join(lines) + "\n")
    write_json(out / "figures.json", all_figures)
    (out / "figures.summary.json").write_text(json.dumps({"seeds": seeds, "sets": list(sets)}))
    return path

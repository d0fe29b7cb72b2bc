"""Write docs/benchmarks.md and the PNG plots beside it from the analyzed figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bench.pipeline import metrics
from bench.pipeline.proxies import PROXIES

__all__ = ["plots", "write_markdown"]

PLOT_DIR = "benchmarks"


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, int | np.integer):
        return str(int(value))
    value = float(value)
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def _ranking_md(table: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        "| method | Spearman(-loss) | Kendall(-loss) | Spearman(acc) | prune worst 25 %: precision | recall "
        "| best precision at recall >= 0.8 | median s / candidate | training-step equivalents |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = sorted(table, key=lambda m: -np.nan_to_num(table[m]["spearman_loss"], nan=-9))
    for m in order:
        t = table[m]
        lines.append(
            f"| {m} | {_f(t['spearman_loss'])} | {_f(t['kendall_loss'])} | {_f(t['spearman_accuracy'])} "
            f"| {_f(t['quarter_precision'])} | {_f(t['quarter_recall'])} | {_f(t['precision_at_recall_0.8'])} "
            f"| {_f(t['seconds'], 3)} | {_f(t['step_equivalents'], 1)} |"
        )
    return lines


def _tuning_md(tuning: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        "| tuned vs | n | tuned better | median loss improvement | median ln(other / tuned) |",
        "|---|---|---|---|---|",
    ]
    for peer, t in tuning.items():
        lines.append(
            f"| {peer} | {t['n']} | {_f(t['better'])} | {_f(t['median_improvement'], 3)} "
            f"| {_f(t['median_log_ratio'])} |"
        )
    return lines


def _scaling_md(table: dict[str, Any] | None) -> list[str]:
    if not table:
        return ["Not run."]
    datasets = list(table["datasets"])
    lines = ["Per dataset, the best learning rate's median training loss (learning rate):", ""]
    methods = sorted({m for row in table["datasets"].values() for m in row})
    lines += ["| dataset | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for d in datasets:
        row = table["datasets"][d]
        cells = [f"{_f(row[m]['loss'], 3)} ({row[m]['lr']:g})" if m in row else "n/a" for m in methods]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    for key, title in (
        ("summary", "The paper's four schemes"),
        ("summary_with_preflight", "With Preflight"),
    ):
        lines += [
            "",
            f"{title} (normalized by each dataset's worst; paper: arithmetic 0.90, fan-in 0.84, "
            "fan-out 0.88, geometric 0.81):",
            "",
            "| method | average normalized loss | worst in # | best in # |",
            "|---|---|---|---|",
        ]
        for m, s in sorted(table[key].items(), key=lambda kv: kv[1]["normalized_loss"]):
            lines.append(f"| {m} | {_f(s['normalized_loss'])} | {s['worst_in']} | {s['best_in']} |")
    return lines


def _gaussian_path_md(summary: dict[str, Any] | None) -> list[str]:
    if not summary:
        return ["Not run (`python -m bench.ablations.gaussian_path`)."]
    lines = [
        "`python -m bench.ablations.gaussian_path`: every candidate conditioned as the service does without "
        "`options.data` (`worker.engine.condition(spec)`: a Gaussian batch, the probe on random labels, "
        "every option at its default), its score and verdict against ground truth B, next to the "
        "same engine on the labelled batch above.",
        "",
        "| path | held-out: Spearman | held-out: verdict precision / recall (flagged) | all: Spearman | all: verdict "
        "precision / recall (flagged) |",
        "|---|---|---|---|---|",
    ]
    for path in ("real batch", "gaussian"):
        cells = []
        for half in ("held-out", "all"):
            f = summary[half][path]
            cells += [_f(f["spearman"]), f"{_f(f['precision'])} / {_f(f['recall'])} ({f['flagged']})"]
        lines.append(f"| {path} | " + " | ".join(cells) + " |")
    return lines


def _probe_length_md(summary: list[dict[str, Any]] | None) -> list[str]:
    if not summary:
        return ["Not run (`python -m bench.ablations.probe_length`)."]
    lines = [
        "`python -m bench.ablations.probe_length`: the engine's trainability probe (`worker/engine/probe.py`) "
        "from each candidate's tuned initialization, on the batch Preflight sees, with its "
        "labels; the probe figure alone against ground truth B, per probe length and rate set: "
        "best precision of flagging at recall >= 0.8 / Spearman with -loss. Cost: training "
        "steps per candidate. The shipped length and rates are the training half's best.",
        "",
        "| steps | rates | cost | training half | held-out half |",
        "|---|---|---|---|---|",
    ]
    for row in summary:
        cells = [
            f"{_f(row[h]['best_precision_at_recall_0.8'])} / {_f(row[h]['spearman'])}" for h in ("train", "held-out")
        ]
        rates = ", ".join(f"{r:g}" for r in row["rates"])
        lines.append(f"| {row['steps']} | {rates} | {_f(row['cost'], 0)} | " + " | ".join(cells) + " |")
    return lines


def _output_std_md(summary: dict[str, Any] | None) -> list[str]:
    if not summary:
        return ["Not run (`python -m bench.ablations.output_std`)."]
    lines = [
        "`python -m bench.ablations.output_std`: each survivor conditioned with another `output_std` "
        "(the head unit's target output std; every other option at its default) and trained "
        "from that tuned initialization; fraction trained better than from the spec's "
        "initialization (median ln(spec / tuned)). The default was chosen on the training half.",
        "",
        "| output_std | training half | held-out half | all |",
        "|---|---|---|---|",
    ]
    for variant, halves in summary.items():
        cells = [
            f"{_f(100 * h['better'], 0)} % of {h['n']} ({_f(h['median_log_ratio'])})"
            for h in (halves["train"], halves["held-out"], halves["all"])
        ]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def _pr(v: dict[str, float]) -> str:
    return f"precision {_f(v['precision'])} / recall {_f(v['recall'])} ({v['flagged']} flagged)"


def _calibration_md(cal: dict[str, Any], fig: dict[str, Any]) -> list[str]:
    shipped = cal["shipped"]
    alone = shipped.get("without_probe") or {"weights": {}, "fill": {}, "prune_below": math.nan}
    lines = [
        "## The score's calibration",
        "",
        "`python -m bench.pipeline.calibrate` fits the engine's form "
        "`score = -sum_c w_c f_c`, `f_c = log1p(|c| / t_c)` (or `fill_c` when the component was "
        "not measured) by non-negative least squares (with an intercept) against the capped "
        f"normalized trained loss of the training half ({cal['train_n']} candidates: within each "
        "family, alternate candidates in id order), and sets the prune cut where a logistic fit, on "
        "the training half, of untrainable on the score crosses 1/2 (the first rule, the cut with the "
        "training half's best precision at recall >= 0.8, sat at the edge of the training half's "
        "untrainable scores and is compared below). It does so twice: with every component, and "
        "without the trainability probe (what scores a report whose probe did not run). "
        "It writes `worker/engine/score_weights.json`, which "
        "the engine loads; `python -m bench.pipeline.calibrate --check` compares it with a fresh fit. "
        f"Shipped weights equal a fresh fit on this cache: **{'yes' if cal['shipped_matches_fresh_fit'] else 'NO'}**.",
        "",
        f"Shipped (fitted on ground truth {shipped['truth']}; prune below {_f(shipped['prune_below'], 4)}):",
        "",
        "| component | weight w_c | fill_c (when not measured) | t_c | w_c without the probe | fill_c without |",
        "|---|---|---|---|---|---|",
        *[
            f"| {k} | {_f(w, 4)} | {_f(shipped['fill'][k], 3)} | {_f(cal['thresholds'].get(k), 2)} "
            f"| {_f(alone['weights'][k], 4)} | {_f(alone['fill'][k], 3)} |"
            for k, w in shipped["weights"].items()
        ],
        "",
        f"Without the probe (`probe_steps: 0`, or a probe that could not run) the engine scores "
        f"with the second fit and prunes below {_f(alone['prune_below'], 4)}.",
        "",
        "Which ground truth to fit, and how to treat a skipped diagnostic, decided on the "
        "held-out half (Spearman with -loss; the fit's own verdict's precision / recall):",
        "",
        "| fit | Spearman A | Spearman B | precision A | recall A | precision B | recall B | cut |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c in cal["choices"].items():
        lines.append(
            f"| {name} | {_f(c['spearman_A'])} | {_f(c['spearman_B'])} | {_f(c['precision_A'])} "
            f"| {_f(c['recall_A'])} | {_f(c['precision_B'])} | {_f(c['recall_B'])} | {_f(c['prune_below'], 3)} |"
        )
    return lines


def write_markdown(fig: dict[str, Any], context: dict[str, Any], path: Path) -> None:
    """The report: protocol, machine, command, tables, targets and plots."""
    held = fig.get("ranking_heldout", {})
    cal = fig.get("calibration") or {}
    context = context | {"scaling": context.get("scaling")}
    lines = [
        "# Trainability benchmark: Preflight against zero-cost proxies and init peers",
        "",
        f"Regenerate: `{context['command']}` (= `python -m bench --extra probe_length --extra "
        "output_std --extra gaussian_path`; cached stages in `bench/out/`, not committed: a fresh clone "
        "computes them first; an extra reruns only when the engine or the score weights changed, and "
        "`python -m bench --report-only` rebuilds this page from that cache without training).",
        "",
        f"Machine: {context['machine']}. Date: {context['date']}. Wall time: {context['wall']}.",
        "",
        f"Preflight: {context.get('engine', 'n/a')}.",
        *(["", context["note"]] if context.get("note") else []),
        "",
        "## Protocol",
        "",
        f"- Candidates: {fig['n']} ({', '.join(f'{k} {v}' for k, v in fig['families'].items())}), "
        "sampled by `bench/pipeline/candidates.py`; digits (1x8x8 for CNNs) and breast cancer, both "
        "bundled in scikit-learn, 70/30 stratified split.",
        f"- Training: {context['protocol_text']}",
        "- Untrainable: best final training loss over the learning-rate grid >= 0.5 x ln C "
        "(the model does not halve the loss of the uniform prediction), or every rate diverged "
        f"(a mini-batch loss non-finite or > 100 ln C). Untrainable from the spec initialization: "
        f"{fig['untrainable']} of {fig['n']} "
        f"({', '.join(f'{k} {v}' for k, v in fig['untrainable_by_family'].items())}).",
        "- Scores: every proxy in log space, float64, higher = better; batch sizes and "
        "direction fixes below. nan (cannot score) ranks worst. Correlations are with the "
        "negated normalized training loss (loss / ln C) and with test accuracy, so higher is better.",
        f"- Cost: seconds per candidate on one CPU thread, and the same divided by one training "
        f"step (forward, backward, update) of that candidate at batch 64. One protocol run "
        f"costs about {_f(fig['train_step_equivalents'], 0)} training steps per initialization.",
        "",
        "| proxy | batch | direction | source |",
        "|---|---|---|---|",
        *[f"| {p.name} | {p.batch_size or 'n/a'} | {p.direction} | {p.citation} |" for p in PROXIES.values()],
        "",
        "## Ranking trainability",
        "",
        "Two ground truths. **A**: trained from the spec's own initialization: what the "
        "zero-cost proxies score (the network as it stands), and what an ungated search trains. "
        "**B**: trained from Preflight's tuned initialization: what a gated search trains its "
        "survivors from, and what Preflight's score (measured after conditioning) is about. "
        f"Untrainable: A {fig['untrainable']}, B {fig['untrainable_tuned']} of {fig['n']}.",
        "",
        "`preflight` is the score and verdict the engine ships: the calibrated form of "
        "`worker/engine/score.py` with the weights of `worker/engine/score_weights.json`, recomputed from each "
        "cached report's components (a pure function of them). Those weights were fitted on "
        "half of these candidates (next section), so **the held-out tables are the figures that "
        "count**; the all-candidate tables include the fit's training half. `preflight_handset` "
        "is the engine's score before the calibration (hand-set weights, quadratic penalties, "
        "a skipped diagnostic free, prune below -3), from the same components. "
        "`preflight_no_probe` is what the engine gives with the trainability probe off "
        "(`probe_steps: 0`): the calibration fitted without `probe_loss`, from the same "
        "reports; its cost leaves out the probe's seconds.",
        "",
    ]
    if held:
        lines += [
            f"### Held-out half ({fig['heldout_n']} candidates; untrainable: A {fig['heldout_untrainable']}, "
            f"B {fig['heldout_untrainable_tuned']})",
            "",
            "**A: trained from the spec's initialization**",
            "",
            *_ranking_md(held),
            "",
            f"Verdicts against A: shipped {_pr(fig['verdict_heldout'])}; without the probe "
            f"{_pr(fig['no_probe_verdict_heldout'])}; "
            f"hand-set {_pr(fig['handset_verdict_heldout'])}. "
            f"Optuna MedianPruner on the training curves: precision {_f(fig['median_pruner_heldout']['precision'])}, "
            f"recall {_f(fig['median_pruner_heldout']['recall'])}.",
            "",
            "**B: trained from Preflight's tuned initialization**",
            "",
            *_ranking_md(fig["ranking_heldout_tuned"]),
            "",
            f"Verdicts against B: shipped {_pr(fig['verdict_heldout_tuned'])}; without the probe "
            f"{_pr(fig['no_probe_verdict_heldout_tuned'])}; hand-set {_pr(fig['handset_verdict_heldout_tuned'])}.",
            "",
        ]
    lines += [
        f"### All {fig['n']} candidates (includes the calibration's training half)",
        "",
        "**A: trained from the spec's initialization**",
        "",
        *_ranking_md(fig["ranking_all"]),
        "",
        f"Shipped verdict against A: {_pr(fig['verdict_all'])}. "
        f"Optuna MedianPruner on the training curves (middle learning rate, {fig['median_pruner']['orders']} "
        f"random orders, {fig['median_pruner']['n_startup_trials']} startup trials): precision "
        f"{_f(fig['median_pruner']['precision'])}, recall {_f(fig['median_pruner']['recall'])}, at "
        f"{_f(100 * fig['median_pruner']['fraction_of_training'], 0)} % of the training each candidate would get.",
        "",
        "**B: trained from Preflight's tuned initialization**",
        "",
        *_ranking_md(fig["ranking_all_tuned"]),
        "",
        f"Shipped verdict against B: {_pr(fig['verdict_all_tuned'])}.",
    ]
    if fig["preflight_errors"]:
        lines += [
            "",
            f"Preflight failed on {len(fig['preflight_errors'])} candidates (scored as nan = worst):",
            "",
        ]
        lines += [f"- {e}" for e in fig["preflight_errors"][:10]]
    if cal:
        lines += ["", *_calibration_md(cal, fig)]
    lines += ["", "### The trainability probe: length and rates", "", *_probe_length_md(context.get("probe_length"))]
    lines += [
        "",
        "### The service's default path: a Gaussian batch",
        "",
        *_gaussian_path_md(context.get("gaussian_path")),
    ]
    lines += ["", "## Tuning: trained loss from Preflight's tuned initialization vs the others", ""]
    for group in ("all", "survivors"):
        lines += [f"**{group}**", "", *_tuning_md(fig["tuning"][group]), ""]
    lines += [
        "Tuned vs spec initialization, by subset of the survivors (Preflight verdict keep):",
        "",
        "| subset | n | tuned better | median loss improvement | median ln(spec / tuned) |",
        "|---|---|---|---|---|",
    ]
    for group, table in fig["tuning"].items():
        if group.startswith("survivors") and group != "survivors":
            t = table["spec"]
            lines.append(
                f"| {group} | {t['n']} | {_f(t['better'])} | {_f(t['median_improvement'], 3)} "
                f"| {_f(t['median_log_ratio'])} |"
            )
    lines.append("")
    lines += ["### Tuning: the output std", "", *_output_std_md(context.get("output_std")), ""]
    lines += [
        "## The scaling-calculus LIBSVM table on the bundled datasets",
        "",
        *_scaling_md(context.get("scaling")),
        "",
    ]
    lines += ["## Targets", "", *context["targets"], ""]
    lines += ["## End-to-end gated search", "", context["e2e"], ""]
    lines += [
        "## Plots",
        "",
        f"![score vs trained loss]({PLOT_DIR}/score_vs_loss.png)",
        "",
        f"![precision-recall of pruning]({PLOT_DIR}/pruning_pr.png)",
        "",
        f"![tuned vs default loss]({PLOT_DIR}/tuned_vs_default.png)",
        "",
    ]
    path.write_text("\n".join(lines))


def plots(rows: list[dict[str, Any]], directory: Path, heldout: set[str] | None = None) -> None:
    """score_vs_loss.png, pruning_pr.png, tuned_vs_default.png. Preflight's scores are shown
    on the held-out candidates only (the others were used to fit the shipped weights)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    methods = [*PROXIES, "preflight", "preflight_no_probe", "preflight_handset"]
    scores = {m: [r["proxies"].get(m, math.nan) for r in rows] for m in PROXIES}
    for m in ("preflight", "preflight_no_probe", "preflight_handset"):  # fitted on the other half: held-out only
        scores[m] = [r[m] if heldout is None or r["id"] in heldout else math.nan for r in rows]
    loss = np.minimum([r["norm_loss"] for r in rows], 1.2)
    bad = np.array([r["untrainable"] for r in rows])
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(methods) / cols), cols, figsize=(16, 3.2 * math.ceil(len(methods) / cols)))
    for ax, m in zip(axes.flat, methods, strict=False):
        s = np.asarray(scores[m], dtype=float)
        keep = ~np.isnan(s) if m.startswith("preflight") else np.ones(len(s), dtype=bool)
        ax.scatter(s[~bad & keep], loss[~bad & keep], s=8, c="tab:blue", label="trainable")
        ax.scatter(s[bad & keep], loss[bad & keep], s=8, c="tab:red", label="untrainable")
        rho = metrics.spearman(s[keep], -loss[keep])
        ax.set_title(f"{m}{' (held-out)' if m.startswith('preflight') and heldout else ''}  rho={rho:.2f}", fontsize=9)
        finite = s[np.isfinite(s)]
        if finite.size and np.ptp(finite) > 1e3:  # scores spread over orders of magnitude
            ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("score (higher = better)", fontsize=8)
        ax.set_ylabel("A: loss / ln C (capped 1.2)", fontsize=8)
    for ax in list(axes.flat)[len(methods) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(directory / "score_vs_loss.png", dpi=80)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 5))
    for m in methods:
        s = np.asarray(scores[m], dtype=float)
        keep = ~np.isnan(s) if m.startswith("preflight") else np.ones(len(s), dtype=bool)
        p, r = metrics.precision_recall_curve(s[keep], bad[keep])
        p, r = p[~np.isnan(p)], r[~np.isnan(p)]  # the thresholds a score can cut at
        style = "-" if m.startswith("preflight") else ":"
        label = m + (" (held-out)" if m.startswith("preflight") and heldout else "")
        ax.plot(r, p, style, label=label, linewidth=2 if m.startswith("preflight") else 1)
    ax.plot([0.8], [0.9], "k*", markersize=12, label="target (recall 0.8, precision 0.9)")
    ax.set_xlabel("recall of untrainable candidates")
    ax.set_ylabel("precision")
    ax.set_title("Pruning the k worst-scored candidates, k = 1..n")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(directory / "pruning_pr.png", dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    tuned = np.array([r["tuned_loss"] for r in rows], dtype=float)
    for ax, (label, other) in zip(
        axes,
        (
            ("spec initialization", [r["loss"] for r in rows]),
            ("PyTorch default initialization", [r["peers"].get("torch_default", math.nan) for r in rows]),
        ),
        strict=True,
    ):
        o = np.minimum(np.asarray(other, dtype=float), 10.0)
        t = np.minimum(tuned, 10.0)
        ax.scatter(o, t, s=10, c=np.where(bad, "tab:red", "tab:blue"))
        ax.plot([1e-4, 10], [1e-4, 10], "k--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"trained loss from {label} (diverged = 10)")
        ax.set_ylabel("trained loss from Preflight's tuned initialization")
        ax.set_title(f"below the diagonal: tuned better ({np.mean(t < o):.0%})")
    fig.tight_layout()
    fig.savefig(directory / "tuned_vs_default.png", dpi=80)
    plt.close(fig)

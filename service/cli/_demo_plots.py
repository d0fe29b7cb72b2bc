"""The figures of `preflight demo` (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

__all__ = ["write_plots"]

COLORS = {
    "no gate": "tab:gray",
    "median pruner": "tab:orange",
    "preflight gate": "tab:blue",
    "gate + median pruner": "tab:purple",
}


def write_plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Write the three figures into ``out``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, draw in (
        ("apjn_per_block.png", _apjn),
        ("score_vs_accuracy.png", _score_vs_accuracy),
        ("accuracy_vs_compute.png", _accuracy_vs_compute),
    ):
        fig = draw(plt, results)
        path = out / name
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def _positive(values: list[Any]) -> list[float]:
    return [float(v) if v is not None and math.isfinite(float(v)) and float(v) > 0 else math.nan for v in values]


def _apjn(plt: Any, results: dict[str, Any]) -> Any:
    profiles = results.get("apjn") or {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, role in zip(axes, ("best", "pruned"), strict=True):
        profile = profiles.get(role)
        ax.axhline(1.0, color="black", lw=0.8, ls=":")
        ax.set_xlabel("block boundary l -> l+1")
        if not profile or not profile["blocks"]:
            ax.set_title(f"{role}: none in this run")
            continue
        blocks = profile["blocks"]
        index = [b.get("index", i) for i, b in enumerate(blocks)]
        ax.semilogy(
            index, _positive([b.get("apjn_before") for b in blocks]), "o-", color="tab:red", label="before tuning"
        )
        ax.semilogy(
            index, _positive([b.get("apjn_after") for b in blocks]), "s-", color="tab:green", label="after tuning"
        )
        score = profile.get("score")
        label = "best trained" if role == "best" else "pruned before training"
        extra = f", val. acc. {profile['accuracy']:.3f}" if profile.get("accuracy") is not None else ""
        ax.set_title(
            f"{label}: {profile['name']}\nscore {score:.2f}{extra}" if score is not None else label, fontsize=9
        )
        ax.legend(fontsize=8, loc="best", framealpha=0.9)
    axes[0].set_ylabel("APJN J^{l,l+1}")
    fig.suptitle("Average partial Jacobian norm per block, before and after Preflight's tuning", y=1.06)
    return fig


def _score_vs_accuracy(plt: Any, results: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    points = [p for p in results.get("score_vs_accuracy") or [] if p.get("score") is not None]
    for verdict, color in (("keep", "tab:blue"), ("prune", "tab:red")):
        chosen = [p for p in points if p.get("verdict") == verdict]
        ax.scatter(
            [p["score"] for p in chosen],
            [p["accuracy"] for p in chosen],
            color=color,
            alpha=0.75,
            label=f"verdict {verdict}: trained from plain init ({len(chosen)})",
        )
    gated = next((s for s in results["searches"] if s.name == "preflight gate"), None)
    if gated is not None:
        kept = [t for t in gated.trials if t.score is not None and t.accuracy is not None and t.state == "complete"]
        ax.scatter(
            [t.score for t in kept],
            [t.accuracy for t in kept],
            marker="x",
            color="tab:green",
            label=f"gated search: trained from tuned init ({len(kept)})",
        )
    ax.set_xscale("symlog")  # scores of hopeless candidates reach -1e5; kept ones sit near 0
    _plain_ticks(ax.xaxis)
    ax.set_xlabel("conditioning score (higher is better conditioned; symmetric log scale)")
    ax.set_ylabel("validation accuracy after training")
    ax.set_title(f"Conditioning score against trained accuracy ({results.get('dataset', 'digits')})")
    _legend_outside(ax)
    return fig


def _plain_ticks(axis: Any) -> None:
    """Tick labels as plain numbers (-1000, -1, 0, 1), not matplotlib's -6.09625x10^-1 on a symlog axis."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _legend_outside(ax: Any) -> None:
    """The legend below the axes, never over the data."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, frameon=False)


def _accuracy_vs_compute(plt: Any, results: dict[str, Any]) -> Any:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    firsts = []
    for search in results["searches"]:
        spent, best, xs, ys = 0.0, 0.0, [0.0], [0.0]
        for trial in search.trials:
            spent += trial.compute
            if trial.state == "complete" and trial.accuracy is not None:
                best = max(best, trial.accuracy)
            xs.append(spent)
            ys.append(best)
        firsts += [y for y in ys if y > 0][:1]
        ax.step(xs, ys, where="post", color=COLORS.get(search.name), label=f"{search.name} ({spent:.0f} s)")
    ax.set_xlabel("compute spent (s): training + conditioning")
    ax.set_ylabel("best validation accuracy so far")
    # Digits saturate early: zoom on where the searches differ (the first non-zero best).
    ax.set_ylim(bottom=max(0.0, min(firsts, default=0.0) - 0.02), top=1.0)
    ax.set_title("Best accuracy against compute, the same search four ways")
    _legend_outside(ax)
    return fig

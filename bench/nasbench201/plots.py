"""The NAS-Bench-201 report's figure: each method's score against the table's trained accuracy,
one panel per method, on the same cells (``docs/nasbench201/score_vs_accuracy.png``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["write_score_vs_accuracy"]


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks in [0, 1] (a method's raw scores span many decades; nan last)."""
    order = np.argsort(np.where(np.isnan(values), -np.inf, values), kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values)) / max(1, len(values) - 1)
    return ranks


def write_score_vs_accuracy(
    columns: dict[str, np.ndarray], accuracy: np.ndarray, rho: dict[str, float], path: Path
) -> Path:
    """One scatter per method: its score's rank among the cells (x) against the accuracy (y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(columns)
    cols = 4
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), sharey=True, squeeze=False)
    for ax, name in zip(axes.flat, names, strict=False):
        color = "tab:red" if name == "preflight" else "tab:blue"
        ax.scatter(_ranks(columns[name]), accuracy, s=4, alpha=0.5, color=color)
        ax.set_title(f"{name} (Spearman {rho[name]:.2f})", fontsize=9)
        ax.set_xlabel("rank of the score among the cells", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("CIFAR-10 test accuracy (%)", fontsize=8)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

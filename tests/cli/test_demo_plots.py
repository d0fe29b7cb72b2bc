"""The demo's plots are readable: plain tick labels on the symmetric-log score axis (not
-6.09625x10^-1) and legends outside the data."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def _results() -> dict:
    trial = SimpleNamespace(score=-0.61, accuracy=0.97, state="complete", compute=3.0)
    pairs = ((-0.0609625, 0.98), (-0.61, 0.97), (-25.0, 0.5), (-1.2e5, 0.1))
    points = [{"score": s, "accuracy": a, "verdict": "keep" if s > -1 else "prune"} for s, a in pairs]
    return {"score_vs_accuracy": points, "searches": [SimpleNamespace(name="preflight gate", trials=[trial])]}


def test_the_score_axis_has_plain_tick_labels_and_the_legend_sits_outside() -> None:
    import matplotlib.pyplot as plt

    from service.cli._demo_plots import _score_vs_accuracy

    fig = _score_vs_accuracy(plt, _results())
    fig.canvas.draw()
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all("times" not in label and "^" not in label for label in labels), labels
    legend = ax.get_legend().get_window_extent()
    assert legend.y1 <= ax.get_window_extent().y0  # below the axes, not over the points
    plt.close(fig)

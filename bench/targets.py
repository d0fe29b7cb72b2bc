"""Issue 6's targets, checked against the measured figures: met or missed, and by how much."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["target_lines"]


def _fmt(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _best_peer(table: dict[str, dict[str, float]]) -> tuple[str, float]:
    peers = {m: t["spearman_loss"] for m, t in table.items() if not m.startswith("preflight")}
    finite = {m: v for m, v in peers.items() if not math.isnan(v)}
    if not finite:
        return "none", math.nan
    best = max(finite, key=finite.__getitem__)
    return best, finite[best]


def _ranking(table: dict[str, dict[str, float]], method: str, where: str) -> str:
    if method not in table:
        return f"- Ranking ({where}, {method}): not measured."
    mine = table[method]["spearman_loss"]
    peer, theirs = _best_peer(table)
    met = not math.isnan(mine) and mine > theirs
    gap = mine - theirs
    return (
        f"- Ranking ({where}): {method} Spearman {_fmt(mine)} vs best peer {peer} {_fmt(theirs)}: "
        f"**{'met' if met else 'missed'}** (margin {gap:+.2f})."
    )


def _flagging(figures: dict[str, Any], key: str, where: str) -> str:
    v = figures.get(key)
    if not v:
        return f"- Flagging ({where}): not measured."
    p, r = v["precision"], v["recall"]
    met = p >= 0.9 and r >= 0.8
    return (
        f"- Flagging untrainable ({where}): precision {_fmt(p)} (target >= 0.9, {p - 0.9:+.2f}), "
        f"recall {_fmt(r)} (target >= 0.8, {r - 0.8:+.2f}): **{'met' if met else 'missed'}**."
    )


def _held_tuning(figures: dict[str, Any]) -> str:
    held = figures["tuning"].get("survivors, held-out half", {}).get("spec", {})
    if not held.get("n"):
        return ""
    return f"; held-out survivors {_fmt(100 * held['better'])} % of {held['n']}"


def target_lines(figures: dict[str, Any], e2e: dict[str, Any] | None = None) -> list[str]:
    """One markdown bullet per target, for both ground truths (A: spec init, B: tuned init),
    on the held-out half (the shipped score was fitted on the other half)."""
    lines = []
    if "ranking_heldout" in figures:
        lines += [
            _ranking(figures["ranking_heldout"], "preflight", "A, held-out, shipped score"),
            _ranking(figures["ranking_heldout_tuned"], "preflight", "B, held-out, shipped score"),
        ]
    else:
        lines.append("- Ranking: no held-out split (too few candidates with a report); not measured.")
    lines += [
        _flagging(figures, "verdict_heldout", "A, held-out, shipped verdict"),
        _flagging(figures, "verdict_heldout_tuned", "B, held-out, shipped verdict"),
    ]
    survivors = figures["tuning"].get("survivors", {}).get("spec", {})
    better = survivors.get("better", math.nan)
    if survivors.get("n"):
        met = better >= 0.8
        lines.append(
            f"- Tuning: survivors better from the tuned initialization than from the spec's on "
            f"{_fmt(100 * better)} % of {survivors['n']} (target >= 80 %): "
            f"**{'met' if met else 'missed'}** ({100 * (better - 0.8):+.0f} points)"
            + _held_tuning(figures)
            + "."
        )
    else:
        lines.append("- Tuning: no survivors trained from the tuned initialization; not measured.")
    if not e2e or not e2e.get("median_ratio"):
        lines.append(
            "- Gated search at half the compute: **not measured** (see the end-to-end section)."
        )
        return lines
    ratio = e2e["median_ratio"].get("preflight gate", math.nan)
    lines.append(
        f"- Gated search: median compute to the ungated best accuracy = {_fmt(ratio)} x the "
        f"ungated search's (target <= 0.5): **{'met' if ratio <= 0.5 else 'missed'}** "
        f"({ratio - 0.5:+.2f}; MedianPruner {_fmt(e2e['median_ratio'].get('median pruner', math.nan))})."
    )
    return lines

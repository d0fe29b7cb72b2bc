"""The service's default path: conditioning on a Gaussian batch, the probe on random labels.

    python -m bench.ablations.gaussian_path  # (= python -m bench --extra gaussian_path)

A submission without ``options.data`` is conditioned on a Gaussian batch of the input shape
(``worker.engine.condition(spec)``), and the trainability probe then fits random classes: a
memorization probe, scored with the weights fitted on labelled probes. This runs exactly that
on every benchmark candidate (every option at its default) and measures the engine's own score
and verdict against ground truth B (trained from the tuned initialization of the *real-batch*
report, what the benchmark trains), next to the real-batch figures of the main run: Spearman
with B's trained loss, and the verdict's precision and recall, on the calibration's held-out
half and on all candidates. docs/conditioning.md, section 7, and docs/service.md quote it.
Written to ``<out>/gaussian_path.json``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from bench.ablations import v1_cache
from bench.pipeline import metrics
from bench.pipeline.run import finish_extra, imap_spawned

__all__ = ["main", "summarize"]


def _task(cid: str) -> tuple[str, float, str | None]:
    import torch

    from bench.pipeline.candidates import sample_candidates
    from worker.engine import condition

    torch.set_num_threads(1)
    candidate = {c.id: c for c in sample_candidates(160, seed=0)}[cid]
    report = condition(candidate.spec)
    return cid, math.nan if report.score is None else float(report.score), report.verdict


def _figures(rows: list[dict[str, Any]], score: str, verdict: str) -> dict[str, Any]:
    truth = [bool(r["tuned_untrainable"]) for r in rows]
    flags = metrics.flags_figures([r[verdict] == "prune" for r in rows], truth)
    return {
        "n": len(rows),
        "untrainable": sum(truth),
        "spearman": metrics.spearman([r[score] for r in rows], [-r["tuned_norm_loss"] for r in rows]),
        "precision": flags.precision,
        "recall": flags.recall,
        "flagged": sum(r[verdict] == "prune" for r in rows),
    }


def summarize(rows: list[dict[str, Any]], heldout: set[str]) -> dict[str, Any]:
    """Per half (held-out, all): the Gaussian path's figures and the real batch's."""
    out: dict[str, Any] = {}
    for half, keep in (("held-out", lambda r: r["id"] in heldout), ("all", lambda _r: True)):
        subset = [r for r in rows if keep(r)]
        out[half] = {
            "gaussian": _figures(subset, "gaussian_score", "gaussian_verdict"),
            "real batch": _figures(subset, "preflight", "verdict"),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.pipeline import analysis, calibrate
    from bench.pipeline.candidates import sample_candidates
    from bench.pipeline.protocol import FULL
    from bench.pipeline.rows import collect

    out = v1_cache(argv, "python -m bench.ablations.gaussian_path", __doc__.split("\n\n")[0])
    rows = collect(sample_candidates(160, seed=0), out, FULL)
    analysis.shipped_scores_(rows)
    usable = [r for r in rows if r["tuned_untrainable"] is not None and r["verdict"] is not None]
    runs = {cid: {"score": s, "verdict": v} for cid, s, v in imap_spawned(_task, [r["id"] for r in usable])}
    for r in usable:
        r["gaussian_score"], r["gaussian_verdict"] = runs[r["id"]]["score"], runs[r["id"]]["verdict"]
    heldout = set(calibrate.split_rows(rows)[1])
    return finish_extra(out, "gaussian_path", {"runs": runs, "summary": summarize(usable, heldout)})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""How long the trainability probe runs, and at which rates: chosen on the training half.

    python -m bench.ablations.probe_length  # (= python -m bench --extra probe_length)

For every candidate with a cached Preflight report and tuned-init ground truth (B), runs the
engine's probe (``worker.engine.probe.run_probe``) from the tuned initialization for ``MAX_STEPS``
steps at each rate of the default grid, on the batch Preflight sees. The loss the probe
records before step ``k`` is what a ``k``-step probe would end on, so one run gives every
length. For each length and rate subset it reports, on the calibration's training half and
on its held-out half, the best precision of flagging B's untrainable candidates at recall >=
0.8 and the Spearman correlation with B's trained loss. ``ConditionOptions.probe_steps`` and
``probe_lrs`` are the training half's best (docs/conditioning.md, section 7).
Written to ``<out>/probe_length.json``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from bench.ablations import v1_cache
from bench.pipeline import metrics
from bench.pipeline.run import finish_extra, imap_spawned, read_json

__all__ = ["LENGTHS", "MAX_STEPS", "RATE_SETS", "main", "probe_at", "summarize"]

MAX_STEPS = 25
LENGTHS = (5, 10, 15, 20, 25)
RATE_SETS = ((0.1, 0.03, 0.01), (0.1, 0.03), (0.03, 0.01), (0.1,), (0.03,))


def _task(args: tuple[str, dict[str, float]]) -> tuple[str, dict[str, list[float | None]], float]:
    import torch

    from bench.pipeline.candidates import sample_candidates
    from bench.pipeline.datasets import load_key
    from bench.pipeline.run import BATCH, _model
    from nas.options import ConditionOptions
    from worker.engine.probe import run_probe

    cid, scales = args
    torch.set_num_threads(1)
    candidate = {c.id: c for c in sample_candidates(160, seed=0)}[cid]
    data = load_key(candidate.dataset)
    x, y = data.batch(BATCH)
    opts = ConditionOptions()
    result = run_probe(
        _model(candidate, scales),
        x,
        y,
        steps=MAX_STEPS,
        lrs=RATE_SETS[0],
        momentum=opts.probe_momentum,
        seed=opts.seed + 5,
    )
    return cid, result.curves, float(result.reference or math.nan)


def probe_at(curves: dict[str, list[float | None]], reference: float, steps: int, rates: tuple[float, ...]) -> float:
    """The probe figure a ``steps``-step probe at ``rates`` gives, from longer curves: the
    lowest loss at step ``steps`` over the rates, normalized and capped as the engine does."""
    from worker.engine.probe import CAP

    best = math.inf
    for rate in rates:
        curve = curves[f"{rate:g}"][: steps + 1]
        # a curve ends at its first divergence (a null): a probe that long diverged too
        last = curve[-1] if len(curve) == steps + 1 else None
        if last is not None and all(v is not None for v in curve):
            best = min(best, last)
    return min(best / reference, CAP) if math.isfinite(best) else CAP


def summarize(
    runs: dict[str, dict[str, Any]], truth: dict[str, tuple[float, bool]], train_ids: set[str]
) -> list[dict[str, Any]]:
    """Per length and rate set, per half: best precision at recall >= 0.8 and Spearman."""
    table = []
    for steps in LENGTHS:
        for rates in RATE_SETS:
            row: dict[str, Any] = {
                "steps": steps,
                "rates": list(rates),
                "cost": len(rates) * (steps + 1 / 3),
            }
            for half, keep in (("train", True), ("held-out", False)):
                ids = [c for c in runs if c in truth and (c in train_ids) == keep]
                figure = [probe_at(runs[c]["curves"], runs[c]["reference"], steps, rates) for c in ids]
                bad = [truth[c][1] for c in ids]
                precision, recall = metrics.precision_recall_curve(-np.asarray(figure), bad)
                ok = recall >= 0.8
                row[half] = {
                    "n": len(ids),
                    "best_precision_at_recall_0.8": float(precision[ok].max()) if ok.any() else math.nan,
                    "spearman": metrics.spearman([-f for f in figure], [-truth[c][0] for c in ids]),
                }
            table.append(row)
    return table


def main(argv: list[str] | None = None) -> int:
    from bench.pipeline import calibrate
    from bench.pipeline.candidates import sample_candidates
    from bench.pipeline.protocol import FULL
    from bench.pipeline.rows import collect

    out = v1_cache(argv, "python -m bench.ablations.probe_length", __doc__.split("\n\n")[0])
    rows = collect(sample_candidates(160, seed=0), out, FULL)
    usable = [r for r in rows if r["components"] and r["tuned_untrainable"] is not None]
    truth = {r["id"]: calibrate._truth(r, "B") for r in usable}
    tasks = [(r["id"], read_json(out / "preflight" / f"{r['id']}.json")["scales"]) for r in usable]
    runs: dict[str, dict[str, Any]] = {}
    for cid, curves, reference in imap_spawned(_task, tasks):
        runs[cid] = {"curves": curves, "reference": reference}
    train_ids = set(calibrate.split_rows(rows)[0])
    return finish_extra(
        out,
        "probe_length",
        {"max_steps": MAX_STEPS, "runs": runs, "summary": summarize(runs, truth, train_ids)},
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

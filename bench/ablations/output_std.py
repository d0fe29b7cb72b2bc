"""Tuning ablation: the head's output std target, on the benchmark's survivors.

    python -m bench.ablations.output_std  # (= python -m bench --extra output_std)

For each candidate the shipped verdict keeps, conditions it with ``output_std`` set to each of
``VARIANTS`` (every other option at its default), trains the protocol from the tuned
initialization, and records the best loss. The default's own figures are the cache's
``tuned`` stage. Written to ``<out>/output_std.json``; ``docs/benchmarks.md`` shows, per
variant, the fraction of survivors that train better from the tuned initialization than from
the spec's, on the calibration's training half and on its held-out half (the default was
chosen on the training half).
"""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any

from bench.ablations import v1_cache
from bench.pipeline.run import finish_extra, imap_spawned, read_json

__all__ = ["VARIANTS", "main", "summarize"]

VARIANTS: dict[str, float | None] = {"0.05": 0.05, "0.2": 0.2, "1.0": 1.0, "null": None}


def _task(args: tuple[str, str, float | None]) -> tuple[str, str, float]:
    import torch

    from bench.pipeline.candidates import sample_candidates
    from bench.pipeline.datasets import load_key
    from bench.pipeline.protocol import FULL, train
    from bench.pipeline.run import BATCH, _model
    from worker.engine import condition

    cid, name, output_std = args
    torch.set_num_threads(1)
    candidate = {c.id: c for c in sample_candidates(160, seed=0)}[cid]
    data = load_key(candidate.dataset)
    x, y = data.batch(BATCH)
    report = condition(candidate.spec, data={"x": x, "y": y}, options={"output_std": output_std})
    result = train(lambda: _model(candidate, dict(report.scales)), data, FULL)
    return cid, name, result.best_loss


def _log_ratio(spec: float, tuned: float) -> float:
    """ln(spec / tuned); a diverged run (inf) is infinitely worse, two diverged ones a tie."""
    if math.isinf(spec) and math.isinf(tuned):
        return 0.0
    return math.log(max(spec, 1e-12)) - math.log(max(tuned, 1e-12))


def summarize(
    losses: dict[str, dict[str, float]], spec: dict[str, float], train_ids: set[str]
) -> dict[str, dict[str, Any]]:
    """Per variant and half: n, fraction tuned better than spec, median ln(spec / tuned)."""
    out: dict[str, dict[str, Any]] = {}
    variants = sorted({v for per in losses.values() for v in per})
    for variant in variants:
        out[variant] = {}
        for half, keep in (("train", True), ("held-out", False), ("all", None)):
            ids = [c for c in losses if variant in losses[c] and (keep is None or (c in train_ids) == keep)]
            better = [losses[c][variant] < spec[c] for c in ids]
            ratios = [_log_ratio(spec[c], losses[c][variant]) for c in ids]
            out[variant][half] = {
                "n": len(ids),
                "better": sum(better) / len(ids) if ids else math.nan,
                "median_log_ratio": statistics.median(ratios) if ratios else math.nan,
            }
    return out


def main(argv: list[str] | None = None) -> int:
    from nas.options import ConditionOptions, Thresholds
    from worker.engine._calibration import load
    from worker.engine.score import score

    out = v1_cache(argv, "python -m bench.ablations.output_std", __doc__.split("\n\n")[0])
    thresholds = Thresholds()
    survivors, spec, losses = [], {}, {}
    for path in sorted((out / "preflight").glob("*.json")):
        report = read_json(path)
        tuned = out / "tuned" / path.name
        if not report.get("components") or not tuned.exists():
            continue
        if score(report["components"], thresholds).verdict != "keep":
            continue
        survivors.append(path.stem)
        spec[path.stem] = read_json(out / "spec" / path.name)["spec"]["best_loss"]
        losses[path.stem] = {f"{ConditionOptions().output_std} (default)": read_json(tuned)["tuned"]["best_loss"]}
    tasks = [(cid, name, value) for cid in survivors for name, value in VARIANTS.items()]
    for cid, name, loss in imap_spawned(_task, tasks):
        losses[cid][name] = loss
    train_ids = set(load()["train_ids"])
    return finish_extra(
        out, "output_std", {"losses": losses, "spec": spec, "summary": summarize(losses, spec, train_ids)}
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Probe designs on the development set: how many steps at which rates, within the cost budget.

``python -m bench.ablations.probe_design`` rebuilds each development candidate (benchmark v2's
``dev_set``; never the frozen test set) at the tuned initialization its cached Preflight stage
returned, runs the trainability probe (``worker.engine.probe.run_probe``) in several designs of
about the same or lower counted cost, and reports per dataset how each ranks ground truth B (the
protocols trained from that same tuned init: S and W, seed 0), Spearman with test accuracy and
with training loss, and the best precision of flagging untrainable candidates at recall 0.8.
Results are cached per candidate under ``bench/results/probe_design/``, with the engine that tuned
the init they probed (another engine's are recomputed).
This is how the engine's default probe was chosen (docs/conditioning.md, "Choosing the defaults").
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.ablations._dev_set import run_on_dev_set
from bench.pipeline.candidates import Candidate
from bench.pipeline.metrics import precision_at_recall, spearman
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.analysis import group_of, load_rows, truth
from bench.v2.stages import BATCH, dataset, tuned_model

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "probe_design"
CACHE = ROOT / "bench" / "results" / "v2"

# name -> (steps per rate, rates); counted cost = len(rates) * (steps + 1/3)
DESIGNS: dict[str, tuple[int, tuple[float, ...]]] = {
    "15x3": (15, (0.1, 0.03, 0.01)),
    "5x3": (5, (0.1, 0.03, 0.01)),
    "3x3": (3, (0.1, 0.03, 0.01)),
    "8x2": (8, (0.1, 0.03)),
    "5x2": (5, (0.1, 0.03)),
    "4x2": (4, (0.1, 0.03)),
    "10x1_03": (10, (0.03,)),
    "10x1_1": (10, (0.1,)),
    "6x1_03": (6, (0.03,)),
    "10x1_01": (10, (0.01,)),
    "5x2_high": (5, (0.3, 0.1)),
    "5x2_low": (5, (0.03, 0.01)),
}


def run_one(cand: dict[str, Any]) -> str:
    from worker.engine.probe import probe_cost, run_probe

    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path = OUT / f"{candidate.id}.json"
    if path.exists() and read_json(path).get("engine") == engine_version() and DESIGNS.keys() <= read_json(path).keys():
        return f"{candidate.id} cached"
    pre = read_json(CACHE / "preflight" / "s0" / f"{candidate.id}.json")
    if pre.get("scales") is None:
        write_json(path, {"error": "no scales"})
        return f"{candidate.id} no scales"
    x, y = dataset(candidate.dataset).batch(BATCH)
    model = tuned_model(candidate, 0, pre)
    result: dict[str, Any] = {"engine": engine_version()}  # the tuned init it probed is that engine's
    for name, (steps, rates) in DESIGNS.items():
        probe = run_probe(model, x, y, steps=steps, lrs=rates, momentum=0.9, seed=0)
        result[name] = {"loss": probe.loss, "cost": probe_cost(steps, len(rates))}
    write_json(path, result)
    return candidate.id


def _report(candidates: list[Candidate]) -> None:
    rows = load_rows(candidates, "dev", CACHE, 1, 1.0)
    groups: dict[str, list[tuple[Any, dict[str, Any]]]] = defaultdict(list)
    for row in rows:
        path = OUT / f"{row.candidate.id}.json"
        if path.exists() and "error" not in (probes := read_json(path)):
            groups[group_of(row.candidate.dataset)].append((row, probes))
    for group, items in sorted(groups.items()):
        for protocol in ("sgd", "adamw"):
            truths = [truth(row, protocol, "tuned") for row, _ in items]
            keep = [(t, p) for t, (_, p) in zip(truths, items, strict=True) if t is not None]
            if len(keep) < 10:
                continue
            acc = np.array([t["accuracy"] for t, _ in keep])
            loss = np.array([t["loss"] if math.isfinite(t["loss"]) else 1e9 for t, _ in keep])
            bad = np.array([t["untrainable"] for t, _ in keep])
            print(f"\n{group} B/{protocol}: n={len(keep)} untrainable={int(bad.sum())}")
            for name in DESIGNS:
                score = np.array([-(p[name]["loss"] if p[name]["loss"] is not None else 2.0) for _, p in keep])
                print(
                    f"  {name:8s} cost {keep[0][1][name]['cost']:5.1f}  spearman acc {spearman(score, acc):+.3f}"
                    f"  loss {spearman(score, -loss):+.3f}  precision@0.8 {precision_at_recall(score, bad, 0.8):.2f}"
                )


def main(argv: list[str] | None = None) -> int:
    return run_on_dev_set("python -m bench.ablations.probe_design", __doc__, run_one, _report, argv)


if __name__ == "__main__":
    raise SystemExit(main())

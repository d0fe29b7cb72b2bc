"""Would the default path flag better if its probe fitted a learnable task instead of random labels?

A submission without ``options.data`` is conditioned on a Gaussian batch, and its probe fits random
class labels: a memorization task, on which trainable and untrainable networks end close together
(docs/conditioning.md, section 8: no cut separates them). This ablation keeps the same Gaussian
batch (the engine's own draw, ``worker.engine.inputs.batch``) and gives it the labels of a random
linear teacher, ``y = argmax(flatten(x) @ W)`` with ``W`` a fixed Gaussian matrix: a task every
network that trains can start to learn in a few steps. Everything else is the default path
(``condition(spec, data={"x": x, "y": y})``: only the probe reads ``y``).

``python -m bench.ablations.teacher_targets`` conditions every development candidate of benchmark
v2 (never the frozen test set) this way, caches the result under ``bench/results/teacher_targets/``,
and prints, next to the random-label default path (``bench.v2.gaussian_path --set dev``) and the
labelled batch: flagging at the shipped cut and at a cut of each path's own (the shipped cut's rule,
fitted on the calibration's training half), on both halves, and the Spearman of each path's score
with minus the training loss trained from the tuned init (ground truth B, protocol S).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.ablations._dev_set import run_on_dev_set
from bench.pipeline.calibrate import prune_cut
from bench.pipeline.candidates import Candidate
from bench.pipeline.metrics import spearman
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.analysis import load_rows, rescored, truth

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "teacher_targets"
GAUSSIAN = ROOT / "bench" / "results" / "gaussian_path"
CACHE = ROOT / "bench" / "results" / "v2"
SEEDS = 3  # the seeds of the trained runs read for the truth
TEACHER_SEED = 12345  # one teacher per input size, the same for every candidate


def teacher_batch(spec: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The default path's Gaussian batch and its random linear teacher's labels, one per logit
    class of the network's output (float targets, the teacher's standardized output, for a single
    output)."""
    import nas
    from nas.options import ConditionOptions
    from worker.engine.inputs import batch

    parsed = nas.parse_spec(spec)
    x, _, _ = batch(parsed, None, ConditionOptions(), torch.device("cpu"))
    outputs = math.prod(nas.build_model(parsed, seed=0).trace.boundaries[-1])
    flat = x.flatten(1)
    g = torch.Generator().manual_seed(TEACHER_SEED + flat.shape[1])
    logits = flat @ torch.randn(flat.shape[1], max(outputs, 1), generator=g)
    if outputs == 1:
        return x, ((logits - logits.mean()) / logits.std()).reshape(-1, 1)
    return x, logits.argmax(dim=1)


def run_one(cand: dict[str, Any]) -> str:
    from worker.engine import condition

    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path = OUT / f"{candidate.id}.json"
    version = engine_version()
    if path.exists() and read_json(path).get("engine_version") == version:
        return f"{candidate.id} cached"
    x, y = teacher_batch(candidate.spec)
    try:
        report = condition(candidate.spec, data={"x": x, "y": y})
        result = {"score": report.score, "verdict": report.verdict, "components": report.components}
    except Exception as error:  # noqa: BLE001 - an engine crash is a finding
        result = {"error": f"{type(error).__name__}: {error}", "score": math.nan, "verdict": None}
    write_json(path, {**result, "engine_version": version})
    return f"{candidate.id} {result['verdict']}"


def _flags(scores: list[float], cut: float, bad: list[bool]) -> str:
    hit = sum(s < cut and u for s, u in zip(scores, bad, strict=True))
    flagged = sum(s < cut for s in scores)
    precision = f"{hit / flagged:.2f}" if flagged else "n/a"
    return f"{flagged} flagged at {precision} / {hit / max(sum(bad), 1):.2f}"


def report(candidates: list[Candidate]) -> None:
    """Per path (labelled batch, Gaussian with random labels, Gaussian with the teacher's labels),
    on the candidates all three scored: flags at the shipped cut and at the path's own cut
    (precision / recall), per half, and Spearman with minus B's loss, per dataset group."""
    weights = json.loads((ROOT / "worker" / "engine" / "score_weights.json").read_text())
    train_ids, cut = set(weights["train_ids"]), float(weights["prune_below"])
    items = []
    for row in load_rows(candidates, "dev", CACHE, SEEDS, 1.0):
        b = truth(row, "sgd", "tuned")
        paths = [GAUSSIAN / f"{row.candidate.id}.json", OUT / f"{row.candidate.id}.json"]
        if b is None or not row.preflight or not all(p.exists() for p in paths):
            continue
        scored = [rescored(read_json(p)) or {} for p in paths]
        if not all(s.get("components") for s in scored):
            continue
        scores = [float(row.preflight["score"]), *(float(s["score"]) for s in scored)]
        items.append((row.candidate.id in train_ids, row.group, b, scores))
    if not items:
        print("no development candidate has every path cached: run bench.v2.gaussian_path --set dev and this")
        return
    names = ("labelled batch", "Gaussian, random labels", "Gaussian, teacher labels")
    train = [i for i in items if i[0]]
    for k, name in enumerate(names):
        own = prune_cut(
            np.array([i[3][k] for i in train]),
            [i[2]["untrainable"] for i in train],
            weights["cut_rule"],
            float(weights["recall_target"]),
        )
        print(f"{name}: own cut {own:.4f}")
        for half_name, half in (("training half", train), ("held-out half", [i for i in items if not i[0]])):
            bad = [i[2]["untrainable"] for i in half]
            scores = [i[3][k] for i in half]
            print(
                f"  {half_name} ({len(half)}, {sum(bad)} untrainable): shipped cut {_flags(scores, cut, bad)}; "
                f"own cut {_flags(scores, own, bad)}"
            )
        for group in sorted({i[1] for i in items}):
            members = [i for i in items if i[1] == group]
            rho = spearman([i[3][k] for i in members], [-i[2]["loss"] for i in members])
            print(f"  Spearman with minus B's loss, {group} ({len(members)}): {rho:.2f}")


def main(argv: list[str] | None = None) -> int:
    return run_on_dev_set("python -m bench.ablations.teacher_targets", __doc__, run_one, report, argv)


if __name__ == "__main__":
    raise SystemExit(main())

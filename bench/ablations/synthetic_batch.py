"""Would the default path flag better on another synthetic batch than Gaussian inputs with random labels?

A submission without ``options.data`` is conditioned on a synthetic Gaussian batch, and its probe
fits random class labels: a memorization task. Each variant here sets the inputs and the labels, and
conditions with every other option at its default:

- inputs ``white``: standard normal noise (the default path's); ``pink``: the same draw filtered to
  an amplitude spectrum that falls as ``1/f`` (``worker.engine.inputs.pink_noise``, the option
  ``synthetic_inputs: "pink"``; its gain here stayed within the noise, so white stays the default);
- labels ``random``: the probe's own random labels (no ``y`` is given); ``teacher``: the labels of
  a random linear teacher, ``y = argmax(flatten(x) @ W)`` (``W`` a fixed Gaussian matrix per input
  size), a task every network that trains can start to learn in a few steps.

``python -m bench.ablations.synthetic_batch --variant NAME ... [--seeds N] [--compare A B]``
conditions every development candidate of benchmark v2 (never the frozen test set) at the engine's
seeds 0 .. N-1, caches the result under ``bench/results/synthetic_batch/NAME/sSEED/``, and prints,
next to the labelled batch: flagging at the shipped cut and at a cut of each path's own (the
shipped cut's rule, fitted on the calibration's training half), on both halves, and the Spearman of
each path's score with minus the training loss trained from the tuned init (ground truth B,
protocol S); ``--compare`` pairs two variants over the candidates, averaged over the seeds.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.ablations._dev_set import run_each
from bench.pipeline.calibrate import prune_cut
from bench.pipeline.candidates import Candidate
from bench.pipeline.metrics import flags_figures, precision_at_recall, spearman
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.analysis import Row, load_rows, rescored, truth
from bench.v2.candidates import dev_set

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "synthetic_batch"
CACHE = ROOT / "bench" / "results" / "v2"
SEEDS = 3  # the seeds of the trained runs read for the truth
TEACHER_SEED = 12345  # one teacher per input size, the same for every candidate
VARIANTS = {  # name -> (inputs, labels)
    "white_random": ("white", "random"),
    "white_teacher": ("white", "teacher"),
    "pink_random": ("pink", "random"),
    "pink_teacher": ("pink", "teacher"),
}


def synthetic_batch(
    spec: dict[str, Any], variant: str, seed: int = 0
) -> tuple[dict[str, torch.Tensor] | None, dict[str, Any]]:
    """``(data, options)`` a variant conditions with: no data (the engine draws the batch of
    ``options.synthetic_inputs`` and the probe random labels, as on the default path), or the
    engine's own batch with the teacher's labels. ``seed``: the engine's (the batch, the weights,
    the probe's labels all follow it)."""
    import nas
    from nas.options import ConditionOptions
    from worker.engine.inputs import batch

    inputs, labels = VARIANTS[variant]
    options: dict[str, Any] = {"synthetic_inputs": inputs, "seed": seed}
    if labels == "random":
        return None, options
    parsed = nas.parse_spec(spec)
    x, _, _ = batch(parsed, None, ConditionOptions(**options), torch.device("cpu"))
    outputs = math.prod(nas.build_model(parsed, seed=0).trace.boundaries[-1])
    return {"x": x, "y": teacher_labels(x, outputs)}, options


def teacher_labels(x: torch.Tensor, outputs: int) -> torch.Tensor:
    """The class of ``argmax(flatten(x) @ W)`` per sample, ``W`` Gaussian and fixed per input size
    (the standardized teacher output as a float target for a single output)."""
    flat = x.flatten(1)
    g = torch.Generator().manual_seed(TEACHER_SEED + flat.shape[1])
    logits = flat @ torch.randn(flat.shape[1], max(outputs, 1), generator=g)
    if outputs == 1:
        return ((logits - logits.mean()) / logits.std()).reshape(-1, 1)
    return logits.argmax(dim=1)


def _path(variant: str, seed: int, candidate_id: str) -> Path:
    return OUT / variant / f"s{seed}" / f"{candidate_id}.json"


def run_one(variant: str, seed: int, cand: dict[str, Any]) -> str:
    """Condition one candidate as ``variant`` at the engine's ``seed`` (cached per engine version)."""
    from worker.engine import condition

    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path = _path(variant, seed, candidate.id)
    version = engine_version()
    if path.exists() and read_json(path).get("engine_version") == version:
        return f"{candidate.id} cached"
    try:
        data, options = synthetic_batch(candidate.spec, variant, seed)
        report = condition(candidate.spec, data=data, options=options)
        result: dict[str, Any] = {"score": report.score, "verdict": report.verdict, "components": report.components}
    except Exception as error:  # noqa: BLE001 - an engine crash is a finding
        result = {"error": f"{type(error).__name__}: {error}", "score": math.nan, "verdict": None}
    write_json(path, {**result, "engine_version": version})
    return f"{candidate.id} {result['verdict']}"


def _flags(scores: list[float], cut: float, bad: list[bool]) -> str:
    f = flags_figures([s < cut for s in scores], bad)
    precision, recall = (f"{v:.2f}" if not math.isnan(v) else "n/a" for v in (f.precision, f.recall))
    return f"{f.flagged} flagged at {precision} / {recall}"


def _scored_rows(
    candidates: list[Candidate], paths: Callable[[str], list[Path]]
) -> list[tuple[Row, dict[str, Any], list[float]]]:
    """``(row, B's truth under S, the scores cached at paths(id))`` of each development candidate
    with a truth and every path cached with its components, rescored by the shipped weights."""
    out = []
    for row in load_rows(candidates, "dev", CACHE, SEEDS, 1.0):
        b, cached = truth(row, "sgd", "tuned"), paths(row.candidate.id)
        if b is None or not all(p.exists() for p in cached):
            continue
        scored = [rescored(read_json(p)) or {} for p in cached]
        if all(x.get("components") for x in scored):
            out.append((row, b, [float(x["score"]) for x in scored]))
    return out


def report(candidates: list[Candidate], variants: list[str], seed: int = 0) -> None:
    """Per path (the labelled batch, each variant at ``seed``), on the candidates every path
    scored: flags at the shipped cut and at the path's own cut (precision / recall), per half, and
    Spearman with minus B's loss, per dataset group."""
    weights = json.loads((ROOT / "worker" / "engine" / "score_weights.json").read_text())
    train_ids, cut = set(weights["train_ids"]), float(weights["prune_below"])
    items = [
        (row.candidate.id in train_ids, row.group, b, [float(row.preflight["score"]), *scores])
        for row, b, scores in _scored_rows(candidates, lambda cid: [_path(v, seed, cid) for v in variants])
        if row.preflight
    ]
    if not items:
        print("no development candidate has every variant cached: run without --report-only")
        return
    names = ("labelled batch", *variants)
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


def compare(candidates: list[Candidate], first: str, second: str, seeds: int) -> str:
    """``second`` minus ``first``, paired over the development candidates and averaged over the
    engine's seeds 0 .. ``seeds - 1`` (each seed is one draw of the batch and weights, as one
    submission gets): the mean over datasets of the within-dataset Spearman with minus B's loss,
    and the best precision at recall >= 0.8 of B's untrainable candidates; bootstrap over
    candidates (1,000 resamples), 95 % intervals."""
    rows = [
        (row.group, -b["loss"], b["untrainable"], scores)
        for row, b, scores in _scored_rows(
            candidates, lambda cid: [_path(v, s, cid) for v in (first, second) for s in range(seeds)]
        )
    ]
    if not rows:
        return f"no development candidate has {first} and {second} at seeds 0-{seeds - 1}: run them first"
    groups = np.array([r[0] for r in rows])
    target = np.array([r[1] for r in rows])
    bad = np.array([r[2] for r in rows])
    scores = np.array([r[3] for r in rows])  # [candidate, first's seeds then second's]

    def statistics(index: np.ndarray) -> np.ndarray:
        out = np.zeros((scores.shape[1], 2))
        for k in range(scores.shape[1]):
            column = scores[index, k]
            rhos = [
                spearman(list(column[groups[index] == g]), list(target[index][groups[index] == g]))
                for g in np.unique(groups[index])
            ]
            out[k] = (np.nanmean(rhos), precision_at_recall(list(column), list(bad[index]), 0.8))
        return out[seeds:].mean(axis=0) - out[:seeds].mean(axis=0)

    point = statistics(np.arange(len(rows)))
    rng = np.random.default_rng(0)
    draws = np.array([statistics(rng.integers(0, len(rows), len(rows))) for _ in range(1000)])
    low, high = np.nanpercentile(draws, [2.5, 97.5], axis=0)
    return (
        f"{second} minus {first}, {len(rows)} candidates, seeds 0-{seeds - 1}: mean within-dataset Spearman "
        f"{point[0]:+.3f} [{low[0]:+.3f}, {high[0]:+.3f}]; best precision at recall 0.8 "
        f"{point[1]:+.3f} [{low[1]:+.3f}, {high[1]:+.3f}]"
    )


def main(argv: list[str] | None = None) -> int:
    """Condition the development set as each ``--variant`` at each seed, then report (and compare)."""
    parser = argparse.ArgumentParser(prog="python -m bench.ablations.synthetic_batch", description=__doc__)
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), required=True)
    parser.add_argument("--seeds", type=int, default=1, help="the engine's seeds 0 .. N-1, each a draw")
    parser.add_argument("--compare", nargs=2, metavar=("FIRST", "SECOND"), choices=sorted(VARIANTS))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    candidates = dev_set()
    if not args.report_only:
        for variant in args.variant:
            for seed in range(args.seeds):
                run_each(partial(run_one, variant, seed), candidates, args.jobs, f"{variant} seed {seed} ")
    report(candidates, args.variant)
    if args.compare:
        first, second = args.compare
        print(compare(candidates, first, second, args.seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The verdict on the service's default path: the frozen test set's table, and a check on the
development set of whether that path would do better with a cut of its own.

``python -m bench.v2.gaussian_path`` conditions every test candidate (``--set dev``: every
development candidate) as a submission without ``options.data`` is conditioned
(``worker.engine.condition(spec)``: a Gaussian batch of the input shape, the probe fitting random
labels; every option at its default, seed 0) and reports, on the test set, its verdict's precision
and recall in flagging the untrainable candidates, per dataset, next to the verdict of the labelled
batch the benchmark conditions on (v2's Preflight stage, seed 0); then ``own_cut_on_dev``.

Ground truth: the trained runs of benchmark v2. Nothing trains from the Gaussian path's own tuned
init, so two truths stand in for it: B (trained from the labelled batch's tuned init) and A (from
the spec's init); a candidate untrainable under both is untrainable whatever the tuning. The test
set's table uses the shipped cut; the only cut fitted here is ``own_cut_on_dev``'s, on the
development set. Results are cached per candidate under ``bench/results/gaussian_path/`` (the
engine's version in each, so a changed engine reruns)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.pipeline.calibrate import prune_cut
from bench.pipeline.candidates import Candidate
from bench.pipeline.metrics import flags_figures
from bench.pipeline.run import engine_version, imap_spawned, read_json, write_json
from bench.v2.analysis import GROUPS, Row, load_rows, rescored, truth, verdict
from bench.v2.candidates import dev_set, test_set
from bench.v2.stats import RESAMPLES

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "gaussian_path"
CACHE = ROOT / "bench" / "results" / "v2"
SEEDS = 3  # the seeds of the trained runs read for the truths


def _condition(cand: dict[str, Any]) -> str:
    from worker.engine import condition

    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path = OUT / f"{candidate.id}.json"
    version = engine_version()
    if path.exists() and read_json(path).get("engine_version") == version:
        return f"{candidate.id} cached"
    try:
        report = condition(candidate.spec)
        result = {
            "score": report.score,
            "verdict": report.verdict,
            "probe_targets": "random",
            "components": report.components,  # so that a refit of the score rescores it without a rerun
        }
    except Exception as error:  # noqa: BLE001 - an engine crash is a finding
        result = {"error": f"{type(error).__name__}: {error}", "score": math.nan, "verdict": None}
    write_json(path, {**result, "engine_version": version})
    return f"{candidate.id} {result['verdict']}"


def _cached(candidate_id: str) -> dict[str, Any]:
    """A candidate's cached default-path result, its score and verdict recomputed from its components
    by the shipped calibration (as benchmark v2's report does), so that a refit needs no rerun."""
    return rescored(read_json(OUT / f"{candidate_id}.json")) or {}


def _swapped(row: Row, gaussian: dict[str, Any] | None, init: str) -> Row:
    """``row`` with the Gaussian path's verdict (None: the labelled batch's, as cached) and the
    runs of ``init`` standing where ``analysis.verdict`` reads the tuned init's."""
    runs = {(protocol, "tuned"): row.runs.get((protocol, init), []) for protocol in ("sgd", "adamw")}
    preflight = row.preflight if gaussian is None else {"verdict": gaussian.get("verdict")}
    return dataclasses.replace(row, preflight=preflight, runs=runs)


def default_path_verdict(rows: list[Row], protocol: str, resamples: int) -> dict[str, Any]:
    """The default path's verdict on those of ``rows`` whose default-path result is cached, scored as
    ``analysis.verdict`` scores the labelled batch's (ground truth B), with the engines that computed
    it (``engines``); ``{"n": 0}`` when none is cached."""
    cached = {r.candidate.id: _cached(r.candidate.id) for r in rows if (OUT / f"{r.candidate.id}.json").exists()}
    members = [_swapped(r, cached[r.candidate.id], "tuned") for r in rows if r.candidate.id in cached]
    if not members:
        return {"n": 0}
    engines = sorted({str(result.get("engine_version", "?"))[:8] for result in cached.values()})
    return verdict(members, protocol, resamples) | {"engines": engines}


def _cell(figure: dict[str, Any]) -> str:
    if not figure.get("n"):
        return "n/a"

    def interval(key: str) -> str:
        f = figure[key]
        if f["point"] is None or (isinstance(f["point"], float) and math.isnan(f["point"])):
            return "n/a"
        low = f.get("low")
        if low is None or math.isnan(low):
            return f"{f['point']:.2f}"
        return f"{f['point']:.2f} [{low:.2f}, {f['high']:.2f}]"

    near = len(figure["pruned_near_best"])
    return (
        f"{figure['flagged']} flagged, {figure['untrainable']} untrainable: precision {interval('precision')}, "
        f"recall {interval('recall')}; {near} pruned within 5 points of the best"
    )


def report() -> str:
    """The table: per dataset and truth, the labelled batch's verdict and the Gaussian path's."""
    candidates = test_set()
    rows = load_rows(candidates, "test", CACHE, SEEDS, 1.0)
    gaussian = {c.id: _cached(c.id) for c in candidates if (OUT / f"{c.id}.json").exists()}
    lines = [
        "| dataset | truth (protocol S) | labelled batch (data) | Gaussian batch (the default path) |",
        "|---|---|---|---|",
    ]
    for group, name in GROUPS.items():
        members = [r for r in rows if r.group == group and r.candidate.id in gaussian]
        if not members:
            continue
        for truth_name, init in (("B, tuned init", "tuned"), ("A, spec init", "spec")):
            labelled = verdict([_swapped(r, None, init) for r in members], "sgd", RESAMPLES)
            default = verdict([_swapped(r, gaussian[r.candidate.id], init) for r in members], "sgd", RESAMPLES)
            lines.append(f"| {name} ({len(members)}) | {truth_name} | {_cell(labelled)} | {_cell(default)} |")
    return "\n".join(lines)


def own_cut_on_dev() -> list[str]:
    """Would the default path do better with a cut of its own? On the development set (never the
    test set): the labelled batch's and the default path's scores at the shipped cut, and the
    default path's scores at a cut fitted to them by the shipped cut's rule
    (``bench.pipeline.calibrate.prune_cut`` on the calibration's training half), each on both halves;
    ground truth B under protocol S."""
    weights = json.loads((ROOT / "worker" / "engine" / "score_weights.json").read_text())
    train_ids = set(weights["train_ids"])
    items = []
    for row in load_rows(dev_set(), "dev", CACHE, SEEDS, 1.0):
        path, b = OUT / f"{row.candidate.id}.json", truth(row, "sgd", "tuned")
        if b is not None and row.preflight and path.exists() and (g := _cached(row.candidate.id)).get("components"):
            labelled = float(row.preflight["score"])
            items.append((row.candidate.id in train_ids, b["untrainable"], labelled, float(g["score"])))
    if not items:
        return ["no development candidate has both paths cached: run with --set dev"]

    def flags(scores: list[float], cut: float, bad: list[bool]) -> str:
        f = flags_figures([s < cut for s in scores], bad)
        precision, recall = (f"{v:.2f}" if not math.isnan(v) else "n/a" for v in (f.precision, f.recall))
        return f"{f.flagged} flagged, precision {precision}, recall {recall}"

    cut = float(weights["prune_below"])
    train = [i for i in items if i[0]]
    own = prune_cut(
        np.array([i[3] for i in train]), [i[1] for i in train], weights["cut_rule"], float(weights["recall_target"])
    )
    lines = []
    for name, half in (("training half", train), ("held-out half", [i for i in items if not i[0]])):
        bad = [i[1] for i in half]
        lines.append(
            f"dev {name} ({len(half)}, {sum(bad)} untrainable): labelled batch, shipped cut: "
            f"{flags([i[2] for i in half], cut, bad)}; default path, shipped cut: "
            f"{flags([i[3] for i in half], cut, bad)}; default path, its own cut ({own:.4f}): "
            f"{flags([i[3] for i in half], own, bad)}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.v2.gaussian_path", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--set", choices=("test", "dev"), default="test", help="the set to condition (dev: to fit on)")
    args = parser.parse_args(argv)
    if not args.report_only:
        tasks = [c.to_json() for c in (dev_set() if args.set == "dev" else test_set())]
        for i, message in enumerate(imap_spawned(_condition, tasks, args.jobs, nice=5)):
            print(f"{i + 1}/{len(tasks)} {message}", flush=True)
    print(report())
    for line in own_cut_on_dev():
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

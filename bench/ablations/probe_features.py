"""What the probe's curves and the network's size add to the score, on the development set.

``python -m bench.ablations.probe_features`` rebuilds each development candidate (benchmark v2's
``dev_set``; never the frozen test set) at the tuned initialization its cached Preflight stage
returned, reruns the shipped probe (5 steps at 0.1 and 0.03) keeping its whole curves, and asks
whether anything the score could read at no extra cost ranks ground truth B better than the
probe's figure alone (the lowest final loss over the rates, which the shipped score is a monotone
function of): each rate's final loss, the mean loss over the steps, the loss before any step, and
``log10`` of the parameters and multiply-accumulates. Combinations are least-squares fits of minus
the capped normalized loss under protocol S on the calibration's training half
(``score_weights.json``'s ``train_ids``), reported on the held-out half: Spearman with the test
accuracy and with minus the training loss, per dataset and protocol. Cached per candidate under
``bench/results/probe_features/``. docs/conditioning.md, section 8, quotes it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

import nas
from bench.ablations._dev_set import run_on_dev_set
from bench.pipeline.candidates import Candidate
from bench.pipeline.metrics import spearman
from bench.pipeline.run import read_json, write_json
from bench.v2.analysis import load_rows, truth
from bench.v2.stages import BATCH, dataset, tuned_model

__all__ = ["features", "main"]

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "probe_features"
CACHE = ROOT / "bench" / "results" / "v2"
WEIGHTS = ROOT / "worker" / "engine" / "score_weights.json"
STEPS, RATES = 5, (0.1, 0.03)  # the engine's default probe
FITS = (("min",), ("min", "log_params"), ("min", "log_macs"), ("final_0.1", "final_0.03"), ("mean_min", "log_params"))


def run_one(cand: dict[str, Any]) -> str:
    from worker.engine.probe import run_probe

    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path, stage = OUT / f"{candidate.id}.json", CACHE / "preflight" / "s0" / f"{candidate.id}.json"
    if not stage.exists():
        return f"{candidate.id}: no Preflight stage cached (make bench)"
    pre = read_json(stage)
    if path.exists() and read_json(path).get("preflight_fingerprint") == pre.get("fingerprint"):
        return f"{candidate.id} cached"  # probed from the tuned network this Preflight stage returned
    if pre.get("scales") is None:
        write_json(path, {"error": "no scales", "preflight_fingerprint": pre.get("fingerprint")})
        return f"{candidate.id} no scales"
    x, y = dataset(candidate.dataset).batch(BATCH)
    model = tuned_model(candidate, 0, pre)
    probe = run_probe(model, x, y, steps=STEPS, lrs=RATES, momentum=0.9, seed=0)
    size = nas.summarize(candidate.spec)  # type: ignore[arg-type]
    write_json(
        path,
        {
            "loss": probe.loss,
            "reference": probe.reference,
            "curves": probe.curves,
            "parameters": size.parameters,
            "macs": size.macs,
            "preflight_fingerprint": pre.get("fingerprint"),
        },
    )
    return candidate.id


def _normalized(value: float | None, reference: float) -> float:
    """A probe loss over the constant prediction's, capped as the probe caps it (diverged: 2)."""
    return 2.0 if value is None or not math.isfinite(value) else min(value / reference, 2.0)


def features(probe: dict[str, Any]) -> dict[str, float]:
    """What the score could read from one cached probe and the spec, every loss normalized."""
    ref = float(probe["reference"])
    out: dict[str, float] = {"min": _normalized(probe["loss"], 1.0)}
    means = []
    for rate in RATES:
        curve = probe["curves"][str(rate)]  # the loss before each step, then the final
        out[f"final_{rate}"] = _normalized(curve[-1], ref)
        means.append(float(np.mean([_normalized(v, ref) for v in curve[1:]])))
    out["mean_min"] = min(means)
    out["start"] = _normalized(probe["curves"][str(RATES[-1])][0], ref)
    out["log_params"] = math.log10(max(probe["parameters"], 1))
    out["log_macs"] = math.log10(max(probe["macs"], 1))
    return out


def _report(candidates: list[Candidate]) -> None:
    train_ids = set(json.loads(WEIGHTS.read_text())["train_ids"])
    items = []
    for row in load_rows(candidates, "dev", CACHE, 3, 1.0):
        path = OUT / f"{row.candidate.id}.json"
        s, w = truth(row, "sgd", "tuned"), truth(row, "adamw", "tuned")
        if path.exists() and "error" not in (probe := read_json(path)) and s and w:
            truths = {p: t | {"normalized": t["loss"] / row.chance} for p, t in (("sgd", s), ("adamw", w))}
            items.append((row, features(probe), truths))
    fitted: dict[str, list[float]] = {}
    train = [(f, t) for row, f, t in items if row.candidate.id in train_ids]
    for names in FITS:
        x = np.array([[f[n] for n in names] + [1.0] for f, _ in train])
        y = np.array([-min(t["sgd"]["normalized"], 1.0) for _, t in train])
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        fitted["fit " + " + ".join(names)] = [float(np.dot([f[n] for n in names] + [1.0], coef)) for _, f, _ in items]
    alone = {f"-{name}": [-f[name] for _, f, _ in items] for name in items[0][1]}
    print(f"{len(items)} development candidates, {len(train)} in the training half; held-out half:")
    for group in sorted({row.group for row, _, _ in items}):
        held = [i for i, (row, _, _) in enumerate(items) if row.group == group and row.candidate.id not in train_ids]
        if len(held) < 10:
            continue
        print(f"\n{group} ({len(held)}): Spearman with test accuracy / with minus training loss, B under S | W")
        for name, scores in (alone | fitted).items():
            cells = []
            for protocol in ("sgd", "adamw"):
                score = [scores[i] for i in held]
                acc = [items[i][2][protocol]["accuracy"] for i in held]
                loss = [-items[i][2][protocol]["loss"] for i in held]
                cells.append(f"{spearman(score, acc):+.2f} / {spearman(score, loss):+.2f}")
            print(f"  {name:36s} {' | '.join(cells)}")


def main(argv: list[str] | None = None) -> int:
    return run_on_dev_set("python -m bench.ablations.probe_features", __doc__, run_one, _report, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""The probe's lower rate before a prune (``options.probe_lower_lr``), measured without rerunning
the engine: the verdicts of cached tuned networks recomputed with and without it.

``python -m bench.ablations.probe_lower_rate`` (``--set dev``, the default, or ``--set test``;
``--search``: the Fashion-MNIST search) rebuilds each tuned network from its cached report (its
scales, draw and bias shifts, as the trained runs did), reruns the engine's probe on its
conditioning batch at the shipped rates and at the lower rate, and recomputes the verdict both ways
with the shipped score: as before (the probe's two rates) and with the rule (the lower rate tried
when the first probe did best at its lowest rate, or diverged at every rate, and the score pruned).

- Benchmark v2 (``--set``): the Preflight stage of seed 0; ground truth B under protocols S and W;
  flagging precision, recall, and flags within 5 points of the best test accuracy of their dataset.
- The search (``--search``): the conditionings its gate ran (the engine named in each seed's
  config), for every proposal of ``no gate`` and of ``tuned, no gate`` flagged before the rule
  (pruned as run, or, under an engine with the rule, re-probed at the lower rate);
  failed = validation accuracy below 0.5, as the search's report counts it.

Results are cached per network under ``bench/results/probe_lower_rate/``. docs/conditioning.md,
section 7, quotes the figures.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "probe_lower_rate"
RATES = (0.1, 0.03)  # the shipped probe's
LOWER = 0.01  # the shipped probe_lower_lr
STEPS, MOMENTUM = 5, 0.9
NEAR_BEST = 0.05


def _probes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> dict[str, Any]:
    from worker.engine import seeds
    from worker.engine.probe import run_probe

    out = {}
    for name, lrs in (("rates", RATES), ("lower", (LOWER,))):
        probe = run_probe(model, x, y, steps=STEPS, lrs=lrs, momentum=MOMENTUM, seed=seed + seeds.PROBE)
        out[name] = {"loss": probe.loss, "best_lr": probe.best_lr}
    return out


def _verdicts(components: dict[str, Any], probes: dict[str, Any]) -> tuple[bool, bool]:
    """(pruned without the rule, pruned with it), from the probes rerun here."""
    from nas.options import Thresholds
    from worker.engine.score import score

    first, lower = probes["rates"], probes["lower"]
    before = score(components | {"probe_loss": first["loss"]}, Thresholds()).verdict == "prune"
    below_grid = first["best_lr"] is None or first["best_lr"] == min(RATES)
    if not (before and below_grid and lower["best_lr"] is not None and first["loss"] is not None):
        return before, before
    joined = min(first["loss"], lower["loss"])
    return before, score(components | {"probe_loss": joined}, Thresholds()).verdict == "prune"


def _v2_task(args: tuple[dict[str, Any], str]) -> str:
    from bench.pipeline.candidates import Candidate
    from bench.pipeline.run import read_json, write_json
    from bench.v2.stages import BATCH, dataset, tuned_model

    torch.set_num_threads(1)
    cand, set_name = args
    candidate = Candidate(**cand)
    path = OUT / "v2" / f"{candidate.id}.json"
    if path.exists():
        return candidate.id
    report = read_json(ROOT / "bench" / "results" / "v2" / "preflight" / "s0" / f"{candidate.id}.json")
    if report.get("scales") is None or not report.get("components"):
        write_json(path, {"error": "no tuned network"})
        return candidate.id
    x, y = dataset(candidate.dataset).batch(BATCH)
    write_json(
        path, {"probes": _probes(tuned_model(candidate, 0, report), x, y, 0), "components": report["components"]}
    )
    return candidate.id


def benchmark_v2(set_name: str, jobs: int) -> list[str]:
    from bench.pipeline.metrics import flags_figures
    from bench.pipeline.run import imap_spawned, read_json
    from bench.v2.analysis import load_rows, truth
    from bench.v2.candidates import dev_set, test_set

    candidates = dev_set() if set_name == "dev" else test_set()
    for _ in imap_spawned(_v2_task, [(c.to_json(), set_name) for c in candidates], jobs, nice=5):
        pass
    rows = load_rows(candidates, set_name, ROOT / "bench" / "results" / "v2", 3, 1.0, any_engine=True)
    lines = []
    for protocol in ("sgd", "adamw"):
        items: list[tuple[str, bool, bool, dict[str, Any]]] = []
        best: dict[str, float] = {}
        for row in rows:
            cached = read_json(OUT / "v2" / f"{row.candidate.id}.json")
            if (t := truth(row, protocol, "tuned")) is None or "probes" not in cached:
                continue
            items.append((row.group, *_verdicts(cached["components"], cached["probes"]), t))
            best[row.group] = max(best.get(row.group, 0.0), t["accuracy"])
        bad = [t["untrainable"] for *_, t in items]
        parts = []
        for label, with_rule in (("without the rule", False), ("with it", True)):
            flags = [item[2] if with_rule else item[1] for item in items]
            f = flags_figures(flags, bad)
            near = sum(
                1
                for item, flag in zip(items, flags, strict=True)
                if flag and item[3]["accuracy"] >= best[item[0]] - NEAR_BEST
            )
            parts.append(
                f"{label}: {f.flagged} flagged, precision {f.precision:.2f}, recall {f.recall:.2f}, "
                f"{near} within 5 points of the best"
            )
        changed = sum(1 for item in items if item[1] != item[2])
        lines.append(
            f"{set_name}, B under {protocol} ({len(items)} candidates, {sum(bad)} untrainable; {changed} verdicts "
            "changed): " + "; ".join(parts)
        )
    return lines


def _lower_probe_ran(path: Path) -> bool:
    """Whether the conditioning at ``path`` tried the lower rate: only a prune makes the engine do
    so, so a proposal the rule then kept was pruned by its first probe (an engine before the rule
    never tried it, and its prunes are the stored verdicts)."""
    from bench.pipeline.run import read_json

    if not path.exists():
        return False
    budget = read_json(path)["report"]["tuning"].get("budget") or {}
    return float(budget.get("counted_probe_lower") or 0.0) > 0


def search() -> list[str]:
    import optuna

    import nas
    from bench.fashion_search.evaluate import Evaluator, _key, conditioning_batch
    from bench.fashion_search.space import search_space
    from bench.pipeline.run import read_json, write_json
    from nas.report import ConditioningReport

    torch.set_num_threads(1)
    root = ROOT / "bench" / "results" / "fashion_search"
    evaluator = Evaluator(root)
    x, y = conditioning_batch(evaluator.data)
    lines = []
    for name in ("no gate", "tuned, no gate"):
        counts = {"proposals": 0, "failed": 0, "reprobed": 0}
        flagged_by = {"before": [0, 0, 0], "after": [0, 0, 0]}  # flagged, of them failed, of them near the best
        for seed_file in sorted((root / "seeds").glob("seed*.json")):
            record = read_json(seed_file)
            seed, engine, trials = record["seed"], record["config"]["engine"], record["searches"][name]
            best = max((t["final_val"] for t in trials if t.get("final_val") is not None), default=math.nan)
            for trial in trials:
                failed = (trial.get("final_val") or 0.0) < 0.5
                near = (trial.get("final_val") or 0.0) >= best - NEAR_BEST
                counts["proposals"] += 1
                counts["failed"] += failed
                spec, _ = search_space(optuna.trial.FixedTrial(trial["params"]))
                key = _key("condition", engine, spec, seed)
                conditioned = root / "condition" / f"{key}.json"
                if trial.get("verdict") != "prune" and not _lower_probe_ran(conditioned):
                    continue
                path = OUT / "search" / f"{key}.json"
                if not path.exists():
                    report = ConditioningReport.model_validate(read_json(conditioned)["report"])
                    env = report.environment
                    model = nas.build_model(
                        spec, scales=dict(report.scales), seed=env.seed, draw=env.draw, bias_shifts=report.bias_shifts
                    )
                    write_json(path, {"probes": _probes(model, x, y, seed), "components": report.components})
                cached = read_json(path)
                before, after = _verdicts(cached["components"], cached["probes"])
                counts["reprobed"] += cached["probes"]["rates"]["best_lr"] in (None, min(RATES)) and before
                for label, flag in (("before", before), ("after", after)):
                    if flag:
                        flagged_by[label][0] += 1
                        flagged_by[label][1] += failed
                        flagged_by[label][2] += near
        parts = []
        for label in ("before", "after"):
            flagged, hits, near = flagged_by[label]
            precision = hits / flagged if flagged else math.nan
            recall = hits / counts["failed"] if counts["failed"] else math.nan
            parts.append(
                f"{label}: {flagged} flagged, precision {precision:.2f}, recall {recall:.2f}, {near} within 5 "
                "points of the seed's best"
            )
        lines.append(
            f"search '{name}' ({counts['proposals']} proposals, {counts['failed']} did not train; "
            f"{counts['reprobed']} re-probed): " + "; ".join(parts)
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ablations.probe_lower_rate", description=__doc__)
    parser.add_argument("--set", choices=("dev", "test"), default="dev")
    parser.add_argument("--search", action="store_true", help="the Fashion-MNIST search instead")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    for line in search() if args.search else benchmark_v2(args.set, args.jobs):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

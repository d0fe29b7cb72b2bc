"""From the cached stage results to one row per candidate: what the analysis, the calibration
and the extra benchmarks read (``collect``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.pipeline.candidates import Candidate
from bench.pipeline.datasets import load_key
from bench.pipeline.inits import PEERS
from bench.pipeline.protocol import Protocol
from bench.pipeline.run import cached, read_json

__all__ = ["collect"]


def _threshold_for(name: str, thresholds: dict[str, float]) -> float:
    """The engine's threshold of a component (``kernel_log_range`` uses ``kernel_log_ratio``)."""
    for key in (name, name.replace("_range", "_ratio")):
        if isinstance(thresholds.get(key), int | float):
            return float(thresholds[key])
    return 1.0


def collect(candidates: list[Candidate], out: Path, protocol: Protocol) -> list[dict[str, Any]]:
    """One row per candidate with every stage's results (missing stages are ``None``)."""
    rows = []
    for c in candidates:
        stage = {s: out / s / f"{c.id}.json" for s in ("proxies", "preflight", "spec", "tuned", "peers")}
        # A result computed from other inputs (other scales, protocol, spec) is stale: skip it.
        # Preflight reports are kept whatever engine made them; the report names its version.
        got = {
            s: read_json(p) if (s == "preflight" and p.exists()) or cached(s, c, protocol, out) else None
            for s, p in stage.items()
        }
        if got["proxies"] is None or got["spec"] is None:
            continue
        chance = load_key(c.dataset).chance_loss
        spec_run = got["spec"]["spec"]
        peers = got["peers"] or {}
        pre = got["preflight"] or {"score": math.nan, "verdict": None}
        tuned = (got["tuned"] or {}).get("tuned")
        thresholds = pre.get("thresholds") or {}
        comps = pre.get("components") or {}
        rows.append(
            {
                "id": c.id,
                "family": c.family,
                "dataset": c.dataset,
                "name": c.spec.get("name"),
                "chance": chance,
                "loss": spec_run["best_loss"],
                "norm_loss": spec_run["best_loss"] / chance,
                "accuracy": spec_run["test_accuracy"],
                "untrainable": all(spec_run["diverged"]) or not spec_run["best_loss"] < 0.5 * chance,
                "curve": spec_run["curves"][len(spec_run["curves"]) // 2],
                "train_seconds": spec_run["seconds"],
                "step_seconds": got["proxies"]["step_seconds"],
                "parameters": got["proxies"]["parameters"],
                "proxies": {k: v["score"] for k, v in got["proxies"]["proxies"].items()},
                "proxy_seconds": {k: v["seconds"] for k, v in got["proxies"]["proxies"].items()},
                "preflight": math.nan if pre.get("score") is None else float(pre["score"]),
                "verdict": pre.get("verdict"),
                "preflight_error": pre.get("error"),
                "preflight_seconds": pre.get("seconds", math.nan),
                "probe_seconds": ((pre.get("tuning") or {}).get("timings") or {}).get("probe", 0.0),
                "components": comps,
                "engine_version": pre.get("engine_version"),
                "component_thresholds": {k: _threshold_for(k, thresholds) for k in comps},
                "peers": {k: peers[k]["best_loss"] for k in PEERS if k in peers},
                "peer_seconds": {k: peers[k].get("init_seconds", 0.0) for k in PEERS if k in peers},
                "tuned_loss": tuned["best_loss"] if tuned else math.nan,
                "tuned_accuracy": tuned["test_accuracy"] if tuned else math.nan,
                "tuned_norm_loss": tuned["best_loss"] / chance if tuned else math.nan,
                "tuned_untrainable": (all(tuned["diverged"]) or not tuned["best_loss"] < 0.5 * chance)
                if tuned
                else None,
            }
        )
    return rows

"""How many trained candidates ``nas.ranking`` needs, on benchmark v2's development set.

``python -m bench.ablations.ranking_curve`` fits :class:`nas.ranking.Ranker` on k development
candidates drawn at random (what a search with ``ConditioningGate(rank_after=k)`` has trained) and
reports its Spearman with the test accuracy trained from the tuned init (ground truth B) on the
others, next to the shipped score's, MeCo's and the size's on the same others. The features are
read from the cached stages as the gate reads them from a report, but for MeCo's and NASWOT's
terms: benchmark v2's Preflight stage ran without ``options.expressivity``, so the proxies'
MeCo and NASWOT on the spec's init stand in for them. Development set only; nothing is fitted
here that the product ships (the score, calibrated on this set, has an in-sample advantage).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "bench" / "results" / "v2"
SIZES = (15, 20, 30, 50)
DRAWS = 100


def _features(row: Any) -> dict[str, float | None]:
    components = row.preflight.get("components") or {}
    out = {k: (float(v) if v is not None and math.isfinite(float(v)) else None) for k, v in components.items()}
    spec = row.proxies["spec"]
    for term in ("meco", "naswot"):
        score = float(spec[term]["score"])
        out[term] = score if math.isfinite(score) else None
    out["log_params"] = math.log10(row.proxies["parameters"])
    out["score"] = row.preflight.get("score")
    return out


def curves(group: str, protocol: str) -> list[str]:
    """Table rows for one dataset group and protocol."""
    from bench.pipeline.metrics import ranking_curve, ranking_curve_cells, spearman
    from bench.v2.analysis import load_rows, truth
    from bench.v2.candidates import dev_set

    rows = load_rows([c for c in dev_set() if c.dataset.startswith(group)], "dev", CACHE, 1, 1.0)
    kept = [(r, t) for r in rows if r.preflight and r.proxies and (t := truth(r, protocol, "tuned"))]
    features = [_features(r) for r, _ in kept]
    accuracy = np.array([t["accuracy"] for _, t in kept])
    baselines: dict[str, list[float]] = {
        "score": [f["score"] if f["score"] is not None else -math.inf for f in features],
        "meco": [f["meco"] if f["meco"] is not None else -math.inf for f in features],
        "size": [float(f["log_params"] or 0.0) for f in features],  # always set: the size is known
    }
    whole = ", ".join(f"{name} {spearman(v, accuracy):.2f}" for name, v in baselines.items())
    out = [f"| {group}, {protocol} ({len(kept)}; on all: {whole}) | | | | | |"]
    rng = np.random.default_rng(0)
    for k in (size for size in SIZES if size < len(kept) - 15):
        c = ranking_curve(features, accuracy, k, DRAWS, rng, baselines)
        out.append(f"| k = {k} | {' | '.join(ranking_curve_cells(c))} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ablations.ranking_curve", description=__doc__)
    parser.parse_args(argv)
    print("| trained candidates | the fit | 10th percentile | the shipped score | MeCo (spec init) | size |")
    print("|---|---|---|---|---|---|")
    for group in ("fashion", "digits"):
        for protocol in ("sgd", "adamw"):
            print("\n".join(curves(group, protocol)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

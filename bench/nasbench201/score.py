"""Scoring NAS-Bench-201 cells without training: Preflight and every zero-cost proxy of benchmark
v2, in one run, on one input batch, against the table's trained CIFAR-10 accuracies.

Every cell is built in the benchmark's skeleton (``nas.space.nasbench201_spec``) at PyTorch's
default initialization, the one the benchmark trains from. No CIFAR-10 is available offline, so
the batch is real images of another dataset, Fashion-MNIST (28x28 grey images padded to 32x32 and
repeated over 3 channels, standardized, with their labels), or a Gaussian batch of that shape with
random labels (``--data gaussian``); the report says which. The sample is stratified by the
table's accuracy (equal draws from each decile) and seeded; a development sample drawn apart from
it (``--dev``) is what any calibration may use, never the reported one.

Each cell's result is one JSON file under ``bench/results/nasbench201/<data>/`` (resumable); the
report (``docs/nasbench201.md``) is computed from them: Spearman and Kendall with the accuracy
(95 % bootstrap intervals over cells), Preflight's paired difference with every proxy, top-10 and
top-50 hit rates, the best precision of flagging the cells below 20 % at recall >= 0.8, and the
cost per cell.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.pipeline.metrics import kendall, precision_at_recall, spearman
from bench.pipeline.proxies import PROXIES, compute_proxies, fingerprint_parts, revisions
from bench.pipeline.run import engine_version, imap_spawned
from bench.v2.analysis import rescored
from bench.v2.stats import bootstrap, paired_difference
from nas import build_model
from nas.space import nasbench201_arch_string, nasbench201_spec

__all__ = ["BATCH", "FLAG_BELOW", "cell_batch", "report", "sample_cells", "score_cell", "scored"]

BATCH = 64
FLAG_BELOW = 20.0  # % accuracy: a cell below this did not train (the table's floor is 10 %)
RECALL = 0.8
MIN_FLAGGED = 5  # cells below FLAG_BELOW needed before a flagging precision means anything


def sample_cells(
    table: dict[tuple[str, ...], float], n: int, seed: int, exclude: Sequence[tuple[str, ...]] = ()
) -> list[tuple[str, ...]]:
    """``n`` cells, an equal share from each accuracy decile (the rest from the top deciles)."""
    excluded = set(exclude)
    ranked = sorted((c for c in table if c not in excluded), key=lambda c: (table[c], c))
    rng = random.Random(seed)
    deciles = [ranked[i * len(ranked) // 10 : (i + 1) * len(ranked) // 10] for i in range(10)]
    picked: list[tuple[str, ...]] = []
    for i, decile in enumerate(deciles):
        share = n // 10 + (1 if i >= 10 - n % 10 else 0)
        picked += rng.sample(decile, min(share, len(decile)))
    return picked


@cache
def cell_batch(kind: str, n: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """The one input batch every cell and every method sees: ``fashion`` or ``gaussian`` (read once
    per process, not once per cell)."""
    if kind == "gaussian":
        g = torch.Generator().manual_seed(0)
        return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    if kind != "fashion":
        raise ValueError(f"data must be 'fashion' or 'gaussian', got {kind!r}")
    from bench.pipeline.fashion_mnist import load_fashion_mnist

    data = load_fashion_mnist(resolution=28)
    x = torch.nn.functional.pad(data.x_train[:n], (2, 2, 2, 2), value=float(data.x_train.min()))
    x = x.repeat(1, 3, 1, 1)
    return (x - x.mean()) / x.std(), data.y_train[:n]


def _fingerprint(
    part: str,
    kind: str,
    channels: int,
    cells_per_stage: int,
    engine: str | None = None,
    proxy_revisions: dict[str, int] | None = None,
) -> str:
    """What a cached part was computed with: the proxies do not depend on Preflight's engine, so a
    changed engine reruns only Preflight's part (``engine``: another engine's, default this one's);
    the proxies' part follows the revised proxies' versions (``proxy_revisions``: those a stored
    part names, default this checkout's); the expressivity part depends on its own module's source
    and the engine's default draw."""
    if part == "preflight":
        engine = engine or engine_version()
    elif part == "expressivity":
        engine = _expressivity_version()
    else:
        engine = None
    parts: list[Any] = [engine, kind, channels, cells_per_stage, BATCH, sorted(PROXIES) if part == "proxies" else None]
    if part == "proxies":
        parts += fingerprint_parts(proxy_revisions)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


@cache
def _expressivity_version() -> str:
    """What the expressivity part measures with: its module and the engine modules it runs
    (``conditioning_mode``, the hooks), the builder that draws the network (``nas/build.py``), the
    engine's weight seed offset and its default draw."""
    import nas.build
    from nas.options import ConditionOptions
    from worker.engine import _moments, autoinit, expressivity, seeds

    modules = (expressivity, autoinit, _moments, nas.build)
    source = b"".join(Path(m.__file__).read_bytes() for m in modules if m.__file__)
    source += f"{seeds.WEIGHTS} {ConditionOptions().draw}".encode()
    return hashlib.sha256(source).hexdigest()[:16]


def expressivity_part(spec: Any, x: torch.Tensor) -> dict[str, Any]:
    """What ``condition(spec, data, options={"seed": 0, "expressivity": True})`` reports as
    ``expressivity``, measured alone: the same network (the engine's seed and default draw, before
    any conditioning) and batch, so the 1,150 cells' conditioning need not rerun to add it
    (``tests/bench/nasbench201`` checks the two agree). Its cache fingerprint follows
    ``worker/engine/expressivity.py`` and the engine modules it runs, ``nas/build.py``, the weight
    seed offset and the engine's default draw (``_expressivity_version``), not the rest of the engine
    (the conditioning), which it does not run."""
    from nas.options import ConditionOptions
    from nas.report import finite_or_none
    from worker.engine import seeds
    from worker.engine.expressivity import measure_expressivity

    model = build_model(spec, seed=0 + seeds.WEIGHTS, draw=ConditionOptions().draw)
    measured = measure_expressivity(model, x)
    return {"naswot": finite_or_none(measured.naswot), "meco": finite_or_none(measured.meco)}


def _path(out: Path, kind: str, part: str, ops: tuple[str, ...]) -> Path:
    return out / kind / part / f"{hashlib.sha256(nasbench201_arch_string(ops).encode()).hexdigest()[:16]}.json"


def _cached(out: Path, kind: str, part: str, ops: tuple[str, ...], fingerprint: str) -> dict[str, Any] | None:
    """A cell's stored part when it was computed with these settings (and, for Preflight, this engine)."""
    path = _path(out, kind, part, ops)
    if path.exists() and (data := json.loads(path.read_text())).get("fingerprint") == fingerprint:
        return dict(data)
    return None


def _kept_proxies(
    out: Path, kind: str, ops: tuple[str, ...], channels: int, cells_per_stage: int
) -> dict[str, Any] | None:
    """A cell's proxies stored with these settings before a proxy was revised (None when there are
    none): ``compute_proxies`` reruns only the revised ones."""
    path = _path(out, kind, "proxies", ops)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    revised = data.get("proxy_revisions", {})
    same = data.get("fingerprint") == _fingerprint("proxies", kind, channels, cells_per_stage, proxy_revisions=revised)
    return dict(data["proxies"]) if same else None


def _cached_any_engine(
    out: Path, kind: str, ops: tuple[str, ...], channels: int, cells_per_stage: int
) -> dict[str, Any] | None:
    """A cell's stored Preflight part computed with these settings by whichever engine it names
    (for a report of cached cells; the report says which engines scored them)."""
    path = _path(out, kind, "preflight", ops)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("fingerprint") == _fingerprint("preflight", kind, channels, cells_per_stage):
        return dict(data) | {"engine": engine_version()}  # this checkout's, stored before parts named it
    if not (engine := data.get("engine")):
        return None
    same = data.get("fingerprint") == _fingerprint("preflight", kind, channels, cells_per_stage, engine)
    return dict(data) if same else None


def _store(out: Path, kind: str, part: str, ops: tuple[str, ...], result: dict[str, Any]) -> None:
    path = _path(out, kind, part, ops)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, allow_nan=True))


def score_cell(
    ops: tuple[str, ...],
    accuracy: float,
    kind: str,
    out: Path,
    channels: int = 16,
    cells_per_stage: int = 5,
    keep_older_engines: bool = False,
) -> dict[str, Any]:
    """Preflight, its expressivity terms and the proxies on one cell, each part cached by its own
    fingerprint (``keep_older_engines``: a Preflight part by an older engine is kept, not rerun)."""
    from worker.engine import condition

    spec = nasbench201_spec(ops, channels=channels, cells_per_stage=cells_per_stage)
    x, y = cell_batch(kind)
    fingerprint = _fingerprint("proxies", kind, channels, cells_per_stage)
    if _cached(out, kind, "proxies", ops, fingerprint) is None:
        kept = _kept_proxies(out, kind, ops, channels, cells_per_stage)
        proxies = compute_proxies(build_model(spec, seed=0), x, y, kept=kept)
        seconds = sum(float(p["seconds"]) for p in proxies.values())  # a kept proxy's own time, not 0
        stored: dict[str, Any] = {"fingerprint": fingerprint, "proxies": proxies, "proxy_seconds": seconds}
        _store(out, kind, "proxies", ops, stored | {"proxy_revisions": revisions()})
    fingerprint = _fingerprint("expressivity", kind, channels, cells_per_stage)
    if _cached(out, kind, "expressivity", ops, fingerprint) is None:
        start = time.perf_counter()
        part = expressivity_part(spec, x)
        stored = {"fingerprint": fingerprint, "expressivity": part, "seconds": time.perf_counter() - start}
        _store(out, kind, "expressivity", ops, stored)
    fingerprint = _fingerprint("preflight", kind, channels, cells_per_stage)
    kept_preflight = keep_older_engines and _cached_any_engine(out, kind, ops, channels, cells_per_stage) is not None
    if not kept_preflight and _cached(out, kind, "preflight", ops, fingerprint) is None:
        start = time.perf_counter()
        report = condition(spec, data={"x": x, "y": y}, options={"seed": 0})
        budget = report.tuning.budget
        preflight = {
            "score": report.score,
            "verdict": report.verdict,
            "components": report.components,
            "counted_cost": float(budget.get("counted_steps") or 0.0),  # every stage, the probe included
            "status": report.tuning.status,
            "seconds": time.perf_counter() - start,
        }
        stored = {"fingerprint": fingerprint, "engine": engine_version(), "preflight": preflight}
        _store(out, kind, "preflight", ops, stored)
    result = _result(ops, accuracy, kind, out, channels, cells_per_stage, any_engine=keep_older_engines)
    assert result is not None
    return result


def _result(
    ops: tuple[str, ...],
    accuracy: float,
    kind: str,
    out: Path,
    channels: int,
    cells_per_stage: int,
    any_engine: bool = False,
) -> dict[str, Any] | None:
    proxies = _cached(out, kind, "proxies", ops, _fingerprint("proxies", kind, channels, cells_per_stage))
    preflight = (
        _cached_any_engine(out, kind, ops, channels, cells_per_stage)
        if any_engine
        else _cached(out, kind, "preflight", ops, _fingerprint("preflight", kind, channels, cells_per_stage))
    )
    if proxies is None or preflight is None:
        return None
    expressivity = _cached(
        out, kind, "expressivity", ops, _fingerprint("expressivity", kind, channels, cells_per_stage)
    )
    return {
        "arch": nasbench201_arch_string(ops),
        "ops": list(ops),
        "accuracy": accuracy,
        "proxies": proxies["proxies"],
        "proxy_seconds": proxies["proxy_seconds"],
        "preflight": rescored(preflight["preflight"]),  # on the shipped calibration, whichever engine ran it
        "engine": preflight.get("engine"),
        # None until measured (a cell scored before the part existed)
        "expressivity": expressivity["expressivity"] if expressivity else None,
        "expressivity_seconds": expressivity["seconds"] if expressivity else None,
    }


def _task(args: tuple[tuple[str, ...], float, str, str, int, int, bool]) -> str:
    ops, accuracy, kind, out, channels, per_stage, keep = args
    torch.set_num_threads(1)
    result = score_cell(ops, accuracy, kind, Path(out), channels, per_stage, keep)
    return f"{result['arch']}: {result['preflight']['seconds']:.0f} s"


def run(
    cells: list[tuple[str, ...]],
    table: dict[tuple[str, ...], float],
    kind: str,
    out: Path,
    jobs: int = 1,
    channels: int = 16,
    cells_per_stage: int = 5,
    keep_older_engines: bool = False,
) -> list[dict[str, Any]]:
    """Score every cell (in ``jobs`` processes), resuming from the cache. The cells are taken in
    a seeded random order, not decile by decile, so that a run stopped early leaves a uniform
    subsample of the stratified sample, which is what ``--report-only`` then reports.
    ``keep_older_engines``: a Preflight part by an older engine is kept (only missing parts run)."""
    order = random.Random(0).sample(cells, len(cells))
    tasks = [(c, table[c], kind, str(out), channels, cells_per_stage, keep_older_engines) for c in order]
    if jobs > 1:
        for i, line in enumerate(imap_spawned(_task, tasks, jobs), 1):
            print(f"[{i}/{len(tasks)}] {line}", flush=True)
    else:
        for i, task in enumerate(tasks, 1):
            print(f"[{i}/{len(tasks)}] {_task(task)}", flush=True)
    return scored(cells, table, kind, out, channels, cells_per_stage, any_engine=keep_older_engines)


def scored(
    cells: list[tuple[str, ...]],
    table: dict[tuple[str, ...], float],
    kind: str,
    out: Path,
    channels: int = 16,
    cells_per_stage: int = 5,
    any_engine: bool = False,
) -> list[dict[str, Any]]:
    """The cells of ``cells`` already scored with the current engine and settings (no computation;
    ``any_engine``: by whichever engine, each result naming its own)."""
    results = (_result(cell, table[cell], kind, out, channels, cells_per_stage, any_engine) for cell in cells)
    return [result for result in results if result is not None]


def _columns(results: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Per method, its score on every cell (higher = predicted better; nan where it failed)."""
    columns = {"preflight": np.array([_finite(r["preflight"]["score"]) for r in results])}
    for name in PROXIES:
        columns[f"proxy:{name}"] = np.array([_finite(r["proxies"][name]["score"]) for r in results])
    return columns


def _finite(value: Any) -> float:
    return float(value) if value is not None and math.isfinite(float(value)) else math.nan


def _hit_rate(scores: np.ndarray, accuracy: np.ndarray, k: int) -> float:
    """Share of the k most accurate cells among the k best scored (nan scores last)."""
    k = min(k, len(scores))
    best = set(np.argsort(-accuracy, kind="stable")[:k])
    ranked = set(np.argsort(-np.where(np.isnan(scores), -np.inf, scores), kind="stable")[:k])
    return len(best & ranked) / k if k else math.nan


def plot(results: list[dict[str, Any]], path: Path) -> Path:
    """Each method's score against the accuracy, on these cells (``bench.nasbench201.plots``)."""
    from bench.nasbench201.plots import write_score_vs_accuracy

    accuracy = np.array([r["accuracy"] for r in results])
    columns = _columns(results)
    rho = {name: spearman(scores, accuracy) for name, scores in columns.items()}
    return write_score_vs_accuracy(columns, accuracy, rho, path)


def report(
    results: list[dict[str, Any]],
    kind: str,
    note: str = "",
    figure: str | None = None,
    dev: list[dict[str, Any]] | None = None,
) -> str:
    """The Markdown report of one run (``docs/nasbench201.md``); ``figure``: the link to the plot;
    ``dev``: the development cells scored, for the fitted combination (``combine``)."""
    from bench.nasbench201.combine import ENSEMBLE, FITTED, fitted_columns

    accuracy = np.array([r["accuracy"] for r in results])
    columns = _columns(results)
    fitted = fitted_columns(dev, results) if dev is not None else {}
    bad = accuracy < FLAG_BELOW
    n = len(results)
    lines = [
        "# NAS-Bench-201: ranking cells without training" + ("" if kind == "fashion" else " (a Gaussian batch)"),
        "",
        "Generated by `python -m bench.nasbench201"
        + ("" if kind == "fashion" else " --data gaussian --docs docs/nasbench201-gaussian.md")
        + "` from its per-cell results (`bench/results/nasbench201/`);",
        "the method, the table and its encoding are in `bench/nasbench201/` (`table.py`, `score.py`).",
        "",
        note,
        "",
        f"- Cells: {n}, stratified by the table's accuracy (deciles), seed 0; {int(bad.sum())} below "
        f"{FLAG_BELOW:.0f} %. Ground truth: AnalogNAS-Bench's `baseline_accuracy` (CIFAR-10, full training).",
        "- Input batch: "
        + ("Fashion-MNIST, 64 images padded to 3x32x32" if kind == "fashion" else "Gaussian, 64x3x32x32")
        + ", the same for every cell and method; PyTorch's default init (the benchmark's).",
        "- Intervals: percentile bootstrap over cells, 2000 resamples; a difference counts only when its whole "
        "interval is above 0.",
        f"- n/a: a top-k hit rate needs at least 5k cells, a flagging precision at least {MIN_FLAGGED} cells below "
        f"{FLAG_BELOW:.0f} % (the table has 341 cells at exactly 10 % in 15,625: about 2 %).",
        "",
        "| method | Spearman | Kendall | top-10 hit | top-50 hit | precision at recall 0.8 (< 20 %) "
        "| seconds per cell |",
        "|---|---|---|---|---|---|---|",
    ]
    if fitted:
        lines[-3:-3] = [
            f"- `{FITTED}`: Preflight's components, its expressivity terms (`options.expressivity`) and the size, "
            f"fitted on the development cells; `{ENSEMBLE}`: every proxy, fitted the same way (last section).",
        ]
    seconds = {
        "preflight": float(np.median([r["preflight"]["seconds"] for r in results])),
        **{f"proxy:{p}": float(np.median([r["proxies"][p]["seconds"] for r in results])) for p in PROXIES},
    }
    if fitted:  # the conditioning and the expressivity pass; every proxy together
        seconds[FITTED] = float(
            np.median([r["preflight"]["seconds"] + (r.get("expressivity_seconds") or 0.0) for r in results])
        )
        seconds[ENSEMBLE] = float(np.median([r["proxy_seconds"] for r in results]))
    for name, scores in (columns | fitted).items():
        rho = bootstrap(lambda i, s=scores: spearman(s[i], accuracy[i]), n)
        tau = kendall(scores, accuracy)
        # the lowest scores are pruned first (higher = predicted better), as in benchmark v2
        flag = precision_at_recall(scores, bad, RECALL) if bad.sum() >= MIN_FLAGGED else math.nan
        hits = [_hit_rate(scores, accuracy, k) if n >= 5 * k else math.nan for k in (10, 50)]
        lines.append(
            f"| {name} | {rho.point:.3f} [{rho.low:.3f}, {rho.high:.3f}] | {tau:.3f} | "
            + " | ".join("n/a" if math.isnan(v) else f"{v:.2f}" for v in (*hits, flag))
            + f" | {seconds[name]:.2f} |"
        )
    lines += ["", "Preflight's Spearman minus each proxy's, paired over the same resamples:", ""]
    ours = columns["preflight"]
    for name, scores in columns.items():
        if name == "preflight":
            continue
        diff = paired_difference(
            lambda i: spearman(ours[i], accuracy[i]), lambda i, s=scores: spearman(s[i], accuracy[i]), n
        )
        verdict = "above" if diff.low > 0 else "below" if diff.high < 0 else "not distinguishable"
        lines.append(f"- {name}: {diff.point:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] ({verdict})")
    names = sorted({name for r in results for name in (r["preflight"].get("components") or {})})
    if names:
        lines += [
            "",
            "What each of Preflight's components ranks alone, on the cells where it was measured (each is a "
            "penalty, higher is worse, so its negative is ranked; the expressivity terms, higher is more "
            "expressive, as they are):",
            "",
            "| component | Spearman with accuracy | cells with a value |",
            "|---|---|---|",
        ]
        # each component is a penalty (its negative is ranked); the expressivity terms, as they are
        alone = {
            name: np.array([-_finite((r["preflight"].get("components") or {}).get(name)) for r in results])
            for name in names
        } | {
            f"expressivity: {term}": np.array([_finite((r.get("expressivity") or {}).get(term)) for r in results])
            for term in ("naswot", "meco")
        }
        for name, values in alone.items():
            have = np.isfinite(values)  # a component skipped under the budget is left out, not ranked last
            if not have.any():
                continue  # off on this path (the diagnostics, the terms of an older cache): nothing to rank
            v, a = values[have], accuracy[have]
            rho = bootstrap(lambda i, v=v, a=a: spearman(v[i], a[i]), int(have.sum()))
            lines.append(f"| {name} | {rho.point:.3f} [{rho.low:.3f}, {rho.high:.3f}] | {int(have.sum())} |")
    if dev is not None:
        from bench.nasbench201.combine import report_lines

        proxies = {name: spearman(scores, accuracy) for name, scores in columns.items() if name != "preflight"}
        best = max(proxies, key=lambda name: proxies[name] if math.isfinite(proxies[name]) else -math.inf)
        lines += report_lines(dev, results, best.removeprefix("proxy:"))
    from bench.nasbench201 import search

    lines += search.report_lines(results)
    if dev:
        lines += search.learning_curve_lines(dev)
    costs = [r["preflight"]["counted_cost"] for r in results]
    lines += ["", f"Preflight's counted cost per cell: median {float(np.median(costs)):.1f} training steps.", ""]
    if figure:
        lines += [f"![Each method's score (its rank among the cells) against the trained accuracy]({figure})", ""]
    return "\n".join(lines)

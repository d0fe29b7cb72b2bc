"""The GPU path, proved and timed on a lent GPU in one short run (issue 16: "run both parts on it
and give GPU wall times and candidates per second").

    python -m bench.perf.gpu_path prepare DIR [--scored RUN.json]   # here: inputs, CPU references
    python -m bench.perf.gpu_path run DIR OUT [--stage S]           # on the GPU: OUT/gpu_path.json
    python -m bench.perf.gpu_path report RUN.json... [--tuning-cost F] [--demo R] [--note TEXT]  # docs/gpu.md

``prepare`` writes what the GPU machine cannot make (it has no Fashion-MNIST and no NAS-Bench-201
table): the search space's networks (sampled from ``bench.fashion_search.space`` at fixed seeds),
two ViTs, the conditioning batches, cells of NAS-Bench-201's reported sample in a seeded random
order (less those an earlier run scored) with the Preflight part this CPU stored for them, and each
network's CPU conditioning (the reference).

``run`` has three stages, each timed and each failure recorded, not fatal:

* ``agreement``: every prepared network conditioned on ``cuda`` and compared with its CPU report.
  The engine's random streams live on the device (``worker.engine.seeds``), so a GPU report is
  reproducible on the GPU but not equal to the CPU's: the comparison is of verdicts, scores and
  tuned scales, not bits. A few networks are conditioned on the GPU machine's CPU too, for a
  speed ratio on one machine.
* ``nasbench201``: the sample's cells conditioned on the GPU by ``--jobs`` processes at once,
  with every zero-cost proxy of benchmark v2 on the same GPU, until ``--seconds`` run out: cells
  per second, seconds per cell, and the scores against the CPU's.
* ``service``: ``preflight serve`` and ``preflight worker --devices all`` (the docker-compose GPU
  node's two processes) on SQLite; a client submits the networks over HTTP without data (the
  default path) and waits; what it records: the devices the reports name, their verdicts, the wall.
* ``training``: the prepared networks trained one epoch each by ``nas.training.Trainer`` on the
  device (a few on the machine's CPU too), on the Fashion-MNIST search's training split and at its
  batch: the search's training part, which the first runs left on the CPU.
* ``draw``: the engine's orthogonal draw (``nas.build.orthogonal_draw_``: a float64 SVD per weight)
  on each prepared network, on the machine's CPU and on the device, timed, and how far apart the
  two draws' float32 weights are: whether drawing on the device would pay, and what it would change.

On a lent machine (this project's first: an H200 with torch 2.11+cu130 and Python 3.12 installed, no
network): ``prepare`` here, then carry the folder and the wheels the project needs beyond torch
(``pip download --python-version 3.12 --only-binary=:all:`` of its dependencies, into an ignored
folder), install them there with ``pip install --target`` onto ``PYTHONPATH``, and in one command run
``pytest tests/worker/engine/test_cuda.py tests/nas/test_training.py`` then ``run DIR OUT`` (the
stages take about 8 minutes; ``--stage`` picks some), and ``preflight demo --device cuda`` (its
``results.json`` is ``report --demo``'s). The results come back under ``OUT``. The second lent
machine ran all of it in one call of 340 s, the NAS-Bench-201 stage given 120 s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.pipeline.run import read_json, write_json

ROOT = Path(__file__).resolve().parents[2]
NB201_CELLS = 400  # cells of the reported sample sent to a run (more than its time will score)
SEARCH_NETWORKS = 12
ON_BOTH_CPUS = 3  # networks also conditioned on the GPU machine's CPU (one machine's speed ratio)
STAGES = ("agreement", "nasbench201", "service", "training", "draw")
TRAINING_LR = 0.01  # the training stage's SGD rate (any sane rate: the stage times the loop)


def prepare(folder: Path, scored: list[Path] | None = None) -> None:
    """The GPU run's inputs, and each network's conditioning on this CPU (the reference); the
    NAS-Bench-201 cells in a seeded random order of the reported sample, less those an earlier
    run's ``gpu_path.json`` (``scored``) holds."""
    import optuna
    import torch

    from bench.fashion_search.evaluate import conditioning_batch, load_splits
    from bench.fashion_search.space import search_space
    from bench.nasbench201.score import _cached_any_engine, cell_batch, sample_cells
    from bench.nasbench201.table import load_table
    from nas.space.vit import vit_spec
    from worker.engine import condition

    folder.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    specs: dict[str, dict[str, Any]] = {}
    for seed in range(SEARCH_NETWORKS):
        trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
        spec, _ = search_space(trial)
        specs[f"search-{seed}"] = spec
    specs["vit-tiny-14"] = vit_spec(input_shape=[1, 14, 14], patch=7, width=64, depth=4, heads=4, n_classes=10)
    specs["vit-small-14"] = vit_spec(input_shape=[1, 14, 14], patch=2, width=128, depth=6, heads=4, n_classes=10)
    data, _, _ = load_splits()
    x, y = conditioning_batch(data)
    batch = {"x": x.clone(), "y": y.clone()}  # a copy: a slice would save the whole split
    torch.save(batch, folder / "search_batch.pt")
    sets = {"x_train": data.x_train, "y_train": data.y_train, "x_val": data.x_val, "y_val": data.y_val}
    torch.save(sets, folder / "search_data.pt")  # the training stage's (the GPU machine has no Fashion-MNIST)
    references = {}
    for name, spec in specs.items():
        started = time.perf_counter()
        report = condition(spec, data=batch, options={"seed": 0, "device": "cpu"})
        references[name] = {"report": report.model_dump(mode="json"), "seconds": time.perf_counter() - started}
        print(f"{name}: {report.verdict} {report.score:.3f} in {references[name]['seconds']:.1f} s", flush=True)
    table = load_table()
    out = ROOT / "bench" / "results" / "nasbench201"
    done = {tuple(c["ops"]) for path in scored or [] for c in _nasbench201_cells(read_json(path))}
    order = [ops for ops in sample_cells(table, 1000, seed=0) if ops not in done]
    random.Random(0).shuffle(order)  # the sample is drawn decile by decile: its prefix is the lowest
    cells = []
    for ops in order[:NB201_CELLS]:
        stored = _cached_any_engine(out, "fashion", ops, 16, 5)
        cells.append({"ops": list(ops), "accuracy": table[ops], "cpu": stored})
    x, y = cell_batch("fashion")
    torch.save({"x": x, "y": y}, folder / "nb201_batch.pt")
    write_json(folder / "inputs.json", {"specs": specs, "references": references, "nb201": cells, "cpu": _machine()})


def _nasbench201_cells(result: dict[str, Any]) -> list[dict[str, Any]]:
    return list(result["stages"].get("nasbench201", {}).get("cells", []))


def run(folder: Path, out: Path, jobs: int, seconds: float, device: str = "cuda", only: list[str] | None = None) -> int:
    """The stages (``only``: these) on ``device`` (``cpu``: a dry run of this script);
    ``out/gpu_path.json`` is rewritten after each."""
    inputs = read_json(folder / "inputs.json")
    result: dict[str, Any] = {"machine": _machine(), "cpu_machine": inputs["cpu"], "stages": {}}
    stages: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("agreement", lambda: _agreement(folder, inputs, device)),
        ("nasbench201", lambda: _nasbench201(folder, inputs["nb201"], jobs, seconds, device)),
        ("service", lambda: _service(inputs["specs"], out)),
        ("training", lambda: _training(folder, inputs["specs"], device)),
        ("draw", lambda: _draw(inputs["specs"], device)),
    ]
    for name, stage in stages:
        if only and name not in only:
            continue
        started = time.perf_counter()
        try:
            result["stages"][name] = stage() | {"wall_seconds": time.perf_counter() - started}
        except Exception:  # noqa: BLE001 - a broken stage is a finding, and the others still run
            result["stages"][name] = {"error": traceback.format_exc(), "wall_seconds": time.perf_counter() - started}
        print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
        write_json(out / "gpu_path.json", result)
    return 0 if all("error" not in s for s in result["stages"].values()) else 1


def _machine() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average": os.getloadavg()[0],  # the CPU references' seconds stretch under another job's load
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info |= {"gpu": props.name, "gpu_memory_gib": props.total_memory / 2**30, "cuda": torch.version.cuda}
    return info


def _timed_condition(spec: dict[str, Any], batch: dict[str, Any], device: str) -> tuple[Any, float]:
    from worker.engine import condition

    started = time.perf_counter()
    report = condition(spec, data=batch, options={"seed": 0, "device": device})
    _synchronize(device)
    return report, time.perf_counter() - started


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _agreement(folder: Path, inputs: dict[str, Any], device: str) -> dict[str, Any]:
    import torch

    batch = torch.load(folder / "search_batch.pt")
    _timed_condition(next(iter(inputs["specs"].values())), batch, device)  # the CUDA context, kernels' first load
    rows = []
    for i, (name, spec) in enumerate(inputs["specs"].items()):
        cpu = inputs["references"][name]
        gpu, gpu_seconds = _timed_condition(spec, batch, device)
        row = {
            "name": name,
            "device": gpu.environment.device,
            "gpu_seconds": gpu_seconds,
            "cpu_seconds_there": _timed_condition(spec, batch, "cpu")[1] if i < ON_BOTH_CPUS else None,
            "cpu_seconds_here": cpu["seconds"],
            "verdict": [cpu["report"]["verdict"], gpu.verdict],
            "score": [cpu["report"]["score"], gpu.score],
            "scale_ratio": _scale_ratios(cpu["report"]["scales"], dict(gpu.scales)),
            "counted_steps": [
                cpu["report"]["tuning"]["budget"].get("counted_steps"),
                gpu.tuning.budget.get("counted_steps"),
            ],
        }
        rows.append(row)
        print(f"  {name}: {row['verdict']} {row['score']} {gpu_seconds:.2f} s", flush=True)
    return {"rows": rows}


def _training(folder: Path, specs: dict[str, dict[str, Any]], device: str) -> dict[str, Any]:
    """Each network trained one epoch on ``device`` (the first ``ON_BOTH_CPUS`` on the CPU too)."""
    import torch

    from nas.training import Dataset

    data = Dataset(**torch.load(folder / "search_data.pt"), n_classes=10)
    first = next(iter(specs.values()))
    _train_epoch(first, data, device)  # the CUDA context, kernels' first load
    _train_epoch(first, data, "cpu")  # and the CPU's, so neither side's first network is timed cold
    rows = []
    for i, (name, spec) in enumerate(specs.items()):
        row: dict[str, Any] = {"name": name, "device": _train_epoch(spec, data, device)}
        row["cpu_there"] = _train_epoch(spec, data, "cpu") if i < ON_BOTH_CPUS else None
        rows.append(row)
        print(f"  {name}: {row['device']['seconds']:.2f} s for {row['device']['steps']} steps", flush=True)
    return {"rows": rows, "lr": TRAINING_LR, "threads": torch.get_num_threads()}


def _train_epoch(spec: dict[str, Any], data: Any, device: str) -> dict[str, Any]:
    from bench.fashion_search.evaluate import search_trainer

    trainer = search_trainer(spec, data, TRAINING_LR, 0, device=device)
    accuracy = trainer.epoch()  # ends with the validation accuracy, read on the host: synchronized
    return {
        "seconds": trainer.seconds,
        "steps": trainer.steps,
        "macs": trainer.macs,
        "val": accuracy,
        "diverged": trainer.diverged,
    }


def _draw(specs: dict[str, dict[str, Any]], device: str) -> dict[str, Any]:
    """The orthogonal draw of each network on the CPU and on ``device``, from the same Gaussian
    weights: seconds, and the draws' largest difference and share of equal float32 values."""
    import copy

    import torch

    import nas
    from nas.build import orthogonal_draw_

    def timed_draw(model: Any, where: str) -> float:
        started = time.perf_counter()
        orthogonal_draw_(model)
        _synchronize(where)
        return time.perf_counter() - started

    timed_draw(nas.build_model(next(iter(specs.values())), seed=0).to(device), device)  # the solver's first load
    rows = []
    for name, spec in specs.items():
        on_cpu = nas.build_model(spec, seed=0)  # the spec's Gaussian draw, before the orthogonal one
        on_device = copy.deepcopy(on_cpu).to(device)
        row: dict[str, Any] = {"name": name, "cpu_seconds": timed_draw(on_cpu, "cpu")}
        row["device_seconds"] = timed_draw(on_device, device)
        pairs = [
            (a.weight.detach(), b.weight.detach().cpu())
            for (_, a), (_, b) in zip(on_cpu.weighted_layers(), on_device.weighted_layers(), strict=True)
        ]
        row["largest_difference"] = max(float((a - b).abs().max()) for a, b in pairs)
        row["equal_share"] = sum(int((a == b).sum()) for a, b in pairs) / sum(a.numel() for a, _ in pairs)
        rows.append(row)
        print(f"  {name}: draw {row['cpu_seconds']:.2f} s CPU, {row['device_seconds']:.2f} s {device}", flush=True)
    return {"rows": rows, "threads": torch.get_num_threads()}


def _scale_ratios(cpu: dict[str, float], gpu: dict[str, float]) -> dict[str, float]:
    """The GPU's tuned scale over the CPU's, per block: median and the largest deviation."""
    ratios = [gpu[k] / cpu[k] for k in cpu if k in gpu and cpu[k]]
    if not ratios:
        return {}
    logs = [abs(math.log(r)) for r in ratios if r > 0]
    return {"median": statistics.median(ratios), "largest": math.exp(max(logs)) if logs else math.nan}


def _nasbench201(folder: Path, cells: list[dict[str, Any]], jobs: int, seconds: float, device: str) -> dict[str, Any]:
    """The cells on the GPU by ``jobs`` processes until ``seconds`` pass; cells per second."""
    from multiprocessing import get_context

    deadline = time.time() + seconds
    tasks = [(str(folder), cell, deadline, device) for cell in cells]
    started = time.perf_counter()
    rows = []
    with get_context("spawn").Pool(jobs) as pool:
        for row in pool.imap_unordered(_score_cell_on_gpu, tasks):
            if row is not None:
                rows.append(row)
    wall = time.perf_counter() - started
    return {"jobs": jobs, "seconds_allowed": seconds, "cells": rows, "wall": wall}


def _score_cell_on_gpu(task: tuple[str, dict[str, Any], float, str]) -> dict[str, Any] | None:
    """One cell: Preflight's part and the proxies on the GPU, each timed (None past the deadline)."""
    from bench.pipeline.proxies import compute_proxies
    from nas import build_model
    from nas.space import nasbench201_spec

    folder, cell, deadline, device = task
    if time.time() > deadline:
        return None
    batch = _nb201_batch(folder)
    spec = nasbench201_spec(tuple(cell["ops"]), channels=16, cells_per_stage=5)
    report, seconds = _timed_condition(spec, batch, device)
    started = time.perf_counter()
    proxies = compute_proxies(build_model(spec, seed=0).to(device), batch["x"].to(device), batch["y"].to(device))
    _synchronize(device)
    return {
        "ops": cell["ops"],
        "accuracy": cell["accuracy"],
        "seconds": seconds,
        "proxy_seconds": time.perf_counter() - started,
        "score": report.score,
        "verdict": report.verdict,
        "components": report.components,
        "counted_steps": report.tuning.budget.get("counted_steps"),
        "proxies": {k: v["score"] for k, v in proxies.items()},
        "cpu": cell["cpu"],
        "finished": time.time(),
    }


_BATCH: dict[str, Any] = {}


def _nb201_batch(folder: str) -> dict[str, Any]:
    import torch

    if not _BATCH:
        _BATCH.update(torch.load(Path(folder) / "nb201_batch.pt"))
    return _BATCH


def _service(specs: dict[str, dict[str, Any]], out: Path) -> dict[str, Any]:
    """``preflight serve`` and ``preflight worker --devices all`` on one SQLite file; the networks
    submitted over HTTP; each report's device and the wall time from submission to the last report."""
    import socket
    import tempfile

    from nas.client import PreflightClient

    work = Path(tempfile.mkdtemp())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"PREFLIGHT_DATABASE_URL": f"sqlite:///{work / 'preflight.db'}", "PREFLIGHT_PORT": str(port)}
    preflight = [sys.executable, "-m", "service.cli"]
    log = (out / "service.log").open("w")
    processes = [subprocess.Popen([*preflight, "serve", "--port", str(port)], env=env, stdout=log, stderr=log)]
    try:
        url = f"http://127.0.0.1:{port}"
        client = PreflightClient(url=url)
        _wait_until(lambda: _healthy(url), 120)
        processes.append(subprocess.Popen([*preflight, "worker", "--devices", "all"], env=env, stdout=log, stderr=log))
        started = time.perf_counter()
        candidates = client.submit_many(list(specs.values()), {"seed": 0})
        finished = client.wait_many([c.id for c in candidates], timeout=300)
        wall = time.perf_counter() - started
        reports = [c.require_report() for c in finished]
        return {
            "networks": len(reports),
            "devices": sorted({r.environment.device for r in reports}),
            "verdicts": [r.verdict for r in reports],
            "wall": wall,
        }
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:  # not listening yet
        return False


def _wait_until(ready: Callable[[], bool], bound: float) -> None:
    deadline = time.time() + bound
    while not ready():
        if time.time() > deadline:
            raise TimeoutError(f"not ready after {bound:.0f} s")
        time.sleep(0.5)


def report(
    runs: list[Path], docs: Path, note: str = "", tuning_cost: Path | None = None, demo: Path | None = None
) -> str:
    """``docs/gpu.md`` from the runs' ``gpu_path.json`` files (the NAS-Bench-201 cells of all of
    them, each other stage from the last run that completed it), read against the CPU's stored parts;
    ``demo``: the ``results.json`` of ``preflight demo --device cuda`` on the GPU machine."""
    results = [read_json(p) for p in runs]
    machine = results[0]["machine"]
    lines = [
        "# The GPU path, on a lent GPU",
        "",
        f"{machine.get('gpu', 'no GPU')} ({machine.get('gpu_memory_gib', 0):.0f} GiB), {machine['cpus']} CPU cores, "
        f"torch {machine['torch']} (CUDA {machine.get('cuda')}), Python {machine['python']}. Written by "
        "`python -m bench.perf.gpu_path report` from what the runs brought back (`bench/results/gpu_path/`). "
        f"{note}".strip(),
        "",
    ]
    completed = {name: (part, r) for r in results for name, part in r["stages"].items() if "error" not in part}
    if "agreement" in completed:
        part, run_of_it = completed["agreement"]
        lines += _agreement_section(part["rows"], run_of_it["cpu_machine"])
    if any(_nasbench201_cells(r) for r in results):
        lines += _nasbench201_section(results, [p.stem for p in runs])
    if "service" in completed:
        lines += _service_section(completed["service"][0])
    if tuning_cost is not None:
        lines += _tuning_cost_section(tuning_cost)
    if "training" in completed:
        lines += _training_section(completed["training"][0])
    if demo is not None:
        lines += _demo_section(read_json(demo))
    if "draw" in completed:
        lines += _draw_section(completed["draw"][0])
    docs.write_text("\n".join(lines) + "\n")
    return str(docs)


def _nasbench201_section(results: list[dict[str, Any]], names: list[str]) -> list[str]:
    import numpy as np

    from bench.nasbench201.score import _path
    from bench.pipeline.metrics import spearman
    from bench.v2.analysis import rescored
    from bench.v2.stats import bootstrap, paired_difference

    rows = list({tuple(c["ops"]): c for r in results for c in _nasbench201_cells(r)}.values())
    gpu = [rescored({"components": c["components"], "score": c["score"]}) or {} for c in rows]
    cpu = [rescored(c["cpu"]["preflight"]) or {} for c in rows]
    accuracy = np.array([c["accuracy"] for c in rows])
    g, c = np.array([x["score"] for x in gpu]), np.array([x["score"] for x in cpu])
    same = sum(a["verdict"] == b["verdict"] for a, b in zip(gpu, cpu, strict=True))
    n = len(rows)
    on_gpu = bootstrap(lambda i: spearman(g[i], accuracy[i]), n)
    on_cpu = bootstrap(lambda i: spearman(c[i], accuracy[i]), n)
    diff = paired_difference(lambda i: spearman(g[i], accuracy[i]), lambda i: spearman(c[i], accuracy[i]), n)
    lines = [
        "## NAS-Bench-201 cells on the GPU",
        "",
        f"{n} cells of the reported sample (docs/nasbench201.md: 16 channels, 5 cells per stage, the "
        "Fashion-MNIST batch), each conditioned by Preflight and scored by the 12 zero-cost proxies on the "
        "GPU, several processes sharing it:",
        "",
        "| run | processes | cells | wall | cells per second | Preflight per cell (median) | proxies per cell |",
        "|---|---|---|---|---|---|---|",
    ]
    rates = []
    for name, r in zip(names, results, strict=True):
        if done := _nasbench201_cells(r):
            wall = r["stages"]["nasbench201"]["wall"]
            rates.append(len(done) / wall)
            lines.append(
                f"| {name} | {r['stages']['nasbench201']['jobs']} | {len(done)} | {wall:.0f} s | {rates[-1]:.2f} | "
                f"{statistics.median(x['seconds'] for x in done):.2f} s | "
                f"{statistics.median(x['proxy_seconds'] for x in done):.2f} s |"
            )
    out = ROOT / "bench" / "results" / "nasbench201"
    stored = [read_json(_path(out, "fashion", "proxies", tuple(r["ops"]))) for r in rows]
    engines = ", ".join(sorted({f"`{r['cpu']['engine'][:8]}`" for r in rows}))
    return [
        *lines,
        "",
        f"On the 2-core CPU the same cells' Preflight part took "
        f"{statistics.median(r['cpu']['preflight']['seconds'] for r in rows):.1f} s (median; two processes) and "
        f"their proxies {statistics.median(float(p['proxy_seconds']) for p in stored):.1f} s. At the best rate "
        f"above, all 15,625 cells would take {15625 / max(rates) / 60:.0f} minutes of the GPU.",
        "",
        "The same cells, GPU against CPU (the score recomputed from the components by the shipped "
        f"calibration, as the reports do; the CPU's parts are the stored ones, of the engines {engines}: on the "
        "CPU the GPU's engine gives what they gave, above):",
        "",
        f"- verdicts: {same} of {n} the same ({sum(x['verdict'] == 'prune' for x in gpu)} pruned on the GPU, "
        f"{sum(x['verdict'] == 'prune' for x in cpu)} on the CPU);",
        f"- score: Spearman {spearman(g, c):.3f} between the two; absolute difference median "
        f"{float(np.median(np.abs(g - c))):.4f}, largest {float(np.max(np.abs(g - c))):.3f};",
        f"- Spearman with the table's accuracy: GPU {on_gpu.text(3)}, CPU {on_cpu.text(3)}, difference {diff.text(3)};",
        *_proxy_agreement(rows, stored),
        "",
    ]


def _service_section(part: dict[str, Any]) -> list[str]:
    return [
        "## The service on the GPU",
        "",
        "`preflight serve` and `preflight worker --devices all` (the docker-compose GPU node's two processes) "
        f"on one SQLite file; a client submitted the {part['networks']} networks of the first table over HTTP, "
        "without data (the default path: a Gaussian batch and random labels), and waited. Every report names "
        f"{', '.join('`' + d + '`' for d in part['devices'])}; the last came {part['wall']:.1f} s after the "
        "submission, the worker's start and its engine's warm-up included. Verdicts: "
        f"{part['verdicts'].count('prune')} pruned (with the labelled batch: the first table).",
        "",
    ]


def _tuning_cost_section(path: Path) -> list[str]:
    """``python -m bench.perf.tuning_cost --device cuda``'s output: its JSON, then its Markdown."""
    text = path.read_text()
    measured, table = json.JSONDecoder().raw_decode(text)[0], text[text.index("\n\nDevice:") :].strip()
    rows = measured["rows"]
    own = [r["budget"]["timed_steps"] for r in rows]
    counted = [r["budget"]["counted_steps"] for r in rows]
    over = [r for r in rows if r["budget"]["counted_steps"] > r["budget"]["budget_steps"] + 1e-9]
    budget = (
        "The counted budget holds"
        if not over
        else f"The counted budget holds on {len(rows) - len(over)} of {len(rows)}; "
        + ", ".join(
            f"{r['model']} goes past it by the probe's lower rate before a prune "
            f"({r['budget'].get('counted_probe_lower', 0.0):.1f} counted steps, by design: docs/conditioning.md, "
            "section 7)"
            for r in over
        )
    )
    return [
        "## A tuning step and the whole conditioning on the GPU",
        "",
        "`python -m bench.perf.tuning_cost --device cuda --models mlp,vgg,resnet,nasbench201,vit_tiny --repeats 3` "
        "(batch 128; each peak memory in a fresh process; docs/conditioning.md has the CPU's figures):",
        "",
        table,
        "",
        f"A tuning step costs {min(r['time_ratio'] for r in rows):.2f}x to {max(r['time_ratio'] for r in rows):.2f}x "
        f"a training step and {min(r['memory_ratio'] for r in rows):.2f}x to "
        f"{max(r['memory_ratio'] for r in rows):.2f}x its memory (targets: 4x and 3x). {budget} "
        f"({min(counted):.1f} to {max(counted):.1f} counted steps), and the stages' own timings come to "
        f"{min(own):.1f} to {max(own):.1f} of the network's training steps; but the whole call takes "
        f"{min(r['condition_s'] for r in rows):.1f} to {max(r['condition_s'] for r in rows):.1f} s, many more "
        "training steps than either: a training step of these networks on this GPU takes milliseconds, and the "
        "part of the call that is not timed as a stage (building the network, its draw, the report) runs on "
        "the CPU.",
        "",
    ]


def _table_section(title: str, intro: str, columns: list[str], rows: list[list[str]]) -> list[str]:
    """A page section: its heading, a paragraph and a Markdown table."""
    return [
        f"## {title}",
        "",
        intro,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _training_section(part: dict[str, Any]) -> list[str]:
    rows = part["rows"]
    lines = _table_section(
        "Training on the GPU",
        f"`nas.training.Trainer(..., device=...)`: each network of the first table trained one epoch on the "
        f"Fashion-MNIST search's 6,000 training images (SGD at {part['lr']:g}, momentum 0.9, batch 64, the "
        "validation pass included), from the spec's init at seed 0.",
        ["network", "seconds on the GPU", "steps", "seconds on the GPU machine's CPU", "validation accuracy"],
        [
            [
                r["name"],
                f"{r['device']['seconds']:.2f}",
                str(r["device"]["steps"]),
                f"{r['cpu_there']['seconds']:.2f}" if r["cpu_there"] is not None else "-",
                "diverged" if r["device"]["diverged"] else f"{r['device']['val']:.3f}",
            ]
            for r in rows
        ],
    )
    device = sum(r["device"]["seconds"] for r in rows)
    both = [r for r in rows if r["cpu_there"] is not None]
    compared = ""
    if both:
        ratio = sum(r["cpu_there"]["seconds"] for r in both) / sum(r["device"]["seconds"] for r in both)
        compared = (
            f"; on the {len(both)} networks trained on both, the GPU machine's CPU ({part['threads']} threads) "
            f"took {ratio:.1f}x the GPU's seconds"
        )
    return [
        *lines,
        "",
        f"One after another: {len(rows) / device * 60:.1f} network-epochs per minute on the GPU{compared}.",
        "",
    ]


def _draw_section(part: dict[str, Any]) -> list[str]:
    rows = part["rows"]
    lines = _table_section(
        "The orthogonal draw on the GPU",
        "`nas.build.orthogonal_draw_` (a float64 SVD per weight, its polar factor) of each network's Gaussian "
        f"draw, on the GPU machine's CPU ({part['threads']} threads) and on the GPU, from the same weights:",
        ["network", "seconds on the CPU", "seconds on the GPU", "largest difference", "float32 values equal"],
        [
            [
                r["name"],
                f"{r['cpu_seconds']:.2f}",
                f"{r['device_seconds']:.2f}",
                f"{r['largest_difference']:.1e}",
                f"{r['equal_share']:.1%}",
            ]
            for r in rows
        ],
    )
    cpu, device = sum(r["cpu_seconds"] for r in rows), sum(r["device_seconds"] for r in rows)
    return [*lines, "", f"In all: {cpu:.1f} s on the CPU, {device:.1f} s on the GPU.", ""]


def _agreement_section(rows: list[dict[str, Any]], here: dict[str, Any]) -> list[str]:
    """The GPU against the CPU references; the speed ratio on one machine (the GPU machine's CPU),
    the one against the CPU that prepared the references with that CPU's load when it is known."""
    same = sum(r["verdict"][0] == r["verdict"][1] for r in rows)
    lines = [
        "## The engine on the GPU against the CPU",
        "",
        f"{len(rows)} networks (12 from the Fashion-MNIST search's space at fixed seeds, two ViTs on 14x14 images), "
        "conditioned on the search's labelled batch of 64 images at seed 0, on the GPU and on the 2-core CPU. The "
        "engine's random streams live on the device, so the reports are not bit-equal: "
        f"{same} of {len(rows)} verdicts agree.",
        "",
        "| network | verdict CPU / GPU | score CPU / GPU | tuned scales GPU / CPU: largest deviation | counted steps "
        "CPU / GPU | seconds: GPU / this CPU / the GPU machine's CPU |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        there = f"{r['cpu_seconds_there']:.2f}" if r["cpu_seconds_there"] is not None else "-"
        lines.append(
            f"| {r['name']} | {' / '.join(r['verdict'])} | {r['score'][0]:.3f} / {r['score'][1]:.3f} | "
            f"{(r['scale_ratio'].get('largest', math.nan) - 1) * 100:+.1f} % | "
            f"{r['counted_steps'][0]:.1f} / {r['counted_steps'][1]:.1f} | "
            f"{r['gpu_seconds']:.2f} / {r['cpu_seconds_here']:.2f} / {there} |"
        )
    gpu = sum(r["gpu_seconds"] for r in rows)
    cpu = sum(r["cpu_seconds_here"] for r in rows)
    both = [r for r in rows if r["cpu_seconds_there"] is not None]
    ratio_there = sum(r["cpu_seconds_there"] for r in both) / sum(r["gpu_seconds"] for r in both) if both else math.nan
    load = f", load average {here['load_average']:.1f} when they were made" if "load_average" in here else ""
    return [
        *lines,
        "",
        f"One after another: {len(rows) / gpu:.1f} networks per second on the GPU. On one machine, the "
        f"{len(both)} networks conditioned on both took {ratio_there:.1f}x the GPU's seconds on the GPU machine's CPU "
        f"(one thread). The references' CPU ({here.get('cpus')} cores{load}) took {cpu / gpu:.1f}x.",
        "",
    ]


def _demo_section(results: dict[str, Any]) -> list[str]:
    """``preflight demo`` run on the GPU: each search's trials, compute and best accuracy."""
    args, searches = results["args"], results["searches"]
    rows = []
    for search in searches:
        trials = search["trials"]
        train = sum(t["train_seconds"] or 0.0 for t in trials)
        condition = sum(t["condition_seconds"] or 0.0 for t in trials)
        done = [t["accuracy"] for t in trials if t["state"] == "complete" and t["accuracy"] is not None]
        best = max(done, default=math.nan)  # as the demo's table reads it: of the trials that completed
        rows.append(
            [
                search["name"],
                str(len(trials)),
                f"{search['wall_seconds']:.1f} s",
                f"{train:.1f} s",
                f"{condition:.1f} s",
                f"{len(trials) / search['wall_seconds']:.2f}",
                f"{best:.3f}",
            ]
        )
    wall = sum(s["wall_seconds"] for s in searches)
    count = sum(len(s["trials"]) for s in searches)
    return [
        *_table_section(
            "The demo on the GPU",
            f"`preflight demo --dataset {args['dataset']} --device {args['device']}` ({args['trials']} trials per "
            f"search, {args['epochs']} epochs; the embedded service's worker and the trainings on "
            f"`{args['train_device']}`):",
            [
                "search",
                "trials",
                "wall",
                "training",
                "conditioning",
                "candidates per second",
                "best validation accuracy",
            ],
            rows,
        ),
        "",
        f"In all: {count} candidates in {wall:.0f} s of the searches' wall time, {count / wall:.2f} per second.",
        "",
    ]


def _proxy_agreement(rows: list[dict[str, Any]], stored: list[dict[str, Any]]) -> list[str]:
    import numpy as np

    from bench.pipeline.metrics import spearman

    parts = []
    for name in rows[0]["proxies"]:
        g = np.array([r["proxies"][name] for r in rows], dtype=float)
        c = np.array([p["proxies"][name]["score"] for p in stored], dtype=float)
        both = np.isfinite(g) & np.isfinite(c)
        nan_same = bool(((~np.isfinite(g)) == (~np.isfinite(c))).all())
        rel = np.abs(g[both] - c[both]) / np.maximum(np.abs(c[both]), 1e-12)
        parts.append(
            f"{name} {spearman(g, c):.4f} ({float(rel.max()) if rel.size else math.nan:.0e}"
            f"{'' if nan_same else ', NaN on other cells'})"
        )
    return [
        "- proxies, Spearman between GPU and CPU (largest relative difference): " + "; ".join(parts) + ".",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.gpu_path", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    here = sub.add_parser("prepare")
    here.add_argument("folder", type=Path)
    here.add_argument("--scored", type=Path, action="append", help="an earlier run's gpu_path.json: skip its cells")
    on_gpu = sub.add_parser("run")
    on_gpu.add_argument("folder", type=Path)
    on_gpu.add_argument("out", type=Path)
    on_gpu.add_argument("--jobs", type=int, default=8, help="processes sharing the GPU (NAS-Bench-201 stage)")
    on_gpu.add_argument("--seconds", type=float, default=150.0, help="the NAS-Bench-201 stage's time")
    on_gpu.add_argument("--stage", action="append", choices=STAGES, help="only these")
    on_gpu.add_argument("--device", default="cuda", help="cpu: a dry run of this script on a machine without a GPU")
    written = sub.add_parser("report")
    written.add_argument("runs", type=Path, nargs="+", help="the runs' gpu_path.json files")
    written.add_argument("--docs", type=Path, default=ROOT / "docs" / "gpu.md")
    written.add_argument("--note", default="", help="a paragraph for the top of the page")
    written.add_argument("--tuning-cost", type=Path, help="python -m bench.perf.tuning_cost's output on the GPU")
    written.add_argument("--demo", type=Path, help="the results.json of preflight demo --device cuda on the GPU")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.folder, args.scored)
        return 0
    if args.command == "run":
        return run(args.folder, args.out, args.jobs, args.seconds, args.device, args.stage)
    print(f"wrote {report(args.runs, args.docs, args.note, args.tuning_cost, args.demo)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark v2's cached stages: one JSON per (stage, candidate) under ``<out>/<stage>/``.

A stage's key names what it computes and for which seed, e.g. ``preflight/s0``,
``train/sgd/tuned/s1``. Each result carries a fingerprint of its inputs (spec, dataset,
protocol, epochs, stage version; the engine's source for Preflight), and what it took from
Preflight's report (the tuned network, or the counted cost) compared within a relative 1e-6, so a
rerun computes only what is missing or changed, an engine change that keeps Preflight's numbers
retrains nothing, and a run killed at any point resumes where it stopped.

- ``preflight/s{k}``: ``worker.engine.condition`` with seed k on the first 64 training samples
  (the batch every peer also sees): score, verdict, scales, components, counted cost;
- ``proxies``: every zero-cost proxy on the spec's init and on the tuned init (seed 0), and one
  timed training step of the candidate, the unit of their cost;
- ``baselines``: short-training peers at counted cost (seed 0): the probe's own loop from the spec
  init at Preflight's counted cost and at a quarter of it; LSUV then that loop for 15 steps
  (``lsuv_probe``, about 4.6 times Preflight's cost); LSUV then the engine's own probe, its steps
  set so that the whole, LSUV's passes as they ran included, costs what Preflight does
  (``lsuv_probe_equal``);
- ``train/{protocol}/{init}/s{k}``: the protocol from an initialization (``spec``, ``tuned``
  and every init peer), seed k.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

import nas
from bench.pipeline.candidates import Candidate
from bench.pipeline.datasets import Dataset, load_key
from bench.pipeline.inits import initialize, lsuv_counted_
from bench.pipeline.proxies import compute_proxies, fingerprint_parts, revisions
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.protocols import PROTOCOLS, epochs_for, train

__all__ = ["BATCH", "INIT_PEERS", "Stage", "dataset", "plan", "run_task", "same_inputs", "tuned_model"]

BATCH = 64
# in the order the peers are trained: the strongest peers of v1 (LSUV, GradInit) first
INIT_PEERS = ("lsuv", "gradinit", "kaiming", "torch_default", "xavier", "orthogonal", "lsuv_centered")
PROBE_LRS = (0.1, 0.03, 0.01)  # protocol S's rates (the engine's probe rates until benchmark v2)
PROBE_MOMENTUM = 0.9
PROBE_STEPS = 15
# proxies 2: the stage times a training step of its own, the unit of the proxies' cost
# baselines 2: lsuv_probe_equal added (the other baselines' figures are unchanged)
VERSION = {"preflight": 1, "proxies": 2, "baselines": 2, "train": 1}


SMOKE_SCALE = 0.5  # the smoke run: half the epochs, and a small Fashion-MNIST subset
_small = False


def dataset(key: str) -> Dataset:
    """A candidate's data: v1's keys, or Fashion-MNIST as images or flat vectors (the smoke run
    trains on 40 images per class and tests on 20)."""
    if key.startswith("fashion_mnist"):
        from bench.pipeline.fashion_mnist import load_fashion_mnist

        sizes = {"train_per_class": 40, "test_per_class": 20} if _small else {}
        return load_fashion_mnist(image=key.endswith("_image"), **sizes)  # type: ignore[arg-type]
    return load_key(key)


@dataclass(frozen=True)
class Stage:
    kind: str  # "preflight" | "proxies" | "baselines" | "train"
    seed: int = 0
    protocol: str = ""  # train only
    init: str = ""  # train only

    @property
    def key(self) -> str:
        if self.kind == "train":
            return f"train/{self.protocol}/{self.init}/s{self.seed}"
        return f"{self.kind}/s{self.seed}"

    @classmethod
    def parse(cls, key: str) -> Stage:
        parts = key.split("/")
        seed = int(parts[-1][1:])
        if parts[0] == "train":
            return cls("train", seed, parts[1], parts[2])
        return cls(parts[0], seed)

    def needs_preflight(self) -> bool:
        return self.kind in ("proxies", "baselines") or self.init == "tuned"


def _path(out: Path, stage: Stage, candidate: Candidate) -> Path:
    return out / stage.key / f"{candidate.id}.json"


def _preflight_report(out: Path, candidate: Candidate, seed: int) -> dict[str, Any]:
    path = _path(out, Stage("preflight", seed), candidate)
    return read_json(path) if path.exists() else {"error": "no Preflight report yet"}


def _fingerprint(
    stage: Stage,
    candidate: Candidate,
    scale: float,
    engine: str | None = None,
    proxy_revisions: dict[str, int] | None = None,
) -> str:
    """What a stage was computed from, but for what it takes from Preflight's report (kept apart, in
    ``_preflight_inputs``); Preflight's stage includes the engine's source hash (``engine``: another
    engine's, default this checkout's), the proxies' stage the revised proxies' versions
    (``proxy_revisions``: those a stored result names, default this checkout's)."""
    extra = (engine or engine_version()) if stage.kind == "preflight" else ""
    protocol = PROTOCOLS[stage.protocol].to_json() if stage.protocol else None
    parts = [stage.key, VERSION[stage.kind], candidate.spec, candidate.dataset, protocol, scale, extra]
    if stage.kind == "proxies":
        parts += fingerprint_parts(proxy_revisions)
    blob = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _preflight_inputs(out: Path, stage: Stage, candidate: Candidate) -> dict[str, Any] | None:
    """What a stage takes from Preflight's report (None for a stage that takes nothing): the
    baselines its counted cost, the tuned runs and the proxies the network it tuned (its bias
    shifts as ``_sketch``), or its error. Stored beside the result and compared within a
    tolerance (``same_inputs``), so that an engine change that leaves the numbers as they were,
    but for the last digits a rerun moves on any machine, retrains nothing."""
    if not stage.needs_preflight():
        return None
    report = _preflight_report(out, candidate, stage.seed if stage.kind == "train" else 0)
    if stage.kind == "baselines":
        return {"counted_cost": report.get("counted_cost")}
    shifts = report.get("bias_shifts")
    return {
        "scales": report.get("scales"),
        "draw": report.get("draw"),
        "bias_shifts": _sketch(shifts) if shifts else shifts,
        "error": report.get("error"),
    }


_SKETCH_DIRECTIONS = 4


def _sketch(shifts: dict[str, list[float]]) -> dict[str, Any]:
    """Bias shifts in a few numbers: each layer's length, and the norm of all of them and their
    projections on fixed pseudo-random sign vectors over that norm. Two sets of shifts whose
    sketches agree within 1e-6 differ by about 1e-6 of their norm at most, unless the difference is
    orthogonal to every direction (probability near zero). The signs are an integer hash of the
    position, so no library's random stream can change them."""
    names = sorted(shifts)
    v = torch.tensor([x for name in names for x in shifts[name]], dtype=torch.float64)
    norm = float(v.norm())
    signs = torch.stack([_hashed_signs(len(v), k) for k in range(_SKETCH_DIRECTIONS)])
    return {
        "lengths": {name: len(shifts[name]) for name in names},
        "norm": norm,
        "directions": (signs @ v / (norm or 1.0)).tolist(),
    }


def _hashed_signs(length: int, direction: int) -> torch.Tensor:
    """+-1 per position: the low bit of MurmurHash3's 32-bit finalizer of (position, direction)."""
    mask = 2**32 - 1
    x = (torch.arange(length, dtype=torch.int64) + 0x9E3779B9 * (direction + 1)) & mask
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & mask
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & mask
    x ^= x >> 16
    return 2.0 * (x & 1).double() - 1.0


_TOLERANCE = 1e-6


def same_inputs(a: Any, b: Any) -> bool:
    """``a`` and ``b`` equal but for numbers within 1e-6, relative or absolute (NaN equals NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_inputs(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_inputs, a, b))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        both_nan = math.isnan(a) and math.isnan(b)
        return both_nan or math.isclose(a, b, rel_tol=_TOLERANCE, abs_tol=_TOLERANCE)
    return bool(a == b)


def _matches(stored: dict[str, Any], out: Path, stage: Stage, candidate: Candidate, scale: float, **fp: Any) -> bool:
    """A stored result is of these inputs: its fingerprint, and what it took from Preflight's report."""
    same = stored.get("fingerprint") == _fingerprint(stage, candidate, scale, **fp)
    return same and same_inputs(stored.get("preflight_inputs"), _preflight_inputs(out, stage, candidate))


def _kept_proxies(out: Path, stage: Stage, candidate: Candidate, scale: float) -> dict[str, Any]:
    """The proxies' results stored for these same inputs before a proxy was revised (empty when
    none are): ``compute_proxies`` reruns only the revised ones."""
    path = _path(out, stage, candidate)
    if not path.exists():
        return {}
    stored = read_json(path)
    same = _matches(stored, out, stage, candidate, scale, proxy_revisions=stored.get("proxy_revisions", {}))
    return stored if same else {}


def cached(out: Path, stage: Stage, candidate: Candidate, scale: float = 1.0, any_engine: bool = False) -> bool:
    """The stage's stored result matches its inputs; ``any_engine``: a Preflight stage computed by
    whichever engine it names counts too (a report of cached stages names the engines)."""
    path = _path(out, stage, candidate)
    if not path.exists():
        return False
    stored = read_json(path)
    engine = stored.get("engine_version") if any_engine and stage.kind == "preflight" else None
    return _matches(stored, out, stage, candidate, scale, engine=engine)


def _model(
    candidate: Candidate,
    seed: int,
    scales: dict[str, float] | None = None,
    draw: str = "gaussian",
    bias_shifts: dict[str, list[float]] | None = None,
) -> torch.nn.Module:
    return nas.build_model(candidate.spec, scales=scales, seed=seed, draw=draw, bias_shifts=bias_shifts)  # type: ignore[arg-type]


def tuned_model(candidate: Candidate, seed: int, report: dict[str, Any]) -> torch.nn.Module:
    """The network Preflight's report tuned: its scales on the weights of its seed and draw (a report
    cached before the draw existed was tuned on the Gaussian one), with its bias shifts (none before
    the centering)."""
    return _model(candidate, seed, report["scales"], report.get("draw", "gaussian"), report.get("bias_shifts"))


def _preflight(candidate: Candidate, stage: Stage, out: Path, scale: float) -> dict[str, Any]:
    from worker.engine import condition

    data = dataset(candidate.dataset)
    x, y = data.batch(BATCH)
    start = time.perf_counter()
    try:
        report = condition(candidate.spec, data={"x": x, "y": y}, options={"seed": stage.seed})
    except Exception as error:  # noqa: BLE001 - an engine crash is a benchmark finding
        return {"error": f"{type(error).__name__}: {error}", "score": math.nan, "verdict": None}
    body = report.model_dump(mode="json")
    tuning = body.get("tuning") or {}
    budget = tuning.get("budget") or {}
    return {
        "score": math.nan if report.score is None else float(report.score),
        "verdict": report.verdict,
        "reasons": list(report.reasons),
        "scales": dict(report.scales),
        "draw": report.environment.draw,  # the weights the scales were tuned on
        "bias_shifts": report.bias_shifts,  # added after the scales
        "components": body.get("components"),
        "probe_loss": (tuning.get("probe") or {}).get("loss"),
        "counted_cost": float(budget.get("counted_steps", 0.0)),  # every stage, the probe included
        "counted": {k: v for k, v in budget.items() if k.startswith("counted_") or k.endswith("counted_steps")},
        "timings": tuning.get("timings"),
        "seconds": time.perf_counter() - start,
    }


def _proxies(candidate: Candidate, stage: Stage, out: Path, scale: float) -> dict[str, Any]:
    from worker.engine.pipeline import time_training_step

    data = dataset(candidate.dataset)
    x, y = data.batch(BATCH)
    report = _preflight_report(out, candidate, 0)
    summary = nas.summarize(candidate.spec)
    kept = _kept_proxies(out, stage, candidate, scale)
    result: dict[str, Any] = {"parameters": summary.parameters, "macs": summary.macs}
    # the proxies' seconds are read in training steps of the candidate timed in this same process,
    # as the engine times its own unit (one forward + backward of a fresh network), not against a
    # step that another run timed under another load
    result["step_seconds"] = time_training_step(cast(nas.PreflightNet, _model(candidate, 0)), x)
    result["spec"] = compute_proxies(_model(candidate, 0), x, y, kept=kept.get("spec"))
    if report.get("scales") is not None:
        result["tuned"] = compute_proxies(tuned_model(candidate, 0, report), x, y, kept=kept.get("tuned"))
    result["proxy_revisions"] = revisions()
    if kept:  # the stage's time: what the kept proxies took when computed, plus this rerun
        result["earlier_seconds"] = float(kept.get("wall_seconds") or 0.0)
    return result


def _probe(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> dict[str, Any]:
    from worker.engine.probe import probe_cost, run_probe

    result = run_probe(model, x, y, steps=steps, lrs=PROBE_LRS, momentum=PROBE_MOMENTUM, seed=0)
    return {"loss": result.loss, "steps": steps, "cost": probe_cost(steps, len(PROBE_LRS))}


def _lsuv_cost(model: torch.nn.Module) -> float:
    """LSUV's counted cost: one forward (a third of a step) per round and layer, 10 rounds at most;
    counted at its worst case, as Preflight's budget counts its own passes."""
    layers = sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear | torch.nn.Conv2d))
    return layers * 10 / 3.0


def steps_for_cost(cost: float, rates: int = len(PROBE_LRS)) -> int:
    """Probe steps per rate whose counted cost (``probe_cost`` at ``rates`` rates) is closest to
    ``cost``, at least 1."""
    return max(1, round(cost / rates - 1.0 / 3.0))


def _baselines(candidate: Candidate, stage: Stage, out: Path, scale: float) -> dict[str, Any]:
    data = dataset(candidate.dataset)
    x, y = data.batch(BATCH)
    report = _preflight_report(out, candidate, 0)
    cost = float(report.get("counted_cost") or 0.0) or 66.0  # an engine crash: the default's cost
    result: dict[str, Any] = {"preflight_cost": cost}
    result["probe_full"] = _probe(_model(candidate, 0), x, y, steps_for_cost(cost))
    result["probe_quarter"] = _probe(_model(candidate, 0), x, y, steps_for_cost(cost / 4))
    lsuv = _model(candidate, 0)
    passes = lsuv_counted_(lsuv, x, seed=0)  # initialize("lsuv", ...)'s weights
    result["lsuv_probe"] = _probe(lsuv, x, y, PROBE_STEPS) | {}
    result["lsuv_probe"]["cost"] += _lsuv_cost(lsuv)
    result["lsuv_probe_equal"] = _lsuv_probe_equal(lsuv, x, y, passes, cost)
    return result


def _lsuv_probe_equal(
    lsuv: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, passes: int, preflight_cost: float
) -> dict[str, Any]:
    """The engine's own probe (its rates and momentum) from LSUV's init, for the steps per rate that
    bring the whole (LSUV's ``passes`` forwards, a third of a step each, plus the probe) closest to
    Preflight's counted cost, at least 1: the pipeline a practitioner would run instead of Preflight,
    at Preflight's cost. It costs more only where LSUV's passes alone leave less than one step."""
    from nas.options import ConditionOptions
    from worker.engine.probe import probe_cost, run_probe

    defaults = ConditionOptions()
    lsuv_cost = passes / 3.0
    rates = len(defaults.probe_lrs)
    steps = steps_for_cost(preflight_cost - lsuv_cost, rates)
    probe = run_probe(lsuv, x, y, steps=steps, lrs=defaults.probe_lrs, momentum=defaults.probe_momentum, seed=0)
    return {"loss": probe.loss, "steps": steps, "lsuv_passes": passes, "cost": lsuv_cost + probe_cost(steps, rates)}


def _train(candidate: Candidate, stage: Stage, out: Path, scale: float) -> dict[str, Any]:
    data = dataset(candidate.dataset)
    protocol = PROTOCOLS[stage.protocol]
    epochs = max(1, round(epochs_for(candidate.dataset, protocol) * scale))
    if stage.init == "tuned":
        report = _preflight_report(out, candidate, stage.seed)
        if report.get("scales") is None:
            return {"error": report.get("error", "no scales"), "run": None}

        def make() -> torch.nn.Module:
            return tuned_model(candidate, stage.seed, report)

        init_seconds = 0.0
    else:
        state: dict[str, torch.Tensor] | None = None
        start = time.perf_counter()
        if stage.init != "spec":
            x, y = data.batch(BATCH)
            initialized = initialize(stage.init, _model(candidate, stage.seed), x, y, seed=stage.seed)
            state = {k: v.clone() for k, v in initialized.state_dict().items()}
        init_seconds = time.perf_counter() - start

        def make() -> torch.nn.Module:
            model = _model(candidate, stage.seed)
            if state is not None:
                model.load_state_dict(state)
            return model

    run = train(make, data, protocol, epochs, seed=stage.seed)
    return {"run": run.to_json(), "epochs": epochs, "init_seconds": init_seconds, "chance": data.chance_loss}


_STAGES: dict[str, Callable[[Candidate, Stage, Path, float], dict[str, Any]]] = {
    "preflight": _preflight,
    "proxies": _proxies,
    "baselines": _baselines,
    "train": _train,
}


def run_task(args: tuple[str, dict[str, Any], str, float]) -> str:
    """One (stage, candidate) in a worker process; skips it when cached by then."""
    global _small
    key, cand, out_dir, scale = args
    torch.set_num_threads(1)
    _small = scale < 1.0
    stage, candidate, out = Stage.parse(key), Candidate(**cand), Path(out_dir)
    if cached(out, stage, candidate, scale):
        return f"{key} {candidate.id} (cached)"
    start = time.perf_counter()
    result = _STAGES[stage.kind](candidate, stage, out, scale)
    result["fingerprint"] = _fingerprint(stage, candidate, scale)
    if (inputs := _preflight_inputs(out, stage, candidate)) is not None:
        result["preflight_inputs"] = inputs
    result["wall_seconds"] = time.perf_counter() - start + float(result.pop("earlier_seconds", 0.0))
    if stage.kind == "preflight":
        result["engine_version"] = engine_version()
    write_json(_path(out, stage, candidate), result)
    return f"{key} {candidate.id} {result['wall_seconds']:.1f} s"


def plan(seeds: int, peers: tuple[str, ...] = INIT_PEERS) -> list[list[Stage]]:
    """The stages in waves, most informative first; a wave may need the one before it
    (the tuned runs and the proxies need Preflight's scales). Seed 0 of everything comes first, so
    a partial run already answers every question with one seed; then the further seeds of the
    ground truths A and B, then those of the init peers."""
    ground_truths = [(p, i) for p in ("sgd", "adamw") for i in ("spec", "tuned")]
    waves: list[list[Stage]] = [[Stage("preflight", 0)]]
    waves.append([Stage("proxies"), Stage("baselines")] + [Stage("train", 0, p, i) for p, i in ground_truths])
    waves.append([Stage("train", 0, "sgd", peer) for peer in peers])
    waves.append([Stage("train", 0, "adamw", peer) for peer in peers])
    further = range(1, seeds)
    if further:
        waves.append([Stage("preflight", seed) for seed in further])
        waves.append([Stage("train", seed, p, i) for seed in further for p, i in ground_truths])
        waves.append([Stage("train", seed, p, peer) for seed in further for p in ("sgd", "adamw") for peer in peers])
    return waves

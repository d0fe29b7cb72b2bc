"""Run the candidate benchmark stage by stage, caching each result as JSON.

Stages per candidate, each cached in ``<out>/<stage>/<id>.json`` with a fingerprint of its
inputs (spec, protocol, stage version), so ``python -m bench --report-only`` regenerates the
report without retraining, and a changed engine only reruns the stages that use it:

- ``proxies``: every zero-cost proxy and the training-step time (``bench.pipeline.proxies``);
- ``preflight``: ``worker.engine.condition`` on a real training batch: score, verdict, components,
  scales, seconds;
- ``spec``: the protocol from the spec's initialization (ground truth A);
- ``tuned``: the protocol from Preflight's tuned initialization
  (``nas.build_model(spec, scales=report.scales)``, ground truth B);
- ``peers``: the protocol from each initialization peer (``bench.pipeline.inits``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

import nas
from bench.pipeline.candidates import Candidate
from bench.pipeline.datasets import load_key
from bench.pipeline.inits import PEERS, initialize
from bench.pipeline.protocol import Protocol, step_seconds, train
from bench.pipeline.proxies import compute_proxies
from service.revision import engine_source_hash

__all__ = ["STAGES", "cached", "condition_candidate", "finish_extra", "imap_spawned", "kept_note", "run_stage"]

STAGE_VERSION = {"proxies": 1, "preflight": 1, "spec": 1, "tuned": 1, "peers": 2}
MODEL_SEED = 0
BATCH = 64  # proxies, Preflight and the init peers see the same first 64 training samples


def _fingerprint(stage: str, candidate: Candidate, protocol: Protocol, extra: str = "") -> str:
    blob = json.dumps(
        [stage, STAGE_VERSION[stage], candidate.spec, candidate.dataset, protocol.to_json(), extra],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _clean(value: Any) -> Any:
    """JSON has no inf / nan: store them as strings, read back by ``_restore``."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _restore(value: Any) -> Any:
    if value in ("inf", "-inf", "nan"):
        return float(value)
    if isinstance(value, dict):
        return {k: _restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v) for v in value]
    return value


def read_json(path: Path) -> Any:
    return _restore(json.loads(path.read_text()))


def kept_note(path: Path, given: str | None) -> str:
    """The paragraph a report opens with (what the run covers, which machine and engine computed
    what): ``given``, then kept in ``path`` beside the cache for the next run; else the one kept
    there, so that a rerun without ``--note`` (``make bench``) does not drop it; else none."""
    if given is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(given.strip() + "\n")
        return given.strip()
    return path.read_text().strip() if path.exists() else ""


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_clean(data), indent=1, sort_keys=True))
    tmp.replace(path)


def _model(
    candidate: Candidate,
    scales: dict[str, float] | None = None,
    draw: str = "gaussian",
    bias_shifts: dict[str, list[float]] | None = None,
) -> torch.nn.Module:
    return nas.build_model(candidate.spec, scales=scales, seed=MODEL_SEED, draw=draw, bias_shifts=bias_shifts)  # type: ignore[arg-type]


def _proxies(candidate: Candidate, protocol: Protocol, out: Path) -> dict[str, Any]:
    data = load_key(candidate.dataset)
    x, y = data.batch(BATCH)
    summary = nas.summarize(candidate.spec)
    return {
        "proxies": compute_proxies(_model(candidate), x, y),
        "step_seconds": step_seconds(_model(candidate), data, protocol.batch_size),
        "parameters": summary.parameters,
        "macs": summary.macs,
    }


def condition_candidate(candidate: Candidate) -> dict[str, Any]:
    """Preflight's report on the candidate, with a real training batch as the data."""
    from worker.engine import condition

    data = load_key(candidate.dataset)
    x, y = data.batch(BATCH)
    start = time.perf_counter()
    report = condition(candidate.spec, data={"x": x, "y": y})
    seconds = time.perf_counter() - start
    body = report.model_dump(mode="json")
    return {
        "score": math.nan if report.score is None else float(report.score),
        "verdict": report.verdict,
        "reasons": list(report.reasons),
        "scales": dict(report.scales),
        "draw": report.environment.draw,  # the weights the scales were tuned on
        "bias_shifts": report.bias_shifts,  # added after the scales
        "components": body.get("components"),
        "thresholds": body.get("thresholds"),
        "tuning": {k: v for k, v in (body.get("tuning") or {}).items() if k != "loss_curve"},
        "seconds": seconds,
    }


def _preflight(candidate: Candidate, protocol: Protocol, out: Path) -> dict[str, Any]:
    try:
        return condition_candidate(candidate)
    except Exception as error:  # noqa: BLE001 - an engine crash is a benchmark finding
        return {"error": f"{type(error).__name__}: {error}", "score": math.nan, "verdict": None}


def _spec(candidate: Candidate, protocol: Protocol, out: Path) -> dict[str, Any]:
    """Ground truth A: the protocol from the spec's own initialization."""
    return {"spec": asdict(train(lambda: _model(candidate), data=load_key(candidate.dataset), protocol=protocol))}


def _peers(candidate: Candidate, protocol: Protocol, out: Path) -> dict[str, Any]:
    """The protocol from each initialization peer (``bench.pipeline.inits``), on the same batch."""
    data = load_key(candidate.dataset)
    x, y = data.batch(BATCH)
    results = {}
    for name in PEERS:
        start = time.perf_counter()
        initialized = initialize(name, _model(candidate), x, y, seed=MODEL_SEED)
        init_seconds = time.perf_counter() - start
        state = {k: v.clone() for k, v in initialized.state_dict().items()}

        def make(state: dict[str, torch.Tensor] = state) -> torch.nn.Module:
            model = _model(candidate)
            model.load_state_dict(state)
            return model

        results[name] = asdict(train(make, data, protocol)) | {"init_seconds": init_seconds}
    return results


def _tuned(candidate: Candidate, protocol: Protocol, out: Path) -> dict[str, Any]:
    path = out / "preflight" / f"{candidate.id}.json"
    report: dict[str, Any] = read_json(path) if path.exists() else {"error": "no Preflight report yet"}
    if report.get("error") or report.get("scales") is None:
        return {"error": report.get("error", "no scales"), "tuned": None}
    data = load_key(candidate.dataset)
    scales, draw, shifts = report["scales"], report.get("draw", "gaussian"), report.get("bias_shifts")
    return {"tuned": asdict(train(lambda: _model(candidate, scales, draw, shifts), data, protocol))}


STAGES: dict[str, Callable[[Candidate, Protocol, Path], dict[str, Any]]] = {
    "proxies": _proxies,
    "preflight": _preflight,
    "spec": _spec,
    "tuned": _tuned,
    "peers": _peers,  # last: the most expensive, and only the tuning comparison needs it
}


def engine_version() -> str:
    """The engine's source hash (``service.revision.engine_source_hash``: ``worker/engine/*.py``,
    ``nas/options.py``, ``nas/build.py``): a changed engine reruns its stages. The score's weights
    are left out on purpose: they change no measurement, and the reports recompute the shipped
    score from the cached components, so a refit (``python -m bench.v2.calibrate``) needs no rerun."""
    return engine_source_hash()


def engines_named(what: Mapping[str, str], separator: str = ", ") -> tuple[str, bool]:
    """The engines (``engine_version`` hashes) that computed a report's cached results, each as
    ```hash` (this checkout's) <what it computed>``, and whether any is not this checkout's (its
    results are stale for a run, which recomputes them)."""
    now = engine_version()
    mine = " (this checkout's)"
    named = separator.join(f"`{e}`{mine if e == now else ''} {w}" for e, w in what.items())
    return named, set(what) != {now}


def _extra(stage: str, candidate: Candidate, out: Path) -> str:
    """Preflight depends on the engine's code; the tuned stage on the scales it returned."""
    if stage == "preflight":
        return engine_version()
    if stage != "tuned":
        return ""
    path = out / "preflight" / f"{candidate.id}.json"
    data = read_json(path) if path.exists() else {}
    shifts = json.dumps(data["bias_shifts"], sort_keys=True) if data.get("bias_shifts") else ""  # older: none
    return json.dumps(data.get("scales"), sort_keys=True) + str(data.get("error")) + str(data.get("draw", "")) + shifts


def _task(args: tuple[str, dict[str, Any], dict[str, Any], str]) -> str:
    stage, cand, proto, out_dir = args
    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in proto.items()}
    protocol = Protocol(**fields)
    out = Path(out_dir)
    if cached(stage, candidate, protocol, out):  # another process got there first
        return candidate.id
    start = time.perf_counter()
    result = STAGES[stage](candidate, protocol, out)
    result["fingerprint"] = _fingerprint(stage, candidate, protocol, _extra(stage, candidate, out))
    if stage == "preflight":
        result["engine_version"] = engine_version()
    result["wall_seconds"] = time.perf_counter() - start
    write_json(out / stage / f"{candidate.id}.json", result)
    return candidate.id


def cached(stage: str, candidate: Candidate, protocol: Protocol, out: Path) -> bool:
    path = out / stage / f"{candidate.id}.json"
    if not path.exists():
        return False
    expected = _fingerprint(stage, candidate, protocol, _extra(stage, candidate, out))
    return read_json(path).get("fingerprint") == expected


def run_stage(
    stage: str,
    candidates: Iterable[Candidate],
    protocol: Protocol,
    out: Path,
    jobs: int = 1,
    log: Callable[[str], None] = lambda _m: None,
) -> float:
    """Compute ``stage`` for every candidate not cached; returns the wall seconds spent."""
    todo = [c for c in candidates if not cached(stage, c, protocol, out)]
    start = time.perf_counter()
    tasks = [(stage, c.to_json(), protocol.to_json(), str(out)) for c in todo]
    if jobs <= 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            log(f"{stage} {i + 1}/{len(tasks)} {_task(task)}")
    else:
        for i, cid in enumerate(imap_spawned(_task, tasks, jobs, nice=5)):
            log(f"{stage} {i + 1}/{len(tasks)} {cid}")
    return time.perf_counter() - start


def imap_spawned(task: Callable[[Any], Any], tasks: list[Any], jobs: int = 2, nice: int = 0) -> Iterable[Any]:
    """``task`` over ``tasks`` in ``jobs`` spawned processes, results in completion order; ``nice``
    lowers the workers' priority (5: a long benchmark yields to the machine's other work)."""
    with get_context("spawn").Pool(jobs, initializer=os.nice, initargs=(nice,)) as pool:
        yield from pool.imap_unordered(task, tasks)


def extra_key() -> str:
    """What an extra that reads the cache depends on: the engine's source and the shipped
    score weights (they choose the survivors and the verdicts)."""
    import worker

    weights = Path(worker.__file__).parent / "engine" / "score_weights.json"
    return f"{engine_version()}:{hashlib.sha256(weights.read_bytes()).hexdigest()[:16]}"


def cached_extra(out: Path, name: str) -> bool:
    """Whether ``<out>/<name>.json`` was written by this engine with these weights."""
    path = out / f"{name}.json"
    return path.exists() and read_json(path).get("key") == extra_key()


def finish_extra(out: Path, name: str, result: dict[str, Any]) -> int:
    """An extra benchmark's end: its result to ``<out>/<name>.json`` (with ``extra_key``), its
    summary printed."""
    write_json(out / f"{name}.json", result | {"key": extra_key()})
    print(json.dumps(result["summary"], indent=1))
    return 0

"""A report of cached stages reads Preflight's stage whatever engine computed it, and names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.pipeline.run import write_json
from bench.v2.analysis import load_rows
from bench.v2.candidates import dev_set
from bench.v2.report import _engines
from bench.v2.stages import Stage, _fingerprint, _preflight_inputs, cached


def test_an_older_engines_preflight_stage_is_read_by_the_report_only_and_named(tmp_path: Path) -> None:
    candidate, stage = dev_set()[0], Stage("preflight", 0)
    stored = {
        "fingerprint": _fingerprint(stage, candidate, 1.0, engine="older"),
        "engine_version": "older",
        "score": 0.5,
        "scales": {},
    }
    write_json(tmp_path / stage.key / f"{candidate.id}.json", stored)
    assert not cached(tmp_path, stage, candidate)  # a run recomputes it
    assert cached(tmp_path, stage, candidate, any_engine=True)
    assert load_rows([candidate], "dev", tmp_path, 1, 1.0)[0].preflight is None  # the calibration's read
    rows = load_rows([candidate], "dev", tmp_path, 1, 1.0, any_engine=True)
    assert rows[0].preflight is not None and rows[0].preflight["score"] == 0.5
    named = _engines(rows)
    assert "`older` on 1" in named and "recomputes" in named
    # a stage whose fingerprint matches no engine it names is stale either way
    write_json(tmp_path / stage.key / f"{candidate.id}.json", stored | {"engine_version": "another"})
    assert not cached(tmp_path, stage, candidate, any_engine=True)


def test_a_revised_proxy_reruns_alone_on_a_proxies_stage_stored_before_the_revision(tmp_path: Path) -> None:
    from dataclasses import asdict

    from bench.pipeline.proxies import PROXIES, revisions
    from bench.pipeline.run import read_json
    from bench.v2.stages import run_task

    candidate = next(c for c in dev_set() if c.dataset == "digits")
    stage = Stage("proxies")
    old = {name: {"score": -123.0, "seconds": 7.0} for name in PROXIES}  # as stored before versions
    path = tmp_path / stage.key / f"{candidate.id}.json"
    fingerprint = _fingerprint(stage, candidate, 1.0, proxy_revisions={})
    inputs = _preflight_inputs(tmp_path, stage, candidate)
    write_json(path, {"spec": old, "fingerprint": fingerprint, "preflight_inputs": inputs})
    assert revisions() and not cached(tmp_path, stage, candidate)  # the revision makes it stale
    run_task((stage.key, asdict(candidate), str(tmp_path), 1.0))
    assert cached(tmp_path, stage, candidate)
    spec = read_json(path)["spec"]
    assert {name for name, r in spec.items() if r["score"] != -123.0} == set(revisions())
    assert read_json(path)["step_seconds"] > 0  # the unit of the proxies' cost, timed in the same run
    # a stored stage whose other inputs differ (here: another candidate's) is computed afresh
    other = next(c for c in dev_set() if c.dataset == "digits" and c.id != candidate.id)
    write_json(tmp_path / stage.key / f"{other.id}.json", read_json(path) | {"fingerprint": "another"})
    run_task((stage.key, asdict(other), str(tmp_path), 1.0))
    assert all(r["score"] != -123.0 for r in read_json(tmp_path / stage.key / f"{other.id}.json")["spec"].values())


def _report(scales: dict[str, float], shifts: dict[str, list[float]], cost: float) -> dict[str, object]:
    return {"scales": scales, "draw": "orthogonal", "bias_shifts": shifts, "counted_cost": cost}


def test_a_tuned_run_survives_an_engine_rerun_that_moves_the_last_digits_and_no_more(tmp_path: Path) -> None:
    candidate = dev_set()[0]
    tuned, baselines = Stage("train", 0, "sgd", "tuned"), Stage("baselines")
    scales, shifts = {"a": 1.082613264, "b": 0.5}, {"a.bias": [0.25, -1.5, 0.0], "b.bias": [3.0]}
    pre = tmp_path / "preflight/s0" / f"{candidate.id}.json"
    write_json(pre, _report(scales, shifts, 17.0))
    for stage in (tuned, baselines):
        stored: dict[str, Any] = {"fingerprint": _fingerprint(stage, candidate, 1.0)}
        stored["preflight_inputs"] = _preflight_inputs(tmp_path, stage, candidate)
        write_json(tmp_path / stage.key / f"{candidate.id}.json", stored)
        assert cached(tmp_path, stage, candidate)

    def moved(by: float) -> dict[str, object]:
        wiggled = {k: [x * (1 + by) for x in v] for k, v in shifts.items()}
        return _report({k: v * (1 + by) for k, v in scales.items()}, wiggled, 17.0 * (1 + by))

    write_json(pre, moved(1e-9))  # a rerun of the same engine on another machine
    assert cached(tmp_path, tuned, candidate) and cached(tmp_path, baselines, candidate)
    write_json(pre, moved(1e-4))  # another tuning
    assert not cached(tmp_path, tuned, candidate) and not cached(tmp_path, baselines, candidate)
    write_json(pre, _report(scales | {"a": 1.1}, shifts, 17.0))  # one scale: the run, not the baselines
    assert not cached(tmp_path, tuned, candidate) and cached(tmp_path, baselines, candidate)
    swapped = {"a.bias": [-1.5, 0.25, 0.0], "b.bias": [3.0]}  # same norm, another network
    write_json(pre, _report(scales, swapped, 17.0))
    assert not cached(tmp_path, tuned, candidate)
    write_json(pre, _report(scales, shifts, 17.0) | {"draw": "gaussian"})
    assert not cached(tmp_path, tuned, candidate)
    write_json(pre, _report(scales, shifts, 17.0))
    assert cached(tmp_path, tuned, candidate)


def test_a_proxys_cost_is_its_seconds_over_the_step_timed_beside_it_not_preflights() -> None:
    from bench.v2.analysis import Row, predictors

    row = Row(dev_set()[0], "dev")
    row.preflight = {"score": 0.1, "counted_cost": 17.0, "timings": {"step": 0.01}}  # another run, another load
    row.proxies = {"step_seconds": 0.5, "spec": {"snip": {"score": 3.0, "seconds": 2.0}}}
    assert predictors(row, "A")["proxy:snip"] == (3.0, 4.0)

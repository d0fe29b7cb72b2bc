"""A report of cached stages reads Preflight's stage whatever engine computed it, and names it."""

from __future__ import annotations

from pathlib import Path

from bench.pipeline.run import write_json
from bench.v2.analysis import load_rows
from bench.v2.candidates import dev_set
from bench.v2.report import _engines
from bench.v2.stages import Stage, _fingerprint, cached


def test_an_older_engines_preflight_stage_is_read_by_the_report_only_and_named(tmp_path: Path) -> None:
    candidate, stage = dev_set()[0], Stage("preflight", 0)
    stored = {
        "fingerprint": _fingerprint(stage, candidate, tmp_path, 1.0, engine="older"),
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
    write_json(path, {"spec": old, "fingerprint": _fingerprint(stage, candidate, tmp_path, 1.0, proxy_revisions={})})
    assert revisions() and not cached(tmp_path, stage, candidate)  # the revision makes it stale
    run_task((stage.key, asdict(candidate), str(tmp_path), 1.0))
    assert cached(tmp_path, stage, candidate)
    spec = read_json(path)["spec"]
    assert {name for name, r in spec.items() if r["score"] != -123.0} == set(revisions())
    # a stored stage whose other inputs differ (here: another candidate's) is computed afresh
    other = next(c for c in dev_set() if c.dataset == "digits" and c.id != candidate.id)
    write_json(tmp_path / stage.key / f"{other.id}.json", read_json(path) | {"fingerprint": "another"})
    run_task((stage.key, asdict(other), str(tmp_path), 1.0))
    assert all(r["score"] != -123.0 for r in read_json(tmp_path / stage.key / f"{other.id}.json")["spec"].values())

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

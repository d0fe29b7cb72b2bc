"""``python -m bench.v2.recheck``: a recomputed Preflight stage sorted into bit-equal, within the
cache's tolerance, or beyond it, against what is stored."""

from __future__ import annotations

import copy
from pathlib import Path

from bench.pipeline.run import read_json, write_json
from bench.v2 import candidates
from bench.v2.recheck import _recheck, compare, summary
from bench.v2.stages import run_task


def _stored(tmp_path: Path) -> tuple[dict, Path]:
    candidate = next(c for c in candidates.test_set() if c.id == "test-plain_mlp-000")  # digits: a fraction of a second
    run_task(("preflight/s0", candidate.to_json(), str(tmp_path), 1.0))
    return candidate.to_json(), tmp_path / "preflight" / "s0" / f"{candidate.id}.json"


def test_a_stage_recomputed_on_the_machine_that_stored_it_is_bit_equal(tmp_path: Path) -> None:
    cand, path = _stored(tmp_path)
    result = _recheck((cand, 0, str(tmp_path)))
    assert result["differs"] == [] and result["within"] and not result["flipped"]
    assert (
        "1 stages" in summary([result])[-1] and "1 bit-equal, 1 within tolerance, 0 beyond it" in summary([result])[-1]
    )


def test_the_last_digits_are_within_tolerance_and_a_real_change_is_not(tmp_path: Path) -> None:
    cand, path = _stored(tmp_path)
    stored = read_json(path)
    name = next(iter(stored["scales"]))
    for factor, within in ((1 + 1e-9, True), (1 + 1e-3, False)):
        moved = copy.deepcopy(stored)
        moved["scales"][name] *= factor
        write_json(path, moved)
        result = _recheck((cand, 0, str(tmp_path)))
        assert result["differs"] == ["scales"] and result["within"] is within
    assert "BEYOND tolerance" in summary([result])[0]


def test_a_flipped_verdict_is_named() -> None:
    stored = {"scales": {"w": 1.0}, "counted_cost": 17.0, "verdict": "keep"}
    result = compare(stored, stored | {"verdict": "prune"})
    assert result == {"differs": ["verdict"], "within": True, "flipped": True}
    assert compare(stored, stored | {"counted_cost": 20.0})["within"] is False  # a baseline would be resized

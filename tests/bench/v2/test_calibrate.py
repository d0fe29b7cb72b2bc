"""The shipped score weights are what the calibration fits on the committed development-set cache
(``python -m bench.v2.calibrate --check``): an engine change that moves the scores, or a hand edit
of the weights, fails here until the development set's Preflight stage is recomputed and refitted."""

from __future__ import annotations

from bench.v2 import calibrate


def test_the_shipped_weights_equal_a_fresh_fit_on_the_development_set() -> None:
    rows = calibrate.dev_rows()
    assert len(rows) >= 200, "recompute the development set's Preflight stage (make bench) for this engine"
    assert calibrate.check(rows)
    assert all(r["group"] for r in rows)  # fitted per dataset group, on the development set only

"""A target line is met only when its whole interval is on the target's side."""

from __future__ import annotations

import math

from bench.fashion_search.report import _verdict
from bench.v2.stats import Interval


def test_a_target_is_met_only_when_the_whole_interval_is_on_its_side():
    assert _verdict(Interval(0.3, 0.2, 0.45, 5), upper=0.5) == "**met**"
    assert _verdict(Interval(0.3, 0.05, 1.7, 5), upper=0.5).startswith("**missed** (the point estimate meets it")
    assert _verdict(Interval(0.7, 0.6, 0.8, 5), upper=0.5) == "**missed**"
    assert _verdict(Interval(0.01, 0.0, 0.02, 5), lower=0.0) == "**met**"
    assert _verdict(Interval(0.01, math.nan, math.nan, 1), lower=0.0).startswith("**missed** (the point")
    assert _verdict(Interval(math.nan, math.nan, math.nan, 0), lower=0.0) == "**missed** (undefined)"


def _timed(params: dict, seconds: float) -> dict:
    return {"params": params, "train_seconds": seconds, "train_steps": 94, "epochs": 1, "condition_steps": 0.0}


def test_the_report_says_when_the_searches_trainings_ran_at_different_speeds(residual_params):
    params = residual_params | {"lr": 0.01}
    from bench.fashion_search.report import _timing

    same = _timing({0: {"searches": {"no gate": [_timed(params, 10.0)], "preflight gate": [_timed(params, 11.0)]}}}, [])
    assert "the seconds compare" in same[0]
    apart = _timing(
        {0: {"searches": {"no gate": [_timed(params, 10.0)], "preflight gate": [_timed(params, 21.0)]}}}, []
    )
    assert "2.1 times apart: read the multiply-accumulate figures" in apart[0]

"""The probe's lower rate, measured from cached tuned networks: the rule recomputed as the engine
applies it, and the figures docs/conditioning.md quotes, from the committed caches."""

from __future__ import annotations

import pytest

from bench.ablations.probe_lower_rate import _lower_probe_ran, _verdicts, benchmark_v2, search


def _probes(loss: float, best_lr: float | None, lower: float) -> dict:
    return {"rates": {"loss": loss, "best_lr": best_lr}, "lower": {"loss": lower, "best_lr": 0.01}}


def test_the_lower_rate_can_lift_only_a_prune_whose_probe_did_best_at_its_lowest_rate() -> None:
    components = {"probe_loss": 1.0}
    assert _verdicts(components, _probes(1.5, 0.03, 0.3)) == (True, False)  # pruned, then kept
    assert _verdicts(components, _probes(1.5, None, 0.3)) == (True, False)  # diverged at every rate
    assert _verdicts(components, _probes(1.5, 0.1, 0.3)) == (True, True)  # best at 0.1: not re-probed
    assert _verdicts(components, _probes(1.5, 0.03, 1.6)) == (True, True)  # the lower rate did no better
    assert _verdicts(components, _probes(0.3, 0.03, 0.1)) == (False, False)  # a keep stays a keep


def test_a_proposal_the_lower_rate_kept_is_found_by_its_counted_lower_probe(tmp_path) -> None:
    """Under an engine with the rule a kept proposal may have been a first-probe prune: its
    conditioning counted the lower probe, which only a prune runs."""
    import json

    def report(budget: dict) -> str:
        return json.dumps({"report": {"tuning": {"budget": budget}}})

    (tmp_path / "reprobed.json").write_text(report({"counted_probe": 10.7, "counted_probe_lower": 5.3}))
    (tmp_path / "kept.json").write_text(report({"counted_probe": 10.7}))
    (tmp_path / "older.json").write_text(report({}))
    assert _lower_probe_ran(tmp_path / "reprobed.json")
    assert not _lower_probe_ran(tmp_path / "kept.json")
    assert not _lower_probe_ran(tmp_path / "older.json")
    assert not _lower_probe_ran(tmp_path / "never-conditioned.json")


@pytest.mark.slow
def test_the_quoted_figures_are_what_the_committed_caches_give() -> None:
    dev = "\n".join(benchmark_v2("dev", jobs=1))
    assert "without the rule: 23 flagged, precision 0.87, recall 0.56, 1 within 5 points of the best" in dev
    assert "with it: 22 flagged, precision 0.91, recall 0.56, 0 within 5 points of the best" in dev
    found = "\n".join(search())  # the search as rerun under the shipped engine, which has the rule
    assert "before: 21 flagged, precision 0.24, recall 0.17, 6 within 5 points" in found
    assert "after: 10 flagged, precision 0.50, recall 0.17, 1 within 5 points" in found
    assert "before: 37 flagged, precision 0.30, recall 0.12, 13 within 5 points" in found
    assert "after: 16 flagged, precision 0.50, recall 0.09, 2 within 5 points" in found

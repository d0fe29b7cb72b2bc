"""The report's recommended learning rate: derived from the probe, kept through JSON, and
derived again for a report stored before the field existed."""

from __future__ import annotations

import json

import pytest

from nas.report import RECOMMENDED_LR_FACTOR, ConditioningReport, ProbeReport
from nas.testing import sample_report, well_conditioned_mlp


def _with_probe(best_lr: float | None) -> dict:
    body = json.loads(sample_report().model_dump_json())
    probe = ProbeReport(loss=0.4, best_lr=best_lr, reference=2.3, targets="given", curves={})
    body["tuning"]["probe"] = probe.model_dump(mode="json")
    body.pop("recommended_lr")
    return body


def test_the_recommended_rate_is_one_probe_step_below_the_probes_best_rate() -> None:
    report = ConditioningReport.model_validate(_with_probe(0.1))
    assert report.recommended_lr == pytest.approx(0.1 * RECOMMENDED_LR_FACTOR) == pytest.approx(0.03)


def test_no_rate_is_recommended_when_every_probe_rate_diverged() -> None:
    assert ConditioningReport.model_validate(_with_probe(None)).recommended_lr is None


def test_no_rate_is_recommended_without_a_probe() -> None:
    assert sample_report().tuning.probe is None
    assert ConditioningReport.model_validate(json.loads(sample_report().model_dump_json())).recommended_lr is None


def test_a_stored_report_without_the_field_gets_it_and_json_keeps_it() -> None:
    stored = _with_probe(0.03)  # as a report stored before recommended_lr existed
    assert "recommended_lr" not in stored
    report = ConditioningReport.model_validate(stored)
    again = json.loads(report.model_dump_json())
    assert again["recommended_lr"] == pytest.approx(0.009)
    assert ConditioningReport.model_validate(again) == report
    explicit = ConditioningReport.model_validate({**stored, "recommended_lr": 0.05})
    assert explicit.recommended_lr == 0.05  # a rate the report carries is not overwritten


def test_the_engine_recommends_a_rate_below_the_one_its_probe_found_best() -> None:
    import torch

    from worker.engine import condition

    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(1))
    report = condition(well_conditioned_mlp(), data={"x": x, "y": y}, options={"seed": 0})
    probe = report.tuning.probe
    assert probe is not None and probe.best_lr in report.options.probe_lrs
    assert report.recommended_lr == pytest.approx(probe.best_lr * RECOMMENDED_LR_FACTOR)


def test_a_report_builds_its_own_spec_and_refuses_another() -> None:
    import torch

    from nas import parse_spec, spec_hash
    from worker.engine import condition

    spec = well_conditioned_mlp()
    report = condition(spec, options={"seed": 0, "probe_steps": 0})
    assert report.spec_hash == spec_hash(parse_spec(spec))
    with pytest.raises(TypeError, match=r"pass nas.parse_spec\(spec\)"):  # it raised AttributeError: .blocks
        spec_hash(spec)  # type: ignore[arg-type]
    model = report.build_model(spec)
    assert model(torch.randn(2, 64)).shape == (2, 10)
    other = json.loads(json.dumps(spec).replace('"relu"', '"tanh"'))  # the same shapes: its scales would fit
    with pytest.raises(ValueError, match="build from the spec that was conditioned"):
        report.build_model(other)

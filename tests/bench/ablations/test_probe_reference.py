"""The probe-reference ablation: the class prior's level per dataset, and the figures
docs/conditioning.md quotes, recomputed from the committed development-set caches."""

from __future__ import annotations

import pytest

from bench.ablations.probe_reference import prior_levels, report


def test_the_class_prior_sits_just_under_the_uniform_loss_on_each_benchmark_batch() -> None:
    levels = prior_levels()
    assert levels["fashion_mnist"] == pytest.approx(0.9699, abs=1e-4)
    assert levels["digits"] == pytest.approx(0.9850, abs=1e-4)
    assert 0.85 < levels["breast_cancer"] < 0.9


def test_the_quoted_figures_are_what_the_committed_caches_give() -> None:
    text = report()
    assert "ln C (shipped): best precision 0.87 at recall 0.5, 0.68 at recall 0.7, 0.60 at recall 0.8" in text
    assert "held-out half: 12 flagged at 0.83 / 0.56" in text
    assert "label entropy: best precision 0.79 at recall 0.5, 0.59 at recall 0.7, 0.54 at recall 0.8" in text
    assert "held-out half: 11 flagged at 0.73 / 0.44" in text
    assert "the cut or the prior rule, whole set: 28 flagged at 0.79 / 0.61" in text
    assert "the cut, whole set: 23 flagged at 0.87 / 0.56" in text

"""The probe-length sweep reads every shorter probe off one long run, as the engine would end it."""

from __future__ import annotations

import pytest

from bench.ablations.probe_length import probe_at
from worker.engine.probe import CAP


def test_a_shorter_probe_ends_on_the_loss_before_that_step_at_its_best_rate():
    curves = {"0.1": [2.0, 1.5, 1.0, 0.5], "0.03": [2.0, 1.8, 1.6, 1.4]}
    assert probe_at(curves, reference=2.0, steps=1, rates=(0.1, 0.03)) == pytest.approx(0.75)
    assert probe_at(curves, reference=2.0, steps=3, rates=(0.1, 0.03)) == pytest.approx(0.25)
    assert probe_at(curves, reference=2.0, steps=3, rates=(0.03,)) == pytest.approx(0.7)


def test_a_rate_that_diverged_before_the_length_counts_as_diverged_and_all_diverged_is_the_cap():
    # the engine stores a divergence as a null and stops the curve there
    curves = {"0.1": [2.0, 1.0, None], "0.03": [2.0, 1.9, 1.8, 1.7]}
    assert probe_at(curves, reference=2.0, steps=1, rates=(0.1, 0.03)) == pytest.approx(0.5)
    assert probe_at(curves, reference=2.0, steps=3, rates=(0.1, 0.03)) == pytest.approx(0.85)
    assert probe_at(curves, reference=2.0, steps=3, rates=(0.1,)) == CAP

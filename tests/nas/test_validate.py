"""What the probe can train without labels: a vector of class scores or a single output, and
nothing else (the probe draws its targets over the logits)."""

from __future__ import annotations

from typing import Any

import pytest

from nas.examples import EXAMPLES
from nas.validate import parse_and_trace, unlabelled_probe_issue


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_ends_in_a_vector_the_probe_can_train_without_labels(name: str) -> None:
    _, trace = parse_and_trace(EXAMPLES[name])
    assert unlabelled_probe_issue(trace) is None


def _conv(*tail: dict[str, Any]) -> dict[str, Any]:
    return {"input_shape": [1, 4, 4], "blocks": [{"layers": [{"type": "conv2d", "out": 2, "kernel": 3}, *tail]}]}


def test_a_single_output_is_trained_on_gaussian_targets_and_passes() -> None:
    _, trace = parse_and_trace(_conv({"type": "flatten"}, {"type": "linear", "out": 1}))
    assert unlabelled_probe_issue(trace) is None
    one_pixel = {"input_shape": [1, 1, 1], "blocks": [{"layers": [{"type": "conv2d", "out": 1, "kernel": 1}]}]}
    _, trace = parse_and_trace(one_pixel)  # [1, 1, 1]: the probe's Gaussian target is reshaped to it
    assert unlabelled_probe_issue(trace) is None


def test_a_feature_map_output_is_named_with_the_ways_out() -> None:
    _, trace = parse_and_trace(_conv({"type": "relu"}))
    issue = unlabelled_probe_issue(trace)
    assert issue is not None and "output has shape [2, 4, 4], not a vector" in issue
    assert "global_avgpool" in issue and "option probe_steps to 0" in issue and "float targets" in issue

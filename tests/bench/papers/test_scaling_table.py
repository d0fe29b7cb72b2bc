"""The LIBSVM-style table: the paper's normalization and counts, and the network it trains."""

from __future__ import annotations

import pytest
import torch

import nas
from bench.papers import scaling_table
from bench.pipeline.datasets import load


def test_summary_normalizes_by_each_datasets_worst_method_and_counts_best_and_worst():
    per_dataset = {
        "d1": {"a": {"loss": 1.0, "lr": 1}, "b": {"loss": 0.5, "lr": 1}},
        "d2": {"a": {"loss": 0.2, "lr": 1}, "b": {"loss": 0.4, "lr": 1}},
    }
    got = scaling_table.summarize_table(per_dataset, ("a", "b"))
    assert got["a"]["normalized_loss"] == pytest.approx((1.0 + 0.5) / 2)
    assert got["b"]["normalized_loss"] == pytest.approx((0.5 + 1.0) / 2)
    assert (got["a"]["best_in"], got["a"]["worst_in"]) == (1, 1)


def test_the_network_is_the_papers_three_layer_relu_net_with_a_0_05_output_scale():
    data = load("wine")
    spec = scaling_table.mlp_spec(data, "geometric")
    widths = [info.fan_out for info in nas.build_model(spec).trace.layers if info.fan_out]
    assert widths == [384, 64, data.classes]
    model = nas.build_model(spec, seed=0)
    scaling_table._normalize_output_(model, data.x_train[:32])
    with torch.no_grad():
        std = float(model(data.x_train[:32]).double().std())
    assert std == pytest.approx(0.05, rel=1e-5)

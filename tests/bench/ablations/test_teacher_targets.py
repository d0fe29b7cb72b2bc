"""The teacher's labels are a learnable task on the default path's Gaussian batch; the flag counts."""

from __future__ import annotations

import torch

from bench.ablations.teacher_targets import _flags, teacher_batch

SPEC = {
    "input_shape": [8],
    "blocks": [
        {"layers": [{"type": "linear", "out": 16}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 4}]},
    ],
}


def _linear_fit_accuracy(x: torch.Tensor, y: torch.Tensor) -> float:
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], int(y.max()) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(500):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return float((model(x).argmax(1) == y).float().mean())


def test_teacher_labels_are_linearly_separable_where_random_labels_are_not() -> None:
    x, y = teacher_batch(SPEC)
    assert x.shape == (64, 8) and y.shape == (64,) and len(torch.unique(y)) == 4
    assert _linear_fit_accuracy(x, y) == 1.0
    random = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(0))
    assert _linear_fit_accuracy(x, random) < 0.8
    again = teacher_batch(SPEC)
    assert torch.equal(again[0], x) and torch.equal(again[1], y)  # the same batch and teacher every time


def test_flags_count_precision_and_recall_below_the_cut() -> None:
    scores, bad = [-0.9, -0.8, -0.1, -0.7], [True, False, False, True]
    assert _flags(scores, -0.5, bad) == "3 flagged at 0.67 / 1.00"
    assert _flags(scores, -1.0, bad) == "0 flagged at n/a / 0.00"

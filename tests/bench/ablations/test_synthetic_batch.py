"""The synthetic batches of the default-path ablation: the teacher's labels are a learnable task on
the engine's own batch, and the flags are counted right."""

from __future__ import annotations

import torch

from bench.ablations.synthetic_batch import _flags, synthetic_batch

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
    data, options = synthetic_batch(SPEC, "white_teacher")
    assert data is not None and options == {"synthetic_inputs": "white", "seed": 0}
    x, y = data["x"], data["y"]
    assert x.shape == (64, 8) and y.shape == (64,) and len(torch.unique(y)) == 4
    assert _linear_fit_accuracy(x, y) == 1.0
    random = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(0))
    assert _linear_fit_accuracy(x, random) < 0.8
    again, _ = synthetic_batch(SPEC, "white_teacher")
    assert again is not None and torch.equal(again["x"], x) and torch.equal(again["y"], y)
    assert synthetic_batch(SPEC, "pink_random", 2) == (
        None,
        {"synthetic_inputs": "pink", "seed": 2},
    )  # the engine draws it


def test_flags_count_precision_and_recall_below_the_cut() -> None:
    scores, bad = [-0.9, -0.8, -0.1, -0.7], [True, False, False, True]
    assert _flags(scores, -0.5, bad) == "3 flagged at 0.67 / 1.00"
    assert _flags(scores, -1.0, bad) == "0 flagged at n/a / 0.00"


def test_compare_says_what_to_run_when_nothing_is_cached() -> None:
    from bench.ablations.synthetic_batch import compare

    assert compare([], "white_random", "pink_random", 3).startswith("no development candidate has white_random")

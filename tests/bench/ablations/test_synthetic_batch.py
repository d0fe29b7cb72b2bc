"""The synthetic batches of the default-path ablation: the teacher's labels are a learnable task,
the pink inputs have a falling spectrum, and the flags are counted right."""

from __future__ import annotations

import torch

from bench.ablations.synthetic_batch import _flags, pink_noise, synthetic_batch

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
    data = synthetic_batch(SPEC, "gaussian_teacher")
    x, y = data["x"], data["y"]
    assert x.shape == (64, 8) and y.shape == (64,) and len(torch.unique(y)) == 4
    assert _linear_fit_accuracy(x, y) == 1.0
    random = torch.randint(0, 4, (64,), generator=torch.Generator().manual_seed(0))
    assert _linear_fit_accuracy(x, random) < 0.8
    again = synthetic_batch(SPEC, "gaussian_teacher")
    assert torch.equal(again["x"], x) and torch.equal(again["y"], y)  # the same batch and teacher every time
    assert set(synthetic_batch(SPEC, "pink_random")) == {"x"}  # random labels: the engine draws them


def test_pink_noise_is_standardized_and_its_power_falls_with_frequency() -> None:
    x = pink_noise((256, 1, 16, 16), torch.Generator().manual_seed(0))
    assert abs(float(x.mean())) < 1e-5 and abs(float(x.std()) - 1) < 1e-5
    power = torch.fft.fft2(x).abs().pow(2).mean(dim=(0, 1))
    low, high = float(power[1, 1]), float(power[8, 8])  # frequency (1/16, 1/16) against (1/2, 1/2)
    assert low / high > 20  # amplitude 1/f: power falls as 1/f^2, 8 x the radius: 64 x less
    white = torch.randn((256, 1, 16, 16), generator=torch.Generator().manual_seed(0))
    flat = torch.fft.fft2(white).abs().pow(2).mean(dim=(0, 1))
    assert float(flat[1, 1]) / float(flat[8, 8]) < 2


def test_flags_count_precision_and_recall_below_the_cut() -> None:
    scores, bad = [-0.9, -0.8, -0.1, -0.7], [True, False, False, True]
    assert _flags(scores, -0.5, bad) == "3 flagged at 0.67 / 1.00"
    assert _flags(scores, -1.0, bad) == "0 flagged at n/a / 0.00"

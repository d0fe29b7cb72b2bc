from __future__ import annotations

import pytest
import torch

import nas
from nas.training import Dataset, Trainer, accuracy, load_digits

SMALL = {
    "input_shape": [64],
    "blocks": [
        {"layers": [{"type": "linear", "out": 32}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 10}]},
    ],
}


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_digits(seed=0)


def test_digits_are_standardized_on_the_training_split_and_stratified(data: Dataset) -> None:
    assert data.input_shape == [64] and data.n_classes == 10
    assert len(data.x_train) + len(data.x_val) == 1797
    assert data.x_train.mean().abs() < 1e-5
    assert torch.bincount(data.y_val).min() >= 40
    assert load_digits(image=True).input_shape == [1, 8, 8]


def test_a_small_mlp_learns_digits_in_a_few_epochs_and_costs_are_counted(data: Dataset) -> None:
    trainer = Trainer(nas.build_model(SMALL, seed=0), data, generator=torch.Generator().manual_seed(0))
    accuracies = [trainer.epoch() for _ in range(3)]
    assert accuracies[-1] > 0.9
    assert trainer.epochs == 3 and trainer.steps == 3 * 22
    assert trainer.macs == 3 * nas.summarize(SMALL).macs * 3 * len(data.x_train)
    assert trainer.seconds > 0 and not trainer.diverged


def test_a_diverging_model_stops_training_and_scores_zero(data: Dataset) -> None:
    # NaN policy: the first non-finite loss ends training; accuracy is 0 from then on.
    model = nas.build_model(SMALL, seed=0, scales={"blocks.0.0.weight": 1e30, "blocks.1.0.weight": 1e30})
    trainer = Trainer(model, data, lr=10.0)
    assert trainer.epoch() == 0.0 and trainer.diverged
    assert trainer.epoch() == 0.0 and trainer.steps == 0


def test_non_finite_logits_never_count_as_correct() -> None:
    class NaNModel(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.full((len(x), 10), float("nan"))

    assert accuracy(NaNModel(), torch.zeros(4, 64), torch.zeros(4, dtype=torch.int64)) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"lr": 0.0}, "lr"), ({"batch_size": 0}, "batch_size"), ({"batch_size": 1}, "at least 2")],  # 1 trained nothing
)
def test_bad_trainer_arguments_are_refused(kwargs: dict, message: str, data: Dataset) -> None:
    with pytest.raises(ValueError, match=message):
        Trainer(nas.build_model(SMALL), data, **kwargs)


def test_an_optimizer_factory_receives_the_model(data: Dataset) -> None:
    seen = []

    def factory(model: torch.nn.Module) -> torch.optim.Optimizer:
        seen.append(model)
        return torch.optim.Adam(model.parameters(), lr=1e-3)

    model = nas.build_model(SMALL, seed=0)
    Trainer(model, data, optimizer=factory).epoch()
    assert seen == [model]


def test_a_trainer_told_the_model_s_own_device_trains_as_by_default(data: Dataset) -> None:
    trained = []
    for device in (None, "cpu", torch.device("cpu")):
        trainer = Trainer(
            nas.build_model(SMALL, seed=0), data, generator=torch.Generator().manual_seed(0), device=device
        )
        history = [trainer.epoch() for _ in range(2)]
        trained.append((history, trainer.model.state_dict()))
        assert trainer.device == torch.device("cpu")
    for history, weights in trained[1:]:
        assert history == trained[0][0]
        assert all(torch.equal(weights[k], trained[0][1][k]) for k in weights)


def test_an_epoch_is_momentum_sgd_over_the_seeded_permutation_written_out_by_hand(data: Dataset) -> None:
    # the reference: the update written out (buffer = momentum * buffer + grad; weight -= lr * buffer),
    # over torch.randperm of the same seed, with no torch.optim in it
    lr, momentum, size = 0.05, 0.9, 64
    trainer = Trainer(nas.build_model(SMALL, seed=0), data, lr=lr, generator=torch.Generator().manual_seed(3))
    trainer.epoch()
    reference = nas.build_model(SMALL, seed=0)
    buffers = {name: torch.zeros_like(p) for name, p in reference.named_parameters()}
    order = torch.randperm(len(data.x_train), generator=torch.Generator().manual_seed(3))
    steps = 0
    for start in range(0, len(order), size):
        index = order[start : start + size]
        if len(index) < 2:
            continue
        reference.zero_grad()
        torch.nn.functional.cross_entropy(reference(data.x_train[index]), data.y_train[index]).backward()
        with torch.no_grad():
            for name, p in reference.named_parameters():
                assert p.grad is not None
                buffers[name].mul_(momentum).add_(p.grad)
                p.sub_(lr * buffers[name])
        steps += 1
    assert trainer.steps == steps
    trained = trainer.model.state_dict()
    for name, p in reference.named_parameters():
        assert torch.allclose(trained[name], p, rtol=1e-5, atol=1e-6), name
    untrained = nas.build_model(SMALL, seed=0).state_dict()
    assert not torch.allclose(trained["blocks.0.0.weight"], untrained["blocks.0.0.weight"])  # it did train


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)")
def test_a_trainer_on_a_gpu_moves_the_model_and_draws_the_cpu_s_minibatches(data: Dataset) -> None:
    cpu = Trainer(nas.build_model(SMALL, seed=0), data, generator=torch.Generator().manual_seed(0))
    gpu = Trainer(nas.build_model(SMALL, seed=0), data, generator=torch.Generator().manual_seed(0), device="cuda")
    assert next(gpu.model.parameters()).is_cuda
    for _ in range(2):
        assert gpu.epoch() == pytest.approx(cpu.epoch(), abs=0.02)  # the same batches, other float rounding
    assert gpu.steps == cpu.steps
    # the model on the GPU is scored on data kept on the CPU
    assert accuracy(gpu.model, data.x_val, data.y_val) == gpu.history[-1]


def test_data_that_is_not_a_dataset_or_whose_labels_do_not_match_is_refused(data: Dataset) -> None:
    with pytest.raises(TypeError, match="nas.training.Dataset"):
        Trainer(nas.build_model(SMALL), (data.x_train, data.y_train))  # type: ignore[arg-type]
    short = Dataset(data.x_train, data.y_train[:-1], data.x_val, data.y_val, data.n_classes)
    with pytest.raises(ValueError, match="x_train has .* samples but data.y_train has"):
        Trainer(nas.build_model(SMALL), short)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_cuda_device_on_a_machine_without_one_is_refused_saying_so(data: Dataset) -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        Trainer(nas.build_model(SMALL), data, device="cuda")  # it was torch's AssertionError

"""What a trial costs and reaches, measured once: a network conditioned once, trained once per
(initialization, learning rate, seed), both cached on disk.

Trainings are deterministic (one intra-op thread, seeded weights and minibatch order), so searches
that propose the same network at the same rate share one training; each is charged the seconds its
epochs took when they were trained, and a pruner that stops a trial after one epoch is charged one
epoch. A curve grows on demand: every trainer of this process stays in memory, so a later search
asking for more epochs continues it; after a restart the cached prefix is retrained (the same
numbers) and extended.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import nas
from bench.pipeline.run import engine_version, read_json, write_json
from nas.report import ConditioningReport
from nas.training import Dataset, Trainer, accuracy

__all__ = ["DATA", "Epoch", "Evaluator", "conditioning_batch", "load_splits", "search_trainer"]

# Of the cached records' meaning: bump to retrain and recondition everything. The keys hold DATA, BATCH,
# MOMENTUM, the spec, the init and the rate (and the engine's source for conditionings), not
# CONDITION_IMAGES, the trainer's or nas.build_model's code, nor the searches' settings in run.config:
# a change to one of those needs a bump.
VERSION = 1
# The split: stratified subsets of Fashion-MNIST at 14 x 14 (nas.fashion_mnist.standardized_subsets).
DATA = {"train_per_class": 600, "val_per_class": 100, "test_per_class": 200, "resolution": 14, "seed": 0}
BATCH = 64
MOMENTUM = 0.9
CONDITION_IMAGES = 64  # the labelled batch the gate uploads (options.data), the demo's


def load_splits(folder: str | Path | None = None) -> tuple[Dataset, torch.Tensor, torch.Tensor]:
    """The search's training and validation splits (both cut from Fashion-MNIST's training images,
    disjoint) and its test images with labels (from the test images). The validation accuracy is the
    search's objective; the test accuracy is only reported."""
    from nas.fashion_mnist import standardized_subsets, stratified

    per_class = DATA["train_per_class"] + DATA["val_per_class"]
    x, y, x_test, y_test = standardized_subsets(
        folder, per_class, DATA["test_per_class"], DATA["resolution"], DATA["seed"]
    )
    val = np.zeros(len(y), dtype=bool)
    val[stratified(y, DATA["val_per_class"], DATA["seed"] + 1)] = True
    shape = (-1, 1, DATA["resolution"], DATA["resolution"])

    def images(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a, dtype=torch.float32).reshape(shape)

    data = Dataset(images(x[~val]), torch.tensor(y[~val]), images(x[val]), torch.tensor(y[val]), n_classes=10)
    return data, images(x_test), torch.tensor(y_test)


@dataclass(frozen=True)
class Epoch:
    """One epoch of a training: validation and test accuracy after it, its seconds (training and
    validation, what a search pays) and optimizer steps."""

    val: float
    test: float
    seconds: float
    steps: int
    diverged: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "val": self.val,
            "test": self.test,
            "seconds": self.seconds,
            "steps": self.steps,
            "diverged": self.diverged,
        }


@dataclass
class _Training:
    trainer: Trainer
    epochs: list[Epoch] = field(default_factory=list)


def _key(*parts: Any) -> str:
    blob = json.dumps([VERSION, DATA, BATCH, MOMENTUM, *parts], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def conditioning_batch(data: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """The labelled batch the search conditions on (and an init peer draws from): the training
    split's first ``CONDITION_IMAGES`` images and labels."""
    return data.x_train[:CONDITION_IMAGES], data.y_train[:CONDITION_IMAGES]


def search_trainer(
    spec: dict[str, Any],
    data: Dataset,
    lr: float,
    seed: int,
    *,
    report: ConditioningReport | None = None,
    peer: str | None = None,
    device: str | None = None,
) -> Trainer:
    """The search's trainer of ``spec`` at ``lr`` (SGD, momentum 0.9, batch 64): from its spec
    initialization, from ``report``'s tuned one, or from an init ``peer`` of benchmark v2 on the
    conditioning's batch; ``seed`` draws the weights and the minibatch order."""
    model = report.build_model(spec) if report is not None else nas.build_model(spec, seed=seed)
    if peer is not None:
        from bench.pipeline.inits import initialize

        model = initialize(peer, model, *conditioning_batch(data), seed=seed)
    return Trainer(
        model,
        data,
        lr=lr,
        batch_size=BATCH,
        momentum=MOMENTUM,
        generator=torch.Generator().manual_seed(seed),
        device=device,
    )


class Evaluator:
    """Conditioning and training of the search's networks, cached under ``out`` (``condition/`` and
    ``curves/``, one JSON per network)."""

    def __init__(self, out: Path, folder: str | Path | None = None) -> None:
        self.out = out
        self.data, self.x_test, self.y_test = load_splits(folder)
        self.engine = engine_version()
        self._trainings: dict[str, _Training] = {}

    def condition(self, spec: dict[str, Any], seed: int) -> tuple[ConditioningReport, float]:
        """The engine's report on ``spec`` (options ``seed`` and the labelled batch) and its seconds."""
        from worker.engine import condition

        path = self.out / "condition" / f"{_key('condition', self.engine, spec, seed)}.json"
        if path.exists():
            cached = read_json(path)
            return ConditioningReport.model_validate(cached["report"]), float(cached["seconds"])
        x, y = conditioning_batch(self.data)
        started = time.perf_counter()
        report = condition(spec, data={"x": x, "y": y}, options={"seed": seed})
        seconds = time.perf_counter() - started
        write_json(path, {"report": report.model_dump(mode="json"), "seconds": seconds, "name": spec.get("name")})
        return report, seconds

    def init_cost(self, spec: dict[str, Any], seed: int, peer: str) -> tuple[float, float]:
        """What an init ``peer`` costs on ``spec`` before training, charged as a trial's conditioning:
        its seconds and its counted training steps (LSUV: its forward passes on the conditioning's
        batch, a third of a step each, as benchmark v2 counts them), measured once and cached (a
        charge never changes, as an epoch's does not)."""
        from bench.pipeline.inits import initialize, lsuv_counted_
        from worker.engine.budget import FORWARD_COST

        path = self.out / "init_cost" / f"{_key('init_cost', spec, peer, seed)}.json"
        if path.exists():
            cached = read_json(path)
            return float(cached["seconds"]), float(cached["counted_steps"])
        model = nas.build_model(spec, seed=seed)
        x, y = conditioning_batch(self.data)
        started = time.perf_counter()
        if peer == "lsuv":
            counted = FORWARD_COST * lsuv_counted_(model, x, seed=seed)
        else:  # the other peers' costs are not counted in steps
            initialize(peer, model, x, y, seed=seed)
            counted = 0.0
        seconds = time.perf_counter() - started
        write_json(path, {"seconds": seconds, "counted_steps": counted, "name": spec.get("name"), "peer": peer})
        return seconds, counted

    def epochs(
        self,
        spec: dict[str, Any],
        lr: float,
        seed: int,
        count: int,
        report: ConditioningReport | None = None,
        peer: str | None = None,
    ) -> list[Epoch]:
        """The first ``count`` epochs of ``spec`` trained at ``lr`` (SGD, momentum 0.9, batch 64)
        from its spec initialization, from ``report``'s tuned one, or from an init ``peer`` of
        benchmark v2 (``bench.pipeline.inits``, e.g. ``lsuv``) on the conditioning's batch; ``seed``
        draws the weights and the minibatch order."""
        init: Any = "spec"
        if report is not None:
            env = report.environment
            init = {"scales": dict(report.scales), "seed": env.seed, "draw": env.draw}
            if report.bias_shifts:  # the key of a curve trained before the centering stays as it was
                init["bias_shifts"] = report.bias_shifts
        elif peer is not None:
            init = {"peer": peer}
        key = _key("train", spec, init, lr, seed)
        path = self.out / "curves" / f"{key}.json"
        cached = [Epoch(**e) for e in read_json(path)["epochs"]] if path.exists() else []
        if len(cached) >= count:
            return cached[:count]
        training = self._trainings.get(key)
        if training is None:
            trainer = search_trainer(spec, self.data, lr, seed, report=report, peer=peer)
            training = self._trainings[key] = _Training(trainer)
        while len(training.epochs) < count:
            trainer = training.trainer
            seconds, steps = trainer.seconds, trainer.steps
            val = trainer.epoch()
            test = 0.0 if trainer.diverged else accuracy(trainer.model, self.x_test, self.y_test)
            training.epochs.append(Epoch(val, test, trainer.seconds - seconds, trainer.steps - steps, trainer.diverged))
        # a retrained prefix keeps the seconds first measured: the charge of an epoch never changes
        merged = cached + training.epochs[len(cached) :]
        write_json(path, {"epochs": [e.to_json() for e in merged], "name": spec.get("name"), "lr": lr})
        return merged[:count]

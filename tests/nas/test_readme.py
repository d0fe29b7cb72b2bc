"""Every Python snippet of the README runs, against a real service (uvicorn, SQLite, an embedded
worker), with only what the reader supplies filled in: a spec and inputs, training data, a training
loop, and Optuna's storage (the snippet's PostgreSQL on the GPU node becomes an in-memory one)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import torch

from nas.examples import EXAMPLE_MLP

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_the_snippets_these_tests_run() -> None:
    assert len(BLOCKS) == 3, "a README snippet was added or removed: run it here too"


def test_the_build_snippet_runs() -> None:
    namespace: dict[str, Any] = {"spec_dict": EXAMPLE_MLP, "x": torch.randn(3, 64)}
    exec(compile(BLOCKS[0], "README.md (build)", "exec"), namespace)  # noqa: S102 - our own README
    assert namespace["out"].shape == (3, 10) and len(namespace["boundaries"]) == len(EXAMPLE_MLP["blocks"]) + 1


def test_the_one_machine_search_snippet_runs_against_a_live_service(
    live_service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = BLOCKS[1]
    assert "n_trials=100)" in code and "storage" not in code
    _run_search(code.replace("n_trials=100)", "n_trials=3)"), "one machine", live_service, monkeypatch)


def test_the_search_snippet_runs_against_a_live_service(live_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    code = BLOCKS[2]
    storage = re.search(r'storage="postgresql[^"]*"', code)
    assert storage is not None and "n_trials=100, n_jobs=4" in code
    code = code.replace(storage.group(0), "storage=None").replace("n_trials=100, n_jobs=4", "n_trials=3, n_jobs=1")
    _run_search(code, "GPU node", live_service, monkeypatch)


def _run_search(code: str, name: str, live_service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a search snippet of 3 trials with the reader's parts filled in: digits as the training
    data and, as the training loop, one forward pass."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x_train = ((digits.data - digits.data.mean()) / digits.data.std()).astype(np.float32)
    trained: list[Any] = []

    def train_and_validate(model: torch.nn.Module, lr: float) -> float:  # the reader's loop, here one forward
        assert 0 < lr <= 0.1
        trained.append(model)
        with torch.no_grad():
            return float(model(torch.from_numpy(x_train[:32])).softmax(-1).max(-1).values.mean())

    monkeypatch.setenv("PREFLIGHT_URL", live_service.url)  # the service's test port, not 8000
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    namespace: dict[str, Any] = {
        "x_train": x_train,
        "y_train": digits.target.astype(np.int64),
        "train_and_validate": train_and_validate,
    }
    try:
        exec(compile(code, f"README.md (search, {name})", "exec"), namespace)  # noqa: S102 - our own README
    finally:
        if "client" in namespace:
            namespace["client"].close()
    study = namespace["study"]
    assert len(study.trials) == 3 and all(t.state.is_finished() for t in study.trials)
    kept = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(trained) == len(kept)  # every kept trial trained the network its report tuned

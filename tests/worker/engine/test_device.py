"""worker.engine.device: the one reading of ``options.device``."""

from __future__ import annotations

import pytest
import torch

from worker.engine.device import DeviceUnavailable, resolve_device
from worker.engine.pipeline import select_device


def test_device_selection() -> None:
    """auto picks CUDA when present and the CPU otherwise; asking for absent CUDA is an error."""
    assert select_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert select_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            select_device("cuda")


def test_the_resolver_pins_the_index_when_asked() -> None:
    assert resolve_device("cpu", pin_index=True) == torch.device("cpu")
    if torch.cuda.is_available():
        assert resolve_device("auto", pin_index=True) == torch.device("cuda:0")
        assert resolve_device("cuda", pin_index=True) == torch.device("cuda:0")
        assert resolve_device("auto") == torch.device("cuda")
    else:
        assert resolve_device("auto", pin_index=True) == torch.device("cpu")
        for error in (ValueError, RuntimeError, DeviceUnavailable):
            with pytest.raises(error, match="CUDA is not available"):
                resolve_device("cuda:0", pin_index=True)


@pytest.mark.parametrize("device", ["mps", "meta", "cpu:1", "tpu", ""])
def test_a_device_the_engine_cannot_run_on_is_refused_naming_the_choices(device: str) -> None:
    """torch parses mps, meta and cpu:1 as devices (tpu not at all); each would fail later, inside a job."""
    with pytest.raises(ValueError, match=f"device must be auto, cpu, cuda or cuda:N, but got {device!r}"):
        resolve_device(device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)")
def test_a_gpu_index_beyond_the_machines_is_unavailable() -> None:
    absent = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(DeviceUnavailable, match=r"has \d+ CUDA device\(s\)"):
        resolve_device(absent)


def test_a_gpu_index_beyond_the_machines_count_is_unavailable_and_one_within_it_resolves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rule on a one-GPU machine, read without one: torch would accept ``cuda:1`` and fail in a job."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(DeviceUnavailable, match=r"'cuda:1' was asked for but this machine has 1 CUDA device\(s\)"):
        resolve_device("cuda:1")

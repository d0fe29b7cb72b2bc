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

"""The one device resolver: what ``options.device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``)
means on this machine. Used by ``worker.engine.pipeline.condition`` and meant for the job loop
(``worker.jobs.engine_process``) too, so both read a preference the same way."""

from __future__ import annotations

import torch

__all__ = ["DeviceUnavailable", "resolve_device"]


class DeviceUnavailable(ValueError, RuntimeError):
    """A CUDA device was asked for but none is visible. A ValueError (what ``condition``
    raised) and a RuntimeError (what the job loop raised), so callers of either keep working."""


def resolve_device(preference: str = "auto", *, pin_index: bool = False) -> torch.device:
    """``auto``: CUDA when present, else the CPU; ``cpu``; ``cuda[:N]``, which must be present.

    ``pin_index``: a bare ``cuda`` (and ``auto`` on a GPU machine) becomes ``cuda:0``, the
    form a worker process that owns one device reports; without it ``auto`` gives ``cuda``.
    Raises ValueError for any other device, and :class:`DeviceUnavailable` when CUDA, or the
    GPU index asked for, is absent.
    """
    if preference == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda:0" if pin_index else "cuda")
    try:
        device = torch.device(preference)
    except RuntimeError:  # torch's message names the list of every device type it knows
        device = None
    if device is None or device.type not in ("cpu", "cuda") or (device.type == "cpu" and device.index not in (None, 0)):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, but got {preference!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailable(f"device {preference!r} was asked for but CUDA is not available; use 'auto' or 'cpu'")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise DeviceUnavailable(f"device {preference!r} was asked for but this machine has {count} CUDA device(s)")
    if pin_index and device.type == "cuda" and device.index is None:
        return torch.device("cuda:0")
    return device

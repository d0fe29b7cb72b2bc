"""A child process that dies with its parent: PR_SET_PDEATHSIG, Linux's way to leave no orphan
computing (the engine child of a runner, the runners of a supervisor) when the parent is killed
with a signal that it cannot handle."""

from __future__ import annotations

import ctypes
import signal

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``signum`` to this process when its parent dies (no-op off Linux,
    where the callers' pipes or polling end the child instead)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signum))
    except (OSError, AttributeError):
        pass

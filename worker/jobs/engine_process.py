"""The conditioning engine in a child process of its runner.

A job is stopped (timeout, cancellation, shutdown) by ending this process, at once and for
certain, whatever the engine is doing; a crash in the engine (a segfault, a poisoned CUDA
context) costs the child, not the runner. The child is started with the ``spawn`` method, so
it never inherits a forked CUDA context, and it dies with its parent (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from worker.jobs.lifetime import die_with_parent
from worker.jobs.outcome import Outcome

if TYPE_CHECKING:
    import torch

    from nas.report import ConditioningReport

__all__ = ["EngineCrashed", "EngineError", "EngineProcess", "option_device", "warm_up"]

log = logging.getLogger(__name__)

_CONTEXT = multiprocessing.get_context("spawn")
# Errors that retrying cannot fix: the job fails at once instead of using up its attempts. An
# out-of-memory (MemoryError; torch's OutOfMemoryError, a RuntimeError subclass, is matched by name)
# comes back the same on the same device: the job names what to change instead.
_DETERMINISTIC = (ValueError, TypeError, KeyError, MemoryError)
_OUT_OF_MEMORY = ("OutOfMemoryError", "MemoryError")
# what torch's allocators say (CPU: "DefaultCPUAllocator: can't allocate memory", or C++'s
# "std::bad_alloc" under an address-space limit; CUDA: "out of memory"), and the OS's ENOMEM
_OUT_OF_MEMORY_SIGNS = ("can't allocate memory", "out of memory", "bad_alloc", "cannot allocate memory")


@dataclass(frozen=True)
class EngineError:
    """The engine raised: its exception's type and message, and whether a retry could help."""

    kind: str
    message: str
    deterministic: bool

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    @property
    def outcome(self) -> Outcome:
        """The job's outcome: a deterministic error fails it at once, any other is retried."""
        return Outcome.DETERMINISTIC_ERROR if self.deterministic else Outcome.ERROR


class EngineCrashed(RuntimeError):
    """The engine process died while working on a job."""


class EngineStartStopped(EngineCrashed):
    """The worker was stopped while its engine process was starting (the child was killed)."""


# how often a start looks at its ``stop`` while it waits for the child to say it is ready
_START_POLL_SECONDS = 0.25


# A network small enough to condition in milliseconds once the libraries are loaded.
_WARM_UP_SPEC: dict[str, Any] = {
    "name": "engine-warm-up",
    "input_shape": [8],
    "blocks": [
        {"layers": [{"type": "linear", "out": 8}, {"type": "relu"}]},
        {"layers": [{"type": "linear", "out": 2}]},
    ],
}


def warm_up(device: str) -> float:
    """Condition a tiny network once, so that the first candidate does not pay the process's
    one-time costs: PyTorch loads parts of itself lazily on first use (``torch.optim``
    imports ``torch._dynamo``, about 2 s on a CPU core), and a GPU creates its context and
    library handles. Returns the seconds it took; a failure is logged, not raised (the jobs
    will report what is wrong)."""
    import time

    from worker.engine.pipeline import condition

    started = time.perf_counter()
    try:
        condition(_WARM_UP_SPEC, None, {"device": device, "seed": 0})
    except Exception:  # pragma: no cover - a broken install or device; the first job says what
        log.warning("the engine's warm-up on %s failed", device, exc_info=True)
    return time.perf_counter() - started


def memory_limit(setting: int | None, device: str = "cpu") -> int | None:
    """The engine child's memory limit in bytes, None for none: the setting
    (``PREFLIGHT_ENGINE_MEMORY_BYTES``; 0 for none). Unset, a CPU child gets three quarters of this
    machine's physical memory, so that one job asking for too much fails alone with an
    out-of-memory instead of the machine swapping or its OOM killer choosing a victim; a GPU child
    gets no limit (the host's memory says nothing about the device's)."""
    if setting is not None:
        return setting or None
    if device.startswith("cuda"):
        return None
    try:
        return int(0.75 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not a POSIX system that says
        return None


def _limit_memory(resolved: str, setting: int | None) -> None:
    """CPU: an address-space limit (RLIMIT_AS), above which allocations fail in the job; CUDA: the
    caching allocator's share of the device (an address-space limit would break CUDA's mappings)."""
    limit = memory_limit(setting, resolved)
    if limit is None:
        return
    if resolved.startswith("cuda"):
        import torch

        total = torch.cuda.get_device_properties(torch.device(resolved)).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), torch.device(resolved))
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def option_device(device: torch.device) -> str:
    """The device as ``options.device`` names it: torch's ``cpu:0`` is ``cpu`` there (the child
    passed ``cpu:0`` into every job's options, which refuse it, so a worker started with
    ``--device cpu:0`` failed each job it claimed, for good)."""
    return "cpu" if device.type == "cpu" else str(device)


def _serve(connection: Connection, device: str, memory_bytes: int | None = None) -> None:
    """The child: resolve the device, limit its memory, then condition each (spec, options) it is sent."""
    die_with_parent()  # off Linux the pipe's EOF ends the child instead
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        from worker.engine.device import resolve_device

        resolved = option_device(resolve_device(device, pin_index=True))
        if resolved.startswith("cuda"):
            import torch

            torch.cuda.set_device(torch.device(resolved))
        _limit_memory(resolved, memory_bytes)
        from nas.options import ConditionOptions
        from worker.engine.pipeline import condition
    except Exception as exc:
        connection.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    warm_up(resolved)
    connection.send(("ready", resolved))
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        spec, options, data = message
        try:
            report = condition(spec, data, options=ConditionOptions.model_validate({**options, "device": resolved}))
            connection.send((Outcome.DONE, report.model_dump(mode="json")))
        except Exception as exc:  # the engine's error is the job's outcome
            error = engine_error(exc)
            connection.send((error.outcome, error))


def engine_error(exc: BaseException) -> EngineError:
    """The job's view of an exception the engine raised: deterministic ones (and an out-of-memory,
    which comes back the same on the same device) fail the job at once, with what to change."""
    name, message = type(exc).__name__, str(exc)
    out_of_memory = name in _OUT_OF_MEMORY or any(sign in message.lower() for sign in _OUT_OF_MEMORY_SIGNS)
    if out_of_memory:
        message = (
            f"out of memory ({message.splitlines()[0] if message else 'no detail'}); not retried: use a smaller "
            "batch_size or hessian_batch_size, or a device with more memory"
        )
    return EngineError(name, message, isinstance(exc, _DETERMINISTIC) or out_of_memory)


class EngineProcess:
    """A long-lived engine child: started on first use, ended by :meth:`kill`, restarted
    on the next job."""

    def __init__(self, device: str, start_timeout: float = 300.0, memory_bytes: int | None = None) -> None:
        self.requested_device = device
        self.memory_bytes = memory_bytes  # the setting; the child applies ``memory_limit`` on its device
        self.device: str | None = None
        self.start_timeout = start_timeout
        self._process: Any = None
        self._connection: Connection | None = None

    @property
    def running(self) -> bool:
        """The child is up (started and not dead)."""
        return self._process is not None and self._process.is_alive() and self.device is not None

    def start(self, stop: threading.Event | None = None) -> str:
        """Start the child if it is not running; returns the device it runs on. A ``stop`` set
        while the child starts (a worker's SIGTERM: a start can take minutes on a GPU) kills it
        and raises :class:`EngineStartStopped`, where the worker sat out the start timeout."""
        if self._process is not None and self._process.is_alive():
            assert self.device is not None
            return self.device
        parent, child = _CONTEXT.Pipe()
        self._process = _CONTEXT.Process(
            target=_serve, args=(child, self.requested_device, self.memory_bytes), name="preflight-engine", daemon=True
        )
        self._process.start()
        child.close()
        self._connection = parent
        deadline = time.monotonic() + self.start_timeout
        while not parent.poll(min(_START_POLL_SECONDS, max(0.0, deadline - time.monotonic()))):
            if stop is not None and stop.is_set():
                self.kill()
                raise EngineStartStopped("stopped while the engine process was starting")
            if time.monotonic() >= deadline:
                self.kill()
                raise EngineCrashed(f"the engine process did not start within {self.start_timeout:g} s")
        try:
            state, value = parent.recv()
        except EOFError:
            self.kill()
            raise EngineCrashed("the engine process died while starting") from None
        if state != "ready":
            self.kill()
            raise EngineCrashed(f"the engine process could not start: {value}")
        self.device = value
        return value

    def submit(self, spec: dict[str, Any], options: dict[str, Any], data: dict[str, Any] | None = None) -> None:
        """Send one job: the spec, the engine's options and the data (None: a Gaussian batch)."""
        self.start()
        assert self._connection is not None
        self._connection.send((spec, options, data))

    def result(self, timeout: float) -> tuple[Outcome, ConditioningReport | EngineError] | None:
        """``(Outcome.DONE, ConditioningReport)``, or ``(Outcome.ERROR, EngineError)`` /
        ``(Outcome.DETERMINISTIC_ERROR, EngineError)`` when the engine raised; None while
        still working. Raises EngineCrashed when the child died."""
        assert self._connection is not None
        try:
            if not self._connection.poll(timeout):
                if not self._process.is_alive():
                    raise EngineCrashed(f"the engine process died ({self._exit()})")
                return None
            outcome, value = self._connection.recv()
        except (EOFError, OSError):
            how = self._exit()
            self.kill()
            raise EngineCrashed(f"the engine process died ({how})") from None
        if outcome is Outcome.DONE:
            from nas.report import ConditioningReport  # lazily: importing ``nas`` imports torch

            return outcome, ConditioningReport.model_validate(value)
        return outcome, value

    def _exit(self) -> str:
        """How the child ended, once it has (a pipe's EOF comes before the exit status is known)."""
        if self._process is None:
            return "exit code unknown"
        self._process.join(5.0)
        code = self._process.exitcode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        """End the child now (the job it was on is abandoned)."""
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(30)
        if self._connection is not None:
            self._connection.close()
        self._process = self._connection = None

    def close(self) -> None:
        """Ask the child to exit; kill it if it does not."""
        if self._process is not None and self._process.is_alive() and self._connection is not None:
            try:
                self._connection.send(None)
            except OSError:
                pass
            self._process.join(10)
        self.kill()

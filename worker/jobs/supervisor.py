"""`preflight worker --devices all`: one runner process per visible GPU, restarted when it dies.

The supervisor never imports CUDA itself: it counts GPUs in a short-lived spawned probe and
starts every child with the ``spawn`` start method, so no process ever inherits a forked
CUDA context. With no GPU visible it runs one CPU worker (the CPU fallback).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from multiprocessing.context import SpawnProcess
from typing import Any

from service.settings import Settings
from worker.jobs.lifetime import die_with_parent

__all__ = ["Supervisor", "visible_gpu_count"]

log = logging.getLogger(__name__)

_CONTEXT = multiprocessing.get_context("spawn")
RESTART_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)


def _count_gpus(queue: Any) -> None:
    import torch

    queue.put(torch.cuda.device_count() if torch.cuda.is_available() else 0)


def visible_gpu_count(timeout: float = 120.0) -> int:
    """How many CUDA devices a fresh process sees (counted in a spawned probe)."""
    queue = _CONTEXT.SimpleQueue()
    probe = _CONTEXT.Process(target=_count_gpus, args=(queue,), name="preflight-gpu-probe")
    probe.start()
    probe.join(timeout)
    if probe.is_alive():
        probe.kill()
        return 0
    return 0 if queue.empty() else int(queue.get())


def _child(
    settings_json: str, device: str, burst: bool, max_jobs: int | None, log_level: int, parent: int, name: str | None
) -> None:
    """Entry point of a child process (spawned: it imports everything afresh). In a process group
    of its own, so that a Ctrl-C or a group's SIGTERM reaches it once, forwarded by the supervisor
    (a second signal would drop its job); stopped gracefully (SIGTERM) if the supervisor is killed."""
    os.setpgrp()
    die_with_parent(signal.SIGTERM)
    if os.getppid() != parent:  # the supervisor died before the line above could take effect
        return
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from worker.jobs.runner import Runner

    runner = Runner(
        Settings.model_validate_json(settings_json), device=device, burst=burst, max_jobs=max_jobs, name=name
    )
    runner.install_signal_handlers()
    runner.run()


class Supervisor:
    """Runs and watches one child per device until SIGTERM / SIGINT (or, with ``burst``,
    until every child has exited on an empty queue)."""

    def __init__(
        self,
        settings: Settings,
        *,
        devices: list[str] | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        name: str | None = None,
    ) -> None:
        self.settings = settings
        self.name = name  # each child's is ``name:DEVICE`` (default host:pid:DEVICE)
        self.devices = devices
        self.burst = burst
        self.max_jobs = max_jobs
        self._stopping = False
        self._children: dict[str, SpawnProcess] = {}
        self._restarts: dict[str, int] = {}

    def _start(self, device: str) -> None:
        child = _CONTEXT.Process(
            target=_child,
            args=(
                self.settings.model_dump_json(),
                device,
                self.burst,
                self.max_jobs,
                logging.getLogger().getEffectiveLevel(),
                os.getpid(),
                self.name,
            ),
            name=f"preflight-worker-{device}",
        )
        child.start()
        self._children[device] = child
        log.info("supervisor: started worker pid %s on %s", child.pid, device)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("supervisor: signal %d, stopping children", signum)
        self._stopping = True
        for child in self._children.values():
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signum)

    def run(self) -> int:
        devices = self.devices
        if devices is None:
            count = visible_gpu_count()
            devices = [f"cuda:{index}" for index in range(count)] or ["cpu"]
        log.info("supervisor: devices %s", ", ".join(devices))
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for device in devices:
            self._start(device)
        while self._children:
            time.sleep(0.5)
            for device, child in list(self._children.items()):
                if child.is_alive():
                    continue
                child.join()
                if self._stopping or (child.exitcode == 0 and (self.burst or self.max_jobs is not None)):
                    del self._children[device]
                    continue
                restarts = self._restarts.get(device, 0)
                delay = RESTART_BACKOFF_SECONDS[min(restarts, len(RESTART_BACKOFF_SECONDS) - 1)]
                log.warning(
                    "supervisor: worker on %s exited with %s; restarting in %.0f s", device, child.exitcode, delay
                )
                self._restarts[device] = restarts + 1
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not self._stopping:
                    time.sleep(0.1)
                if not self._stopping:
                    self._start(device)
                else:
                    del self._children[device]
        return 0

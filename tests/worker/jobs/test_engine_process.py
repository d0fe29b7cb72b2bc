"""The engine child's start-up: it pays the process's one-time costs before its first job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from nas.testing import mlp
from worker.jobs.engine_process import EngineCrashed, EngineProcess, option_device


@pytest.mark.slow
def test_after_the_warm_up_conditioning_a_candidate_loads_no_further_module() -> None:
    """The first candidate's timings measure the candidate: every module conditioning needs
    (PyTorch loads some lazily on first use, e.g. ``torch._dynamo`` from ``torch.optim``) is
    loaded by ``warm_up`` already. In a fresh interpreter, so no other test has loaded them."""
    script = textwrap.dedent(
        """
        import json, sys
        from nas.examples import EXAMPLE_MLP
        from worker.engine.pipeline import condition
        from worker.jobs.engine_process import warm_up

        loaded_by_import = set(sys.modules)
        seconds = warm_up("cpu")
        loaded_by_warm_up = set(sys.modules) - loaded_by_import
        condition(EXAMPLE_MLP, None, {"device": "cpu", "steps": 2})
        print(json.dumps({"seconds": seconds, "warm_up": sorted(loaded_by_warm_up),
                          "first_job": sorted(set(sys.modules) - loaded_by_import - loaded_by_warm_up)}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["seconds"] > 0
    assert result["warm_up"], "the warm-up loaded nothing: the first job would pay the lazy loading"
    assert result["first_job"] == [], f"the first job still loaded: {result['first_job'][:10]}"


@pytest.mark.slow  # a spawned engine child: seconds to import torch
def test_a_killed_engine_child_is_reported_with_the_signal_that_ended_it() -> None:
    """The crash message read the child's exit code before the child was joined, so it always
    said "exit code None"."""
    engine = EngineProcess("cpu", start_timeout=300)
    try:
        assert engine.start() == "cpu"
        engine.submit(mlp(4, "relu", 512), {"steps": 1000, "budget_steps": None, "probe_steps": 1000})
        assert engine._process is not None and engine._process.pid is not None
        os.kill(engine._process.pid, signal.SIGKILL)
        with pytest.raises(EngineCrashed, match="killed by SIGKILL"):
            while engine.result(timeout=60) is None:
                pass
    finally:
        engine.kill()


def test_cpu_0_is_the_cpu_in_the_form_the_options_take() -> None:
    """A worker started with ``--device cpu:0`` passed the CLI's check, then its engine child put
    ``cpu:0`` into every job's options, which refuse it: each job it claimed failed for good."""
    import torch

    from nas.options import ConditionOptions
    from worker.engine.device import resolve_device

    named = option_device(resolve_device("cpu:0", pin_index=True))
    assert named == "cpu" and ConditionOptions(device=named).device == "cpu"
    assert option_device(torch.device("cuda", 1)) == "cuda:1"

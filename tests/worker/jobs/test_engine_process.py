import os
import signal

import pytest

from nas.testing import mlp
from worker.jobs.engine_process import EngineCrashed, EngineProcess


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

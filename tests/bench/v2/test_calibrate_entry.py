"""``python -m bench.calibrate --check`` is the calibration the engine ships."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow  # a subprocess: several seconds
def test_bench_calibrate_check_runs_the_v2_calibrations_check() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.calibrate", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the shipped weights equal a fresh fit" in done.stdout

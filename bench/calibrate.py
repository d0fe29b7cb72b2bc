"""``python -m bench.calibrate [--check]``: the score's calibration, the one the engine ships.

The fit lives in ``bench.v2.calibrate`` (benchmark v2's development set); v1's fit, kept for its
report, is ``bench.pipeline.calibrate``. This is the name the README and docs/ give the command.
"""

from __future__ import annotations

from bench.v2.calibrate import main

if __name__ == "__main__":
    raise SystemExit(main())

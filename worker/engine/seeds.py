"""The seed streams of one ``condition`` call: every stage draws from its own generator,
seeded at ``options.seed`` plus a fixed offset, so that switching a stage off (or changing how
many numbers one stage draws) leaves the other stages' draws as they were.

The offsets are part of the reproducibility contract: the same spec, data and options give
the same report, so changing an offset changes every report.
"""

from __future__ import annotations

import torch

__all__ = [
    "AUTOINIT",
    "BALANCING",
    "DATA",
    "DIAGNOSTICS",
    "PROBE",
    "PROFILE_BEFORE",
    "WEIGHTS",
    "generator",
]

WEIGHTS = 0  # nas.build_model: the spec's own initialization
DATA = 0  # the Gaussian batch drawn when no data is given (worker.engine.inputs), on the CPU
PROFILE_BEFORE = 1  # the APJN / K profile at the spec's initialization (worker.engine.jacobian)
AUTOINIT = 2  # AutoInit's Jacobian probes (worker.engine.autoinit)
DIAGNOSTICS = 3  # gamma_l / nu_l, kappa(D) and the Hessian (worker.engine.diagnostics)
BALANCING = 4  # balancing's probes (worker.engine.balancing)
PROBE = 5  # the trainability probe's random labels and order (worker.engine.probe)


def generator(seed: int, offset: int, device: torch.device) -> torch.Generator:
    """The generator of one stream on ``device``: seeded at ``seed + offset``."""
    return torch.Generator(device=device).manual_seed(seed + offset)

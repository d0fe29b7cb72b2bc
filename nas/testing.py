"""Reference candidates for a NAS controller's own tests of its Preflight set-up.

No fakes here: these are real specs and options to send to a real service, e.g. to check
that a deployment prunes what it must (``ill_conditioned_mlp``) and keeps what it must
(``well_conditioned_mlp``) before a long search is started::

    client = PreflightClient()
    assert client.condition(ill_conditioned_mlp(), FAST_OPTIONS).report.verdict == "prune"
    assert client.condition(well_conditioned_mlp(), FAST_OPTIONS).report.verdict == "keep"
"""

from __future__ import annotations

from typing import Any

from nas.options import ConditionOptions, Thresholds
from nas.report import BlockReport, ConditioningReport, Environment, LayerReport, TuningReport

__all__ = ["FAST_OPTIONS", "ill_conditioned_mlp", "mlp", "sample_report", "well_conditioned_mlp"]

# Tuning options that make a conditioning cost about a second on a busy 2-core CPU: few
# tuning steps and diagnostic iterations on small batches, and no GR balancing (the
# engine's costliest stage). For checks of a set-up, not for a real search. Its own cut: the
# shipped one is calibrated on probes of 64 labelled samples, and on 8 Gaussian samples with
# random labels the probe memorizes more (the 30-layer sigmoid MLP's probe loss is 0.95 there
# against 0.98 at 64), so a set-up check that must prune it says where (its score is about -0.43,
# the ReLU MLP's about -0.06).
FAST_OPTIONS: dict[str, Any] = {
    "steps": 2,
    "batch_size": 8,
    "hessian_iterations": 2,
    "hessian_batch_size": 4,
    "balance": False,
    "thresholds": {"score": -0.3},
}


def mlp(
    depth: int, activation: str, width: int = 32, *, inputs: int = 64, classes: int = 10, name: str | None = None
) -> dict[str, Any]:
    """A plain MLP spec: ``depth`` blocks ``[linear(width), activation]`` and a linear head."""
    hidden = [{"layers": [{"type": "linear", "out": width}, {"type": activation}]} for _ in range(depth)]
    return {
        "name": name or f"mlp-{depth}x{width}-{activation}",
        "input_shape": [inputs],
        "blocks": [*hidden, {"layers": [{"type": "linear", "out": classes}]}],
    }


def ill_conditioned_mlp(inputs: int = 64, classes: int = 10) -> dict[str, Any]:
    """30 sigmoid layers: the gradient vanishes (each layer's Jacobian norm is about 1/16 at
    a fan-in initialization), and no per-layer gain brings a non-homogeneous activation back
    to criticality. Any working deployment prunes it."""
    return mlp(30, "sigmoid", 16, inputs=inputs, classes=classes, name="ill-30-sigmoid")


def well_conditioned_mlp(inputs: int = 64, classes: int = 10) -> dict[str, Any]:
    """Two ReLU layers under Kaiming fan-in initialization: critical from the start."""
    return mlp(2, "relu", 32, inputs=inputs, classes=classes, name="well-2-relu")


def sample_report(**fields: Any) -> ConditioningReport:
    """A complete, valid conditioning report of a two-block network, with ``fields`` replaced
    (e.g. ``sample_report(score=-2.0, verdict="prune")``): for tests of code that stores,
    serves or decides on reports without running the engine."""
    report = ConditioningReport(
        spec_hash="0" * 64,
        score=-0.75,
        verdict="keep",
        reasons=[],
        scales={"blocks.0.0.weight": 1.25, "blocks.1.0.weight": 0.8},
        blocks=[
            BlockReport(
                index=0,
                apjn_before=2.0,
                apjn_after=1.0,
                log_apjn_before=0.693,
                log_apjn_after=0.0,
                k_before=1.5,
                k_after=1.0,
                apjn_target=1.0,
                unit=0,
            ),
            BlockReport(
                index=1,
                apjn_before=0.5,
                apjn_after=1.0,
                log_apjn_before=-0.693,
                log_apjn_after=0.0,
                k_before=0.7,
                k_after=1.0,
                apjn_target=1.0,
                unit=1,
            ),
        ],
        layers=[
            LayerReport(
                name="blocks.0.0",
                fan_in=16,
                fan_out=8,
                gamma=0.9,
                nu=1.1,
                hessian_top_eigenvalue=3.0,
                hessian_chain_rule=2.5,
                hessian_mean_sq_singular=0.4,
                kappa_d=1.2,
            ),
        ],
        tuning=TuningReport(
            steps=3,
            converged=True,
            status="converged",
            message="",
            loss="kernel",
            loss_curve=[1.0, 0.1],
            seconds=0.25,
            device="cpu",
        ),
        components={},
        penalties={},
        thresholds=Thresholds(),
        options=ConditionOptions(output_std=0.5),  # a report holds the number applied, never "auto"
        environment=Environment(
            batch_size=8, n_vectors=1, seed=0, device="cpu", data="gaussian", versions={}, diagnostics=[]
        ),
    )
    return report.model_copy(update=fields) if fields else report

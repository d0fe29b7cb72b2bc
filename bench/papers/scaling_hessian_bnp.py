"""Figures of docs/scaling-hessian-bnp.md: ``python -m bench.papers.scaling_hessian_bnp`` (CPU, ~1 min).

Every number in that document's "Measured" sections comes from this script (seeds fixed).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F

from nas import build_model
from nas.build import PreflightNet
from worker.engine.balancing import balance
from worker.engine.bnp import BNP, neuron_hessian_condition
from worker.engine.hessian import hessian_figures
from worker.engine.scaling import measure_scaling, spread

sys.path.insert(0, "tests/worker/engine")
from test_scaling import BN_MLP, CNN_POOLING, NORMED_RESNET, RESIDUAL_MLP, STRIDED_CNN, _mlp  # noqa: E402


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _x(shape: list[int], n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, *shape, generator=_g(seed))


def prop3() -> None:
    print("## Prop. 3: log spread (max log - min log) of gamma across layers, MLP 128-512-64-256-10")
    print("| scheme | gamma intrinsic | gamma extrinsic | nu | hidden layers only (nu) |")
    print("|---|---|---|---|---|")
    for scheme in ("fan_in", "fan_out", "arithmetic", "geometric"):
        f = measure_scaling(build_model(_mlp(scheme), seed=0), _x([128], 256), generator=_g(1))
        row = [
            spread([v.gamma_intrinsic for v in f]),
            spread([v.gamma_extrinsic for v in f]),
            spread([v.nu for v in f]),
            spread([v.nu for v in f[:-1]]),
        ]
        print(f"| {scheme} | " + " | ".join(f"{v:.3f}" for v in row) + " |")


def forms() -> None:
    print("\n## Appendix C / Prop. 3: gamma_intrinsic / gamma_extrinsic and nu / gamma_extrinsic per layer")
    for name, spec in (("mlp geometric", _mlp("geometric")), ("strided cnn", STRIDED_CNN)):
        f = measure_scaling(build_model(spec, seed=0), _x(spec["input_shape"], 256), generator=_g(1))
        print(
            f"- {name}: "
            + ", ".join(
                f"{v.name} {v.gamma_intrinsic / v.gamma_extrinsic:.2f} / {v.nu / v.gamma_extrinsic:.2f}" for v in f
            )
        )


def fig1() -> None:
    print("\n## Fig. 1: gamma_extrinsic / E[(G r)^2], strided CNN, batch 1, 4 seeds x 8 samples")
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for seed in range(4):
        net = build_model(STRIDED_CNN, seed=seed)
        for b in range(8):
            xb = _x([3, 12, 12], 1, seed=100 * seed + b)
            s = measure_scaling(net, xb, generator=_g(7 * seed + b))
            h = hessian_figures(net, xb, iterations=1, probes=8, generator=_g(7 * seed + b))
            for a, c in zip(s, h, strict=True):
                pairs[a.name].append((a.gamma_extrinsic, c.mean_sq_singular_value))
    for name, v in pairs.items():
        ratios = [a / c for a, c in v]
        print(
            f"- {name}: ratio of means {sum(a for a, _ in v) / sum(c for _, c in v):.2f}, median ratio "
            f"{statistics.median(ratios):.2f}"
        )


def _msv(net: PreflightNet, x: torch.Tensor, per_sample: bool) -> list[float]:
    if not per_sample:
        return [h.mean_sq_singular_value for h in hessian_figures(net, x, iterations=1, probes=4, generator=_g(1))]
    sums: dict[str, float] = defaultdict(float)
    for b in range(x.shape[0]):
        for h in hessian_figures(net, x[b : b + 1], iterations=1, probes=4, generator=_g(b)):
            sums[h.name] += h.mean_sq_singular_value
    return list(sums.values())


def fig2() -> None:
    print("\n## Fig. 2: log spread of the Hessian blocks' mean squared singular values, MLP 128-512-64-256-10")
    print("| scheme | batch 1 (mean over 16 samples) | batch 32 (mean loss) |")
    print("|---|---|---|")
    x = _x([128], 32)
    for scheme in ("fan_in", "fan_out", "arithmetic", "geometric"):
        net = build_model(_mlp(scheme), seed=0)
        print(f"| {scheme} | {spread(_msv(net, x[:16], True)):.2f} | {spread(_msv(net, x, False)):.2f} |")


def balancing() -> None:
    print("\n## Balancing: log spread of gamma before -> after, output std before -> after, seconds")
    cases: list[tuple[str, dict[str, Any], list[int]]] = [
        ("mlp fan_in 64-512-64-256-10", _mlp("fan_in", d_in=64), [64]),
        ("cnn maxpool + GAP", CNN_POOLING, [3, 16, 16]),
        ("batchnorm mlp", BN_MLP, [32]),
        ("residual mlp (beta 0.5)", RESIDUAL_MLP, [64]),
        ("resnet with GroupNorm + LayerNorm, torch_default", NORMED_RESNET, [3, 16, 16]),
    ]
    for name, spec, shape in cases:
        model, x = build_model(spec, seed=3), _x(shape, 128)
        t = time.perf_counter()
        b = balance(model, x, generator=_g(5))
        seconds = time.perf_counter() - t
        rebuilt = build_model(spec, scales=b.scales, seed=3)
        msv = (
            [math.nan, math.nan]
            if "batchnorm" in str(spec)
            else [spread(_msv(m, x[:16], True)) for m in (model, rebuilt)]
        )  # BatchNorm has no batch of 1
        msv32 = [spread(_msv(m, x[:32], False)) for m in (model, rebuilt)]
        print(
            f"- {name}: gamma {b.gamma_log_spread_before:.2f} -> {b.gamma_log_spread_after:.4f}; std "
            f"{b.output_std_before:.3f} -> {b.output_std_after:.4f}; "
            f"Hessian mean-sq-singular spread batch 1: {msv[0]:.2f} -> {msv[1]:.2f}, batch 32: {msv32[0]:.2f} -> "
            f"{msv32[1]:.2f}; {b.passes} forward-backward passes; converged {b.converged}; {seconds:.1f} s"
        )
    print("\n## Balancing with target='hessian' (8 fixed probes, batch 32): same nets")
    for name, spec, shape in cases:
        model, x = build_model(spec, seed=3), _x(shape, 128)
        t = time.perf_counter()
        b = balance(model, x, generator=_g(5), target="hessian")
        seconds = time.perf_counter() - t
        rebuilt = build_model(spec, scales=b.scales, seed=3)
        b1 = math.nan if "batchnorm" in str(spec) else spread(_msv(rebuilt, x[:16], True))
        print(
            f"- {name}: converged {b.converged}; gamma spread {b.gamma_log_spread_after:.2f}; Hessian spread batch 1 "
            f"{b1:.2f}, "
            f"batch 32 {spread(_msv(rebuilt, x[:32], False)):.2f}; std {b.output_std_after:.4f}; {b.passes} passes "
            f"(HVPs counted); {seconds:.1f} s"
        )


def remark5() -> None:
    print("\n## Remark 5: |top - chain rule| / |top| per layer (float64, 100 iterations)")
    for act, scale in (("relu", 1.0), ("gelu", 3.0), ("tanh", 3.0)):
        spec = {
            "input_shape": [6],
            "blocks": [
                {
                    "layers": [
                        {"type": "linear", "out": 5},
                        {"type": act},
                        {"type": "linear", "out": 4},
                        {"type": act},
                    ]
                },
                {"layers": [{"type": "linear", "out": 3}]},
            ],
        }
        net = build_model(spec, scales={"blocks.0.0.weight": scale, "blocks.0.2.weight": scale}, seed=1).double()
        f = hessian_figures(net, _x([6], 16, 1).double(), iterations=100, probes=1, generator=_g(2))
        print(
            f"- {act} (weights x{scale:g}): "
            + ", ".join(f"{abs(v.top_eigenvalue - v.chain_rule_estimate) / abs(v.top_eigenvalue):.1e}" for v in f)
        )


def bnp() -> None:
    print("\n## Section 5.1: log(kappa_before / kappa_after) / log(kappa(D)^2), 5 neurons, 2 seeds")
    x = (_x([20], 256) + 1.0) * torch.logspace(-2, 0.5, 20)
    y = torch.randint(0, 10, (256,), generator=_g(1))
    for hidden in (None, 8, 16, 64):
        layers = [] if hidden is None else [{"layers": [{"type": "linear", "out": hidden}, {"type": "relu"}]}]
        spec = {
            "input_shape": [20],
            "blocks": [*layers, {"layers": [{"type": "linear", "out": 10}]}],
        }
        for layer in ["blocks.0.0"] + ([] if hidden is None else ["blocks.1.0"]):
            out = []
            for seed in range(2):
                net = build_model(spec, seed=seed)
                for i in range(5):
                    c = neuron_hessian_condition(net, x, layer, i, y)
                    out.append((c.kappa_d, math.log(c.improvement) / math.log(c.kappa_d**2)))
            exps = [e for _, e in out]
            print(
                f"- hidden {hidden}, layer {layer}: kappa(D) "
                f"{min(k for k, _ in out):.1f}-{max(k for k, _ in out):.1f}, "
                f"exponent {min(exps):.2f} to {max(exps):.2f}"
            )
    print("\n## BNP vs SGD: cross-entropy after 100 full-batch steps (initial value first)")
    target = (x[:, -5:].sum(1) > x[:, -5:].sum(1).median()).long() + 2 * (x[:, 0] > x[:, 0].median()).long()
    spec = {
        "input_shape": [20],
        "blocks": [
            {"layers": [{"type": "linear", "out": 16}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 10}]},
        ],
    }
    for lr in (0.05, 0.5, 2.0):
        row = []
        for wrap in (False, True):
            net = build_model(spec, seed=0)
            opt: Any = torch.optim.SGD(net.parameters(), lr=lr)
            opt = BNP(opt, net) if wrap else opt
            first = last = math.nan
            for step in range(100):
                opt.zero_grad()
                loss = F.cross_entropy(net(x), target)
                loss.backward()
                opt.step()
                first = float(loss.detach()) if step == 0 else first
                last = float(loss.detach())
            row.append(f"{'BNP' if wrap else 'SGD'} {first:.3f} -> {last:.3f}")
        print(f"- lr {lr}: " + "; ".join(row))


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(
        prog="python -m bench.papers.scaling_hessian_bnp", description=(__doc__ or "").split("\n\n")[0]
    ).parse_args()  # no options: --help says what it does, where it ran at once
    torch.set_num_threads(1)
    for part in (prop3, forms, fig1, fig2, balancing, remark5, bnp):
        part()

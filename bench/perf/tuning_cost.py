"""Cost of conditioning against the cost of training, in one run (issue 3, "Performance").

    python -m bench.perf.tuning_cost [--device auto|cpu|cuda] [--batch N] [--repeats N] [--quick]

For an MLP, a VGG-style CNN and a residual net of realistic size, and (``--models
nasbench201,vit_tiny``) a NAS-Bench-201 network and ViT-tiny (format 1.1), at the same batch:

* time of one AutoInit tuning step (one forward with detached block boundaries and the
  batched vector-Jacobian products of ``N_v = 2`` vectors, through the functional twin)
  over the time of one training step (forward, cross-entropy, backward, SGD step);
* peak memory of each over the model-and-batch baseline: CUDA's peak allocation on a GPU;
  on the CPU the peak resident set (``VmHWM`` after resetting it through
  ``/proc/self/clear_refs``), each measured in a fresh child process;
* the whole ``worker.engine.condition`` (balancing, tuning, diagnostics) in training steps.

Targets: tuning step <= 4x time and <= 3x memory; whole conditioning <= 20 training steps.
Prints a JSON document and a Markdown table (the figures in docs/conditioning.md).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from nas import build_model
from worker.engine.autoinit import conditioning_mode
from worker.engine.jacobian import block_jacobians
from worker.engine.structure import analyse


def _cbr(c: int) -> list[dict[str, Any]]:
    return [{"type": "conv2d", "out": c, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]


def mlp_spec() -> dict[str, Any]:
    blocks = [{"layers": [{"type": "linear", "out": 1024}, {"type": "relu"}]} for _ in range(6)]
    return {
        "name": "mlp-6x1024",
        "input_shape": [784],
        "blocks": [*blocks, {"layers": [{"type": "linear", "out": 10}]}],
    }


def vgg_spec() -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for c in (64, 128, 256, 512):
        blocks += [
            {"layers": _cbr(c)},
            {"layers": _cbr(c)},
            {"layers": [{"type": "maxpool", "kernel": 2}]},
        ]
    blocks.append({"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]})
    return {"name": "vgg11-bn-cifar", "input_shape": [3, 32, 32], "blocks": blocks}


def resnet_spec() -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"layers": _cbr(64)}]
    width = 64
    for stage, c in enumerate((64, 128, 256)):
        for i in range(2):
            stride = 2 if stage > 0 and i == 0 else 1
            body = [
                {"type": "conv2d", "out": c, "kernel": 3, "stride": stride},
                {"type": "batchnorm"},
                {"type": "relu"},
                {"type": "conv2d", "out": c, "kernel": 3},
                {"type": "batchnorm"},
            ]
            shortcut = (
                []
                if stride == 1 and c == width
                else [
                    {"type": "conv2d", "out": c, "kernel": 1, "stride": stride},
                    {"type": "batchnorm"},
                ]
            )
            blocks.append(
                {
                    "layers": [
                        {"type": "residual", "body": body, "shortcut": shortcut},
                        {"type": "relu"},
                    ]
                }
            )
            width = c
    blocks.append({"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]})
    return {"name": "resnet14-cifar", "input_shape": [3, 32, 32], "blocks": blocks}


def nasbench201_spec_best() -> dict[str, Any]:
    """NAS-Bench-201's best CIFAR-10 cell in the benchmark's skeleton: 16 channels, 5 cells per stage."""
    from nas.space import nasbench201_spec

    best = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"
    return {**nasbench201_spec(best, channels=16, cells_per_stage=5), "name": "nasbench201-best-c16-n5"}


def vit_tiny_spec() -> dict[str, Any]:
    """ViT-tiny's body (width 192, 12 pre-LN blocks, 3 heads, MLP ratio 4) on 3x32x32 images in patches
    of 4 (64 tokens); at 224x224 its attention maps exceed the default activation limit."""
    from nas.space import vit_spec

    return {"name": "vit-tiny-32", **vit_spec(12, 192, 3, 4.0, 4, (3, 32, 32), 10)}


SPECS: dict[str, Callable[[], dict[str, Any]]] = {
    "mlp": mlp_spec,
    "vgg": vgg_spec,
    "resnet": resnet_spec,
    "nasbench201": nasbench201_spec_best,
    "vit_tiny": vit_tiny_spec,
}


def _setup(name: str, batch: int, device: torch.device) -> tuple[Any, torch.Tensor, torch.Tensor]:
    spec = SPECS[name]()
    model = build_model(spec, seed=0).to(device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn((batch, *spec["input_shape"]), generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    return model, x, y


def _steps(model: Any, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> dict[str, Callable[[], None]]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gains = [t for unit in analyse(model) for gain in unit.gains for t in gain.tensors]
    base = dict(model.named_parameters()) | dict(model.named_buffers())
    generator = torch.Generator(device=device).manual_seed(0)

    def train() -> None:
        model.train()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    def tune() -> None:
        with conditioning_mode(model), torch.no_grad():
            params = {n: base[n] * 1.0 for n in gains}  # the twin's a * theta, as the tuner builds it
            block_jacobians(model, x, 2, generator, params)

    return {"train": train, "tune": tune}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_step(fn: Callable[[], None], device: torch.device, repeats: int) -> float:
    """Median wall time of ``repeats`` calls after two warm-up calls."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_child(name: str, kind: str, batch: int, device_name: str) -> int:
    """Peak bytes one step adds over the model + batch baseline (run in a fresh process)."""
    device = torch.device(device_name)
    model, x, y = _setup(name, batch, device)
    fn = _steps(model, x, y, device)[kind]
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        _sync(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # reset VmHWM to the current resident set
    base = _rss_kib("VmRSS")
    fn()
    return (_rss_kib("VmHWM") - base) * 1024


def peak_memory(name: str, kind: str, batch: int, device: torch.device) -> int:
    out = subprocess.run(
        [sys.executable, "-m", "bench.perf.tuning_cost", "--child", name, kind, str(batch), str(device)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip().splitlines()[-1])


def whole_conditioning(
    name: str, batch: int, device: torch.device
) -> tuple[float, dict[str, float], int, dict[str, Any]]:
    """Wall time of ``worker.engine.condition`` with default options (the 20-step budget), its
    per-stage times, the AutoInit steps it took and its budget figures (counted and timed)."""
    from worker.engine import condition

    start = time.perf_counter()
    report = condition(SPECS[name](), options={"batch_size": batch, "device": str(device)})
    _sync(device)
    budget = dict(report.tuning.budget) | {
        "hessian_measured": report.tuning.hessian_measured,
        "layers": len(report.layers),
        "balancing_mode": report.tuning.balancing_mode,
        "autoinit_status": report.tuning.status,
    }
    return time.perf_counter() - start, report.tuning.timings, report.tuning.steps, budget


def run(device: torch.device, batch: int, repeats: int, names: list[str]) -> dict[str, Any]:
    rows = []
    for name in names:
        model, x, y = _setup(name, batch, device)
        steps = _steps(model, x, y, device)
        t_train = time_step(steps["train"], device, repeats)
        t_tune = time_step(steps["tune"], device, repeats)
        m_train, m_tune = (peak_memory(name, k, batch, device) for k in ("train", "tune"))
        sys.stderr.write(
            f"{name}: train {t_train:.3f} s, tune {t_tune:.3f} s, memory {m_train >> 20} / {m_tune >> 20} MiB\n"
        )
        t_condition, stages, tuning_steps, budget = whole_conditioning(name, batch, device)
        sys.stderr.write(f"{name}: whole conditioning {t_condition:.1f} s\n")
        rows.append(
            {
                "model": SPECS[name]()["name"],
                "parameters": sum(p.numel() for p in model.parameters()),
                "batch": batch,
                "train_step_s": t_train,
                "tune_step_s": t_tune,
                "time_ratio": t_tune / t_train,
                "train_peak_mib": m_train / 2**20,
                "tune_peak_mib": m_tune / 2**20,
                "memory_ratio": m_tune / m_train if m_train > 0 else math.nan,
                "condition_s": t_condition,
                "condition_in_train_steps": t_condition / t_train,
                "autoinit_steps": tuning_steps,
                "stages_in_train_steps": {k: v / t_train for k, v in stages.items()},
                "stages_in_own_steps": {k: v / stages["step"] for k, v in stages.items()} if stages.get("step") else {},
                "budget": budget,
            }
        )
    return {
        "device": str(device) if device.type == "cpu" else torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "targets": {"time_ratio": 4.0, "memory_ratio": 3.0, "condition_in_train_steps": 20.0},
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Device: {result['device']} (torch {result['torch']}, {result['threads']} threads).",
        "",
        "| model | params | batch | train step | tuning step | time ratio | train peak | tuning peak | memory ratio | "
        "whole conditioning | of which AutoInit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['model']} | {r['parameters'] / 1e6:.2f} M | {r['batch']} | {r['train_step_s'] * 1e3:.0f} ms | "
            f"{r['tune_step_s'] * 1e3:.0f} ms | {r['time_ratio']:.2f}x | {r['train_peak_mib']:.0f} MiB | "
            f"{r['tune_peak_mib']:.0f} MiB | {r['memory_ratio']:.2f}x | {r['condition_s']:.1f} s = "
            f"{r['condition_in_train_steps']:.1f} steps | {r['stages_in_train_steps'].get('autoinit', math.nan):.1f} "
            "steps "
            f"({r['autoinit_steps']} tuning steps) |"
        )
    lines += [
        "",
        "Stages of the whole conditioning, in training steps (bench median step; in the report's own timed step; "
        "counted):",
        "",
    ]
    for r in result["rows"]:
        own, b = r.get("stages_in_own_steps", {}), r.get("budget", {})
        stages = ", ".join(
            f"{k} {v:.1f} / {own.get(k, math.nan):.1f} / {b.get('counted_' + k, math.nan) or 0:.1f}"
            for k, v in r["stages_in_train_steps"].items()
        )
        lines.append(
            f"- {r['model']}: {stages}; total counted {b.get('counted_steps', math.nan):.1f}, timed (own step) "
            f"{b.get('timed_steps', math.nan):.1f}; Hessian layers "
            f"{'all' if b.get('hessian_measured') is None else b['hessian_measured']} of {b.get('layers')}; "
            f"balancing {b.get('balancing_mode')}; AutoInit {r['autoinit_steps']} steps, {b.get('autoinit_status')}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.tuning_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=None, help="default 128 on CUDA, 32 on the CPU")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="mlp,vgg,resnet")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (1 on a loaded machine)")
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "KIND", "BATCH", "DEVICE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, kind, batch, device_name = args.child
        sys.stdout.write(f"{peak_memory_child(name, kind, int(batch), device_name)}\n")
        return 0
    from worker.engine.pipeline import select_device

    if args.threads:
        torch.set_num_threads(args.threads)

    device = select_device(args.device)
    batch = args.batch or (128 if device.type == "cuda" else 32)
    result = run(device, batch, args.repeats, args.models.split(","))
    sys.stdout.write(json.dumps(result, indent=2) + "\n\n" + markdown(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

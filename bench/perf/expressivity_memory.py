"""``python -m bench.perf.expressivity_memory``: the peak memory of NASWOT's kernel, summed layer by
layer (``worker.engine.expressivity.measure_expressivity``) against every unit's code kept to the end.

Each way runs in a fresh process on the same conv net and batch (``--layers`` 3x3 convolutions of
``--channels`` channels with ReLU at ``--size`` x ``--size``, a batch of ``--batch``) and reports the
growth of the process's peak resident memory over what one plain forward pass of the network already
reached, and the two ``log |K_H|`` figures (they must be equal: the kernel's entries are integer
counts). docs/conditioning.md, section 10, quotes it.
"""

from __future__ import annotations

import argparse
import resource
import sys
from multiprocessing import get_context
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["main", "measure"]


def _network(layers: int, channels: int) -> nn.Module:
    blocks: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1), nn.ReLU()]
    for _ in range(layers - 1):
        blocks += [nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _kept_codes(model: nn.Module, x: Tensor) -> float:
    """The earlier form: every activation unit's code kept, one kernel at the end."""
    from worker.engine.expressivity import ACTIVATIONS, activation_kernel_log_det

    codes: list[Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, i, _o: codes.append((i[0].detach() > 0).flatten(1)))
        for m in model.modules()
        if isinstance(m, ACTIVATIONS)
    ]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return activation_kernel_log_det(torch.cat(codes, dim=1))


def measure(args: tuple[str, int, int, int, int]) -> dict[str, Any]:
    """One way, in this (fresh) process: the peak memory it adds over a plain forward pass."""
    way, layers, channels, size, batch = args
    from worker.engine.expressivity import measure_expressivity

    torch.set_num_threads(1)
    torch.manual_seed(0)  # the same weights in both processes
    model = _network(layers, channels).eval()
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(x)
    before = _peak_mb()
    naswot = measure_expressivity(model, x).naswot if way == "summed" else _kept_codes(model, x)
    return {"way": way, "added_mb": _peak_mb() - before, "naswot": naswot}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.expressivity_memory", description=__doc__)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    units = args.layers * args.channels * args.size**2
    print(f"{args.layers} conv layers x {args.channels} channels at {args.size}x{args.size}, batch {args.batch}")
    print(f"activation units N_A = {units:,}; every code kept: {args.batch * units / 2**20:.0f} MB of booleans")
    results = []
    for way in ("kept codes", "summed"):
        with get_context("spawn").Pool(1) as pool:  # a fresh process: its own peak
            results.append(pool.apply(measure, ((way, args.layers, args.channels, args.size, args.batch),)))
    for r in results:
        print(f"  {r['way']:10s}: peak memory +{r['added_mb']:.0f} MB over a forward pass, log|K_H| {r['naswot']:.6f}")
    kept, summed = results
    print(f"ratio (summed / kept codes): {summed['added_mb'] / max(kept['added_mb'], 1e-9):.3f}")
    return 0 if kept["naswot"] == summed["naswot"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Tuning variants on the development set: which conditioning trains best, under both protocols.

``python -m bench.ablations.tuning_variants --variant NAME [--variant ...]`` conditions each
development candidate (benchmark v2's ``dev_set``; never the frozen test set) with a variant's
options, trains the result under protocols S and W at seed 0, and compares the final training
loss with benchmark v2's cached runs of the same candidates (the spec's init, LSUV, the shipped
tuned init). LSUV under W is not part of benchmark v2's development stages and is trained here
as the variant ``lsuv``. Results are cached per (variant, candidate) under
``bench/results/variants/`` so a run resumes; this is how the engine's defaults were chosen
(docs/conditioning.md, "Choosing the defaults"). ``--paired A B`` prints the share of candidates on
which A ends lower than B with a bootstrap interval (``--accuracy``: a higher test accuracy), where
A or B may also be a rule that picks a variant by architecture (``RULES``); ``--set fresh`` (or
``fresh2``, ``fresh3``: a second and a third sample) runs on ``bench.v2.candidates.fresh_set``,
fresh candidates of the development families, to test on candidates no choice has seen what was
found by looking at the development set. ``--seeds k`` trains k seeds per candidate (seed k
conditions the spec's draw at seed k and trains in seed k's batch order, as benchmark v2's seeds
do); a comparison reads each candidate at the seeds both runs have, the median over them.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import torch

import nas
from bench.pipeline.candidates import Candidate
from bench.pipeline.inits import initialize
from bench.pipeline.run import engine_version, read_json, write_json
from bench.v2.analysis import load_rows, truth
from bench.v2.candidates import FRESH_SAMPLES, dev_set, fresh_set
from bench.v2.protocols import PROTOCOLS, epochs_for, train
from bench.v2.stages import BATCH, dataset, same_inputs
from worker.engine.centering import centering_shifts

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "variants"
CACHE = ROOT / "bench" / "results" / "v2"

# name -> condition options (over the engine's defaults); "lsuv" is the peer, not a variant. The cached
# runs of the variants that leave output_std at its default were measured when it was 0.5 for every
# network; rerun now, they would take "auto" (1.0 with BatchNorm)
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},  # the engine's defaults as they are
    "gaussian": {"draw": "gaussian"},
    "orthogonal": {"draw": "orthogonal"},
    "orthogonal_out1": {"draw": "orthogonal", "output_std": 1.0},
    "orthogonal_nobalance": {"draw": "orthogonal", "balance": False},
    # output std 0.5 for every network, the default until "auto" (1.0 with BatchNorm) replaced it
    "orthogonal_nv1": {"draw": "orthogonal", "n_vectors": 1, "output_std": 0.5},
    "orthogonal_out1_nv1": {"draw": "orthogonal", "output_std": 1.0, "n_vectors": 1},
    "orthogonal_nv1_nobalance": {"draw": "orthogonal", "n_vectors": 1, "balance": False},
    "orthogonal_nv1_jacobian": {"draw": "orthogonal", "n_vectors": 1, "loss": "log"},
    "orthogonal_nv1_tol03": {"draw": "orthogonal", "n_vectors": 1, "tolerance": 0.3},
    "orthogonal_nv1_unitvar": {"draw": "orthogonal", "n_vectors": 1, "norm_inputs": "unit_variance"},
    "orthogonal_nv1_fvbase": {"draw": "orthogonal", "n_vectors": 1, "forward_variance": "base"},
    "orthogonal_nv1_fvfinal": {"draw": "orthogonal", "n_vectors": 1, "forward_variance": "final"},
    "orthogonal_out1_nv1_unitvar": {
        "draw": "orthogonal",
        "n_vectors": 1,
        "output_std": 1.0,
        "norm_inputs": "unit_variance",
    },
}


def _zeroed(spec: Any, scales: dict[str, float], where: str) -> dict[str, float]:
    """``scales`` with some tensors multiplied by 0 (their weights and biases start at zero):
    ``head``, the network's last weighted layer, so that the logits start at 0 (timm's and many
    vision recipes' zero-initialized classifier); ``branches``, the last weighted or norm layer of
    every residual body, so that each block starts as its shortcut (Goyal et al. 2017's zero-gamma,
    SkipInit)."""
    model = nas.build_model(spec, seed=0)
    weighted = (torch.nn.Linear, torch.nn.Conv2d, torch.nn.BatchNorm2d, torch.nn.BatchNorm1d, torch.nn.LayerNorm)
    targets: list[str] = []
    if where == "head":
        last = [n for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
        targets = last[-1:]
    else:
        for name, module in model.named_modules():
            if type(module).__name__ == "Residual":
                inner = [f"{name}.body.{n}" for n, m in module.body.named_modules() if isinstance(m, weighted)]
                targets += inner[-1:]
    out = dict(scales)
    for t in targets:
        for kind in ("weight", "bias"):
            if getattr(model.get_submodule(t), kind, None) is not None:
                out[f"{t}.{kind}"] = 0.0
    return out


# name -> (the variant whose conditioning it starts from, what it zeroes after): not engine options
ZEROED: dict[str, tuple[str, str]] = {
    "orthogonal_nv1_zerohead": ("orthogonal_nv1", "head"),
    "orthogonal_nv1_zerobranch": ("orthogonal_nv1", "branches"),
}


# name -> the variant whose conditioning it starts from; the tuned network's outputs are then
# centered (``worker.engine.centering``) after the engine's report, which the probe did not see: how
# the centering was measured before it became the engine's default (docs/conditioning.md section 8)
CENTERED: dict[str, str] = {"default_centered": "no_centering"}
VARIANTS["no_centering"] = {"center_outputs": False}  # the engine's defaults before the centering


# name -> the start it equalizes ("default": the engine's tuned init; "lsuv": LSUV's): every linear or conv
# layer's output channels brought to one std on the conditioning batch, the layer's RMS of them
# (``_equalized_``), then centered; the tuned init keeps AutoInit's layer scales, LSUV's is at unit variance
# (Kraehenbuehl et al. 2016's data-dependent init), the baseline that would explain a gain
EQUALIZED: dict[str, str] = {"default_equalized": "default", "lsuv_equalized": "lsuv", "ddi": "spec"}
# "ddi": the spec's own init with every channel put at unit std and zero mean in the same one pass
# (Kraehenbuehl et al. 2016's data-dependent init without LSUV's loop): what is left without either tuning
_UNIT_STD = {"ddi"}

_CHANNEL_CLIP = 10.0  # no channel's std moved by more than this factor either way


def _equalized_(model: torch.nn.Module, x: torch.Tensor, std_target: float | None = None) -> torch.nn.Module:
    """``model`` with every linear or conv layer's output channels rescaled, in place, to the
    layer's RMS of their stds on ``x`` (so the layer's overall scale stays where the start put it;
    ``std_target``, when given, instead),
    then shifted to zero mean per channel where the layer has a bias; one forward pass, each layer
    measured on its corrected inputs, as ``worker.engine.centering`` measures. A channel constant on
    the batch (std 0) cannot be rescaled and is left as it is."""
    from worker.engine._moments import forward_hooks, preserved_buffers
    from worker.engine.autoinit import conditioning_mode

    conv = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    done: set[str] = set()

    def equalize(name: str, module: Any, channel_dim: int) -> Any:  # a linear or conv layer
        def hook(_module: torch.nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
            if name in done:  # a shared layer: its weights already changed at the first call
                return out
            done.add(name)
            dim = channel_dim % out.dim()
            flat = out.detach().double().movedim(dim, 0).reshape(out.shape[dim], -1)
            std, mean = flat.std(dim=1, unbiased=False), flat.mean(dim=1)
            live = torch.isfinite(std) & torch.isfinite(mean) & (std > 0)
            if not bool(live.any()):
                return out
            target = std[live].pow(2).mean().sqrt() if std_target is None else torch.tensor(std_target).double()
            factor = torch.where(live, (target / std).clamp(1 / _CHANNEL_CLIP, _CHANNEL_CLIP), torch.ones_like(std))
            shift = torch.where(live, -mean * factor, torch.zeros_like(mean))
            weight = module.weight
            weight.mul_(factor.to(weight.dtype).view(-1, *([1] * (weight.dim() - 1))))
            shape = [1] * out.dim()
            shape[dim] = -1
            out = out * factor.to(out.dtype).view(shape)
            if module.bias is not None:
                module.bias.mul_(factor.to(module.bias.dtype)).add_(shift.to(module.bias.dtype))
                out = out + shift.to(out.dtype).view(shape)
            return out

        return hook

    hooks = [
        (module, equalize(name, module, 1 if isinstance(module, conv) else -1))
        for name, module in model.named_modules()
        if isinstance(module, (torch.nn.Linear, *conv))
    ]
    with forward_hooks(hooks), conditioning_mode(model), preserved_buffers(model), torch.no_grad():
        model(x)
    return model


def _tuned_init(result: dict[str, Any]) -> dict[str, Any]:
    """``nas.build_model``'s arguments for a variant's tuned network (no bias shifts in a result
    cached before the centering; no seed in one of seed 0)."""
    return {
        "scales": result["scales"],
        "seed": result.get("seed", 0),
        "draw": result["draw"],
        "bias_shifts": result.get("bias_shifts"),
    }


def _condition(candidate: Candidate, options: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    from worker.engine import condition

    x, y = dataset(candidate.dataset).batch(BATCH)
    report = condition(candidate.spec, data={"x": x, "y": y}, options={"seed": seed} | options)
    budget = report.tuning.budget if report.tuning else {}
    return {
        "scales": dict(report.scales),
        "draw": report.environment.draw,  # the weights the scales were tuned on
        "bias_shifts": report.bias_shifts,  # added after the scales
        "score": report.score,
        "verdict": report.verdict,
        "counted": float(budget.get("counted_steps") or 0.0),  # every stage, the probe included
        "engine": engine_version(),
    } | ({"seed": seed} if seed else {})


def _conditioned(name: str, candidate: Candidate, seed: int = 0) -> dict[str, Any]:
    """A variant's conditioning of ``candidate`` (no training) at the engine's ``seed``: its tuned
    init, score and cost."""
    if name in ZEROED:
        base, where = ZEROED[name]
        result = _condition(candidate, VARIANTS[base], seed)
        result["scales"] = _zeroed(candidate.spec, result["scales"], where)
    else:
        result = _condition(candidate, VARIANTS[CENTERED.get(name, name)], seed)
    if name in CENTERED:
        tuned = nas.build_model(candidate.spec, **_tuned_init(result))
        result["bias_shifts"] = centering_shifts(tuned, dataset(candidate.dataset).batch(BATCH)[0])
    return result


def _revalidated(name: str, candidate: Candidate, cached: dict[str, Any]) -> dict[str, Any] | None:
    """``cached`` (a run of another engine) with this engine's conditioning figures, when this
    engine tunes the same init within 1e-6 (``bench.v2.stages``' rule), so that an engine change
    that keeps the numbers retrains nothing; None when the init of any of its training seeds moved
    (the run is stale)."""
    if name in ("lsuv", "lsuv_centered") or name in EQUALIZED:
        return None  # LSUV's carry no engine and are never stale; an equalized one reruns when its engine changes
    figures = ("score", "verdict", "counted", "engine")
    kept = dict(cached)
    for seed, entry in _seed_entries(cached):
        fresh = _conditioned(name, candidate, seed)
        if not same_inputs(_tuned_init(entry), _tuned_init(fresh)):
            return None
        if seed:
            kept["seeds"] = {**kept["seeds"], str(seed): entry | {key: fresh[key] for key in figures}}
        else:
            kept |= {key: fresh[key] for key in figures}
    return kept


def _start(name: str, candidate: Candidate, seed: int) -> tuple[Any, dict[str, Any]]:
    """A factory of ``name``'s starting network on ``candidate`` at ``seed`` (the spec's draw and the
    engine's or LSUV's seed, as benchmark v2's seed fixes the weights) and the conditioning's figures."""
    if name in ("lsuv", "lsuv_centered") or name in EQUALIZED:
        x, y = dataset(candidate.dataset).batch(BATCH)
        if name == "default_equalized":
            result: dict[str, Any] = _conditioned("default", candidate, seed)
            start_model: torch.nn.Module = nas.build_model(candidate.spec, **_tuned_init(result))
        else:
            result = {"seed": seed} if seed else {}
            start_model = nas.build_model(candidate.spec, seed=seed)
            if EQUALIZED.get(name, name) != "spec":
                start_model = initialize(EQUALIZED.get(name, name), start_model, x, y, seed=seed)
        if name in EQUALIZED:
            start_model = _equalized_(start_model, x, 1.0 if name in _UNIT_STD else None)
            result.pop("bias_shifts", None)  # the state below holds them; rebuilt from it, not from the scales
        state = start_model.state_dict()

        def make() -> torch.nn.Module:
            model = nas.build_model(candidate.spec, seed=0)
            model.load_state_dict(state)
            return model

        return make, result
    result = _conditioned(name, candidate, seed)

    def make_tuned() -> torch.nn.Module:
        return nas.build_model(candidate.spec, **_tuned_init(result))

    return make_tuned, result


def _seed_entries(result: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The training seeds a cached result holds, in order, each with its entry: seed 0 at the
    result's top level (once trained), the others under ``seeds`` (each with its own conditioning's
    figures)."""
    first = [(0, result)] if "sgd" in result else []
    return first + sorted((int(k), v) for k, v in result.get("seeds", {}).items())


def _seed_count(result: dict[str, Any]) -> int:
    return len(_seed_entries(result))


def run_one(args: tuple[str, dict[str, Any], int]) -> str:
    """Conditions ``candidate`` with variant ``name`` and trains it under both protocols, at every
    seed below ``seeds`` its cached run lacks; seed k conditions the spec's draw at seed k and trains
    with the batch order of seed k, as benchmark v2's seeds do."""
    name, cand, seeds = args
    torch.set_num_threads(1)
    candidate = Candidate(**cand)
    path = OUT / name / f"{candidate.id}.json"
    result: dict[str, Any] = read_json(path) if path.exists() else {}
    note = ""
    if result and result.get("engine", engine_version()) != engine_version():
        kept = _revalidated(name, candidate, result)
        result = {} if kept is None else kept  # a stale run trains anew
        if kept is not None:
            write_json(path, kept)
            note = f" kept (the same init under engine {engine_version()})"
    if _seed_count(result) >= seeds:
        return f"{name} {candidate.id}{note or ' cached'}"
    start = time.perf_counter()
    data = dataset(candidate.dataset)
    for seed in range(_seed_count(result), seeds):
        make, conditioned = _start(name, candidate, seed)
        runs = {}
        for protocol in ("sgd", "adamw"):
            epochs = epochs_for(candidate.dataset, PROTOCOLS[protocol])
            run = train(make, data, PROTOCOLS[protocol], epochs, seed=seed).to_json()
            runs[protocol] = {key: run[key] for key in ("final_loss", "test_accuracy", "best", "diverged")}
        if seed == 0:
            result = conditioned | runs
        else:
            result.setdefault("seeds", {})[str(seed)] = conditioned | runs
    result["seconds"] = result.get("seconds", 0.0) + time.perf_counter() - start
    write_json(path, result)
    return f"{name} {candidate.id}{note} {_seed_count(result)} seeds, {result['seconds']:.1f} s"


def _median_over_seeds(
    entry: dict[str, Any] | None, protocol: str, seeds: int | None, figure: Callable[[dict[str, Any]], float]
) -> float:
    """The median of ``figure`` over the runs of ``entry`` under ``protocol``, its first ``seeds``
    training seeds (None: all); nan when it has no run under ``protocol``."""
    if not entry or protocol not in entry:
        return math.nan
    runs = [e[protocol] for _, e in _seed_entries(entry)][:seeds]
    return float(np.median([figure(run) for run in runs]))


def _final_loss(run: dict[str, Any]) -> float:
    loss = run["final_loss"][run["best"]]
    return math.inf if loss is None or all(run["diverged"]) else float(loss)


def _test_error(run: dict[str, Any]) -> float:
    accuracy = run["test_accuracy"][run["best"]]
    return math.inf if accuracy is None or all(run["diverged"]) else 1.0 - float(accuracy)


def _best_loss(entry: dict[str, Any] | None, protocol: str, seeds: int | None = None) -> float:
    """The final training loss at the best rate (inf when every rate diverged), the median over the
    first ``seeds`` training seeds, as benchmark v2's ground truth takes it."""
    return _median_over_seeds(entry, protocol, seeds, _final_loss)


def _best_error(entry: dict[str, Any] | None, protocol: str, seeds: int | None = None) -> float:
    """One minus the test accuracy at the rate whose training loss was best (benchmark v2's choice
    of rate): lower is better, as for the loss; inf when every rate diverged; the median over the
    first ``seeds`` training seeds."""
    return _median_over_seeds(entry, protocol, seeds, _test_error)


def compare(names: list[str], candidates: list[Candidate]) -> None:
    """Share of candidates where each variant ends at a lower training loss than each reference."""
    rows = {r.candidate.id: r for r in load_rows(candidates, "dev", CACHE, 1, 1.0)}
    for protocol in ("sgd", "adamw"):
        print(f"\nprotocol {protocol}")
        for name in names:
            if name == "lsuv":
                continue
            wins: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            counted = []
            for c in candidates:
                mine = read_json(p) if (p := OUT / name / f"{c.id}.json").exists() else None
                if mine is None or (name in ZEROED and not _zeroed(c.spec, {}, ZEROED[name][1])):
                    continue  # a zeroing with nothing to zero is the base variant itself: no comparison
                counted.append(mine.get("counted", math.nan))
                loss = _best_loss(mine, protocol)
                row = rows[c.id]
                lsuv_entry = read_json(q) if (q := OUT / "lsuv" / f"{c.id}.json").exists() else None
                from_spec, shipped = truth(row, protocol, "spec"), truth(row, protocol, "tuned")
                refs: dict[str, float | None] = {
                    "spec": from_spec["loss"] if from_spec else None,
                    "shipped": shipped["loss"] if shipped else None,
                    "lsuv": _best_loss(lsuv_entry, protocol),
                }
                for peer in ("lsuv_centered", "default"):  # when cached: the centered peer, the engine's tuning
                    if peer != name and (q := OUT / peer / f"{c.id}.json").exists():
                        refs[peer] = _best_loss(read_json(q), protocol)
                for ref, other in refs.items():
                    if other is None or math.isnan(other) or (math.isinf(loss) and math.isinf(other)):
                        continue
                    wins[ref][c.family].append(float(loss < other))
                    wins[ref]["ALL"].append(float(loss < other))
                    if math.isfinite(loss) and math.isfinite(other) and loss > 0 and other > 0:
                        ratios[ref][c.family].append(math.log(loss / other))
            line = [f"  {name:24s} n={len(counted):3d} cost {np.median(counted) if counted else math.nan:5.1f}"]
            for ref, fams in wins.items():
                overall = fams.pop("ALL")
                per = " ".join(f"{f}:{np.mean(v):.2f}" for f, v in sorted(fams.items()))
                line.append(f"    vs {ref:8s} {np.mean(overall):.2f} (n={len(overall)})  {per}")
                # how much, not only how often: the median log ratio of the final losses per family
                size = " ".join(f"{f}:{np.median(v):+.2f}" for f, v in sorted(ratios[ref].items()))
                line.append(f"    {'':11s} median log(loss / {ref}) per family  {size}")
            print("\n".join(line))


def _cached_runs(names: list[str], c: Candidate) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The cached runs of ``names`` and of LSUV on ``c``; None unless all of them are cached."""
    paths = [OUT / n / f"{c.id}.json" for n in names]
    lsuv = OUT / "lsuv" / f"{c.id}.json"
    if not lsuv.exists() or not all(p.exists() for p in paths):
        return None
    return [read_json(p) for p in paths], read_json(lsuv)


def choose_by_score(first: str, second: str, candidates: list[Candidate]) -> None:
    """Per candidate, keep the variant whose report scored better (the probe: the score is its
    monotone fit) and compare with LSUV; next to it, each variant alone and an oracle that keeps
    the one that trained better. No training beyond the two variants' cached runs."""
    for protocol in ("sgd", "adamw"):
        wins: dict[str, list[float]] = defaultdict(list)
        for c in candidates:
            if (runs := _cached_runs([first, second], c)) is None:
                continue
            (a, b), lsuv = runs
            la, lb, ref = _best_loss(a, protocol), _best_loss(b, protocol), _best_loss(lsuv, protocol)
            sa, sb = a.get("score"), b.get("score")
            picked = la if sa is not None and (sb is None or sa >= sb) else lb
            for key, loss in ((first, la), (second, lb), ("oracle", min(la, lb)), ("chosen by score", picked)):
                if not (math.isinf(loss) and math.isinf(ref)):
                    wins[key].append(float(loss < ref))
        shares = ", ".join(f"{k} {np.mean(v):.2f} (n={len(v)})" for k, v in wins.items())
        print(f"protocol {protocol}: share ending lower than LSUV: {shares}")


def _has_conv(spec: Any) -> bool:
    """Whether a spec (or any part of it) holds a convolution."""
    if isinstance(spec, dict):
        return str(spec.get("type", "")).startswith("conv") or any(_has_conv(v) for v in spec.values())
    return isinstance(spec, list) and any(_has_conv(v) for v in spec)


# name -> (the variant for networks with a convolution, the variant for those without): a start chosen by
# the architecture alone, read from the two variants' cached runs (no training of its own)
RULES: dict[str, tuple[str, str]] = {
    "conv_ddi": ("ddi", "default"),
    # the equalization where the three samples before showed its gain (networks with a convolution), the
    # shipped tuning elsewhere: stated before the third sample ran, where its training-loss gain held and
    # its test-accuracy gain did not, so it is not the default (docs/conditioning.md, section 8)
    "conv_equalized": ("default_equalized", "default"),
}


def _cached_run(name: str, candidate: Candidate) -> dict[str, Any] | None:
    """A variant's cached run on ``candidate``, a rule's through the variant it picks; None if not run."""
    if name in RULES:
        name = RULES[name][0] if _has_conv(candidate.spec) else RULES[name][1]
    path = OUT / name / f"{candidate.id}.json"
    return read_json(path) if path.exists() else None


def paired_shares(
    first: str, second: str, candidates: list[Candidate], resamples: int = 2000, accuracy: bool = False
) -> dict[str, dict[str, Any]]:
    """Per protocol: the share of candidates on which ``first`` ends at a lower training loss than
    ``second`` (with ``accuracy``, a higher test accuracy; ties and both diverged count half), its 95 %
    bootstrap interval over candidates (``low``, ``high``), ``n``, and the share per ``family`` (no
    interval: a family has a few dozen candidates at most); a protocol no candidate has both runs of
    is left out. Each candidate is read at the training seeds both runs have (the median over them),
    ``seeds`` the fewest of any candidate."""
    measure = _best_error if accuracy else _best_loss
    rng = np.random.default_rng(0)
    out: dict[str, dict[str, Any]] = {}
    for protocol in ("sgd", "adamw"):
        wins: list[float] = []
        per_family: dict[str, list[float]] = defaultdict(list)
        least = math.inf
        for c in candidates:
            run_a, run_b = _cached_run(first, c), _cached_run(second, c)
            if run_a is not None and run_b is not None:
                common = min(_seed_count(run_a), _seed_count(run_b))  # both read at the same seeds
                least = min(least, common)
                a, b = measure(run_a, protocol, common), measure(run_b, protocol, common)
                wins.append(0.5 if a == b or (math.isinf(a) and math.isinf(b)) else float(a < b))
                per_family[c.family].append(wins[-1])
        if not wins:
            continue
        share = np.asarray(wins)
        boot = share[rng.integers(0, len(share), size=(resamples, len(share)))].mean(axis=1)
        low, high = np.quantile(boot, [0.025, 0.975])
        family = {f: float(np.mean(v)) for f, v in sorted(per_family.items())}
        out[protocol] = {"share": float(share.mean()), "low": float(low), "high": float(high), "n": len(share)}
        out[protocol]["seeds"] = int(least)  # the fewest training seeds a candidate was read at
        out[protocol]["family"] = family
    return out


def paired(first: str, second: str, candidates: list[Candidate], accuracy: bool = False) -> None:
    """Prints :func:`paired_shares`."""
    what = "a higher test accuracy than" if accuracy else "lower than"
    shares = paired_shares(first, second, candidates, accuracy=accuracy)
    for protocol in ("sgd", "adamw"):
        if (r := shares.get(protocol)) is None:
            print(f"protocol {protocol}: {first} against {second}: no candidate has both")
            continue
        seeds = f"{r['seeds']} seed" + ("s" if r["seeds"] > 1 else "")
        interval = f"{r['share']:.2f} [{r['low']:.2f}, {r['high']:.2f}] (n={r['n']}, {seeds})"
        families = " ".join(f"{f}:{v:.2f}" for f, v in r["family"].items())
        print(f"protocol {protocol}: {first} ends {what} {second} on {interval}  {families}")


def oracle(names: list[str], candidates: list[Candidate]) -> None:
    """An upper bound of choosing per candidate: the variant that trained best, against LSUV."""
    for protocol in ("sgd", "adamw"):
        wins = []
        for c in candidates:
            if (runs := _cached_runs(names, c)) is None:
                continue
            entries, lsuv = runs
            best, ref = min(_best_loss(e, protocol) for e in entries), _best_loss(lsuv, protocol)
            if not (math.isinf(best) and math.isinf(ref)):
                wins.append(float(best < ref))
        share = f"{np.mean(wins):.2f} (n={len(wins)})"
        print(f"protocol {protocol}: the best of {', '.join(names)} ends lower than LSUV on {share}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ablations.tuning_variants", description=__doc__)
    parser.add_argument(
        "--variant",
        action="append",
        required=True,
        help=f"one of {sorted(VARIANTS | ZEROED | CENTERED | EQUALIZED)}, lsuv, lsuv_centered (repeatable; "
        f"--paired also takes the rules {sorted(RULES)})",
    )
    parser.add_argument(
        "--set",
        choices=("dev", *FRESH_SAMPLES),
        default="dev",
        help="the development set, or a sample of fresh candidates of its families (bench.v2.candidates.fresh_set)",
    )
    parser.add_argument(
        "--seeds", type=int, default=1, help="training seeds per candidate (the batch order; the start is seed 0's)"
    )
    parser.add_argument("--family", action="append", default=[], help="development families (default: all)")
    parser.add_argument("--every", type=int, default=1, help="take every k-th candidate of each family")
    parser.add_argument(
        "--offset", type=int, default=0, help="starting from the family's i-th candidate (another sample of --every)"
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--compare-only", action="store_true")
    parser.add_argument(
        "--choose", nargs=2, metavar=("A", "B"), help="also: keep, per candidate, the better-scored of A and B"
    )
    parser.add_argument("--oracle", action="store_true", help="also: the better-trained of the variants, against LSUV")
    parser.add_argument(
        "--paired",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="also: the share of candidates where A ends lower than B, with a bootstrap interval (repeatable)",
    )
    parser.add_argument(
        "--accuracy", action="store_true", help="--paired compares test accuracy instead of the training loss"
    )
    args = parser.parse_args(argv)
    drawn = dev_set() if args.set == "dev" else fresh_set(sample=args.set)
    candidates = [c for c in drawn if not args.family or c.family in args.family]
    by_family: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        by_family[c.family].append(c)
    candidates = [c for fam in by_family.values() for c in fam[args.offset :: args.every]]
    names = args.variant
    if not args.compare_only:
        tasks = [(n, c.to_json(), args.seeds) for n in names for c in candidates]
        with get_context("spawn").Pool(args.jobs, initializer=os.nice, initargs=(5,)) as pool:
            for i, message in enumerate(pool.imap_unordered(run_one, tasks)):
                print(f"{i + 1}/{len(tasks)} {message}", flush=True)
    if args.set == "dev":  # the references of benchmark v2's cached runs exist for the development set only
        compare(names, candidates)
    if args.choose:
        choose_by_score(args.choose[0], args.choose[1], candidates)
    if args.oracle:
        oracle([n for n in names if n != "lsuv"], candidates)
    for first, second in args.paired:
        paired(first, second, candidates, accuracy=args.accuracy)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

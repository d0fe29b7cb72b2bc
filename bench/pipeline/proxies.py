"""Zero-cost NAS proxies, implemented from their papers' formulas.

Every proxy maps ``(model, x, y)`` to one float64 score in log space with the convention
higher = better; ``PROXIES`` records each one's direction fix and batch size. Scores that
cannot be computed (no activation to hook, a singular kernel, non-finite gradients) are
``nan``; the metrics rank ``nan`` as the worst score (``bench.pipeline.metrics``). A proxy that
overflows to ``+inf`` keeps it: that is what the proxy says.

Models are evaluated in train mode (BatchNorm on batch statistics), as the proxies' reference
code does; each proxy works on a deep copy so the caller's model is untouched.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from worker.engine.expressivity import ACTIVATIONS as _ACTIVATIONS
from worker.engine.expressivity import activation_kernel_log_det, correlation_floor

__all__ = ["PROXIES", "Proxy", "compute_proxies", "fingerprint_parts", "revisions"]

_WEIGHTED = (nn.Linear, nn.Conv2d)


def _log(value: float) -> float:
    """Natural log with the policy: ``log(0) = -inf``, negative or nan -> nan."""
    if math.isnan(value) or value < 0:
        return math.nan
    return -math.inf if value == 0 else math.log(value)


def _weights(model: nn.Module) -> list[Tensor]:
    return [m.weight for m in model.modules() if isinstance(m, _WEIGHTED)]


def _activation_codes(model: nn.Module, x: Tensor) -> Tensor:
    """Binary codes ``c_i`` (pre-activation > 0) of every activation unit, [N, N_A], of a copy in
    train mode: a forward of the caller's model in train mode would move its BatchNorm running
    statistics, which ``synflow`` (eval mode) reads next."""
    codes: list[Tensor] = []
    net = copy.deepcopy(model).train()

    def hook(_m: nn.Module, inputs: tuple[Tensor, ...], _out: Tensor) -> None:
        codes.append((inputs[0].detach() > 0).flatten(1))

    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, _ACTIVATIONS)]
    try:
        with torch.no_grad():
            net(x)
    finally:
        for h in handles:
            h.remove()
    return torch.cat(codes, dim=1) if codes else torch.empty(len(x), 0, dtype=torch.bool)


def naswot(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """NASWOT (Mellor et al. 2021, eq. 2): ``log |K_H|`` with
    ``K_H[i, j] = N_A - d_H(c_i, c_j)``, the count of units where samples i and j agree (the
    formula is the engine's, ``worker.engine.expressivity``; here on the caller's network)."""
    c = _activation_codes(model, x)
    return activation_kernel_log_det(c) if c.shape[1] else math.nan


def synflow(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Synaptic flow (Tanaka et al. 2020, eq. 2 with the all-ones input; Abdelfattah et al.
    2021): ``log sum_theta theta * dR/dtheta`` with ``R = 1^T f(1; |theta|)``, in float64,
    BatchNorm in eval mode (its running statistics are the identity at initialization)."""
    net = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.abs_()
    ones = torch.ones(1, *x.shape[1:], dtype=torch.float64, device=x.device)
    net(ones).sum().backward()
    with torch.no_grad():
        total = sum(float((p * p.grad).sum()) for p in net.parameters() if p.grad is not None)
    return _log(total)


def _loss_grads(model: nn.Module, x: Tensor, y: Tensor) -> tuple[list[Tensor | None], list[Tensor]]:
    """Cross-entropy gradients of every linear / conv weight of a copy, and those weights."""
    net = copy.deepcopy(model).train()
    weights = _weights(net)
    loss = F.cross_entropy(net(x), y)
    return list(torch.autograd.grad(loss, weights, allow_unused=True)), weights


def snip(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """SNIP saliency (Lee et al. 2019, eq. 6, summed as in Abdelfattah et al. 2021):
    ``log sum |theta * dL/dtheta|`` over linear and conv weights."""
    grads, weights = _loss_grads(model, x, y)
    pairs = [(w.detach(), g) for w, g in zip(weights, grads, strict=True) if g is not None]
    total = sum(float((w * g).abs().double().sum()) for w, g in pairs)
    return _log(total)


def grad_norm(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """grad_norm (Abdelfattah et al. 2021, section 3): ``log sum_l ||dL/dW_l||_2``."""
    grads, _ = _loss_grads(model, x, y)
    return _log(sum(float(g.double().norm()) for g in grads if g is not None))


def jacob_cov(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Jacobian covariance (Mellor et al. 2020 v1, eq. 2): with ``J_i = d(sum f(x_i))/dx_i``,
    ``Sigma_J`` their correlation matrix and ``sigma`` its eigenvalues,
    ``-sum_i [log(sigma_i + k) + 1 / (sigma_i + k)]``, ``k = 1e-5``. Already logarithmic."""
    net = copy.deepcopy(model).train()
    xr = x.clone().requires_grad_(True)
    (jac,) = torch.autograd.grad(net(xr).sum(), xr)
    j = jac.flatten(1).double()
    if not torch.isfinite(j).all():
        return math.nan
    corr = torch.corrcoef(j).nan_to_num(0.0)
    sigma = torch.linalg.eigvalsh(corr).clamp_min(0.0)
    k = 1e-5
    return float(-(torch.log(sigma + k) + 1.0 / (sigma + k)).sum())


def zico(model: nn.Module, x: Tensor, y: Tensor, batches: int = 4) -> float:
    """ZiCo (Li et al. 2023, eq. 9): ``sum_l log( sum_{theta in l} E[|g_theta|] / sd(g_theta) )``
    with mean and standard deviation over ``batches`` mini-batches of the input."""
    net = copy.deepcopy(model).train()
    weights = _weights(net)
    per_batch: list[list[Tensor]] = []
    for xb, yb in zip(x.chunk(batches), y.chunk(batches), strict=True):
        grads = torch.autograd.grad(F.cross_entropy(net(xb), yb), weights, allow_unused=True)
        per_batch.append(
            [torch.zeros_like(w) if g is None else g.double() for w, g in zip(weights, grads, strict=True)]
        )
    score = 0.0
    for layer in zip(*per_batch, strict=True):
        g = torch.stack(layer)  # [batches, *weight.shape]
        sd, mean_abs = g.std(dim=0, correction=0), g.abs().mean(dim=0)
        keep = sd > 0
        ratio = float((mean_abs[keep] / sd[keep]).sum())
        if ratio > 0:
            score += math.log(ratio)
    return score if math.isfinite(score) else math.nan


def meco(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """MeCo (Jiang et al. 2023, eq. 7): ``sum_l lambda_min(P(f^l))``, P the Pearson
    correlation matrix of linear / conv layer l's output: over the channels of one sample for a
    feature map (the paper's one-data form), over the samples' feature vectors for a vector output
    (our adaptation); the engine's per-layer formula (``worker.engine.expressivity.correlation_floor``),
    here on Linear and Conv2d layers in train mode, where the engine also reads Conv1d / Conv3d and
    turns dropout off: the same figure on networks of linear and 2-d conv layers without dropout.
    Kept linear: the sum is bounded in [0, L], and rank-deficient layers give exact zeros whose
    logarithm would rank round-off."""
    mins: list[float] = []

    def hook(_m: nn.Module, _inputs: tuple[Tensor, ...], out: Tensor) -> None:
        mins.append(correlation_floor(out, feature_map=out.dim() == 4))

    net = copy.deepcopy(model).train()
    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, _WEIGHTED)]
    try:
        with torch.no_grad():
            net(x)
    finally:
        for h in handles:
            h.remove()
    return float(sum(mins))


def swap(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """SWAP (Peng et al. 2024, eq. 3): ``log |{unique sample-wise activation patterns}|``:
    each unit's binary pattern (pre-activation > 0) across the S samples, counted once."""
    c = _activation_codes(model, x)
    if c.shape[1] == 0:
        return math.nan
    return math.log(torch.unique(c.T.to(torch.uint8), dim=0).shape[0])


def _spectral_norm(out: Tensor, inp: Tensor, iterations: int, generator: torch.Generator) -> float:
    """Largest singular value of ``d out / d inp`` by power iteration on ``J^T J``: ``J^T v``
    by a vector-Jacobian product, ``J u`` by differentiating ``v -> J^T v`` (double backward)."""
    v = torch.randn(out.shape, generator=generator, dtype=out.dtype).to(out.device).requires_grad_(True)
    (jtv,) = torch.autograd.grad(out, inp, v, create_graph=True)
    u = torch.randn(inp.shape, generator=generator, dtype=inp.dtype).to(inp.device)
    sigma = 0.0
    for _ in range(iterations):
        u = u / u.norm().clamp_min(1e-30)
        (ju,) = torch.autograd.grad(jtv, v, u, retain_graph=True)  # J u
        (u_next,) = torch.autograd.grad(out, inp, ju.detach(), retain_graph=True)  # J^T J u
        sigma = float(ju.norm())
        u = u_next.detach()
    return sigma


def az_trainability(model: nn.Module, x: Tensor, y: Tensor, iterations: int = 4) -> float:
    """AZ-NAS trainability (Lee & Ham 2024, eq. 7): ``-(1/L) sum_l (sigma_l + 1/sigma_l)``,
    sigma_l the spectral norm of the Jacobian between consecutive block boundaries; best
    when every sigma_l is 1. Returned as ``-log(-s_T / 2)`` so that 0 is the optimum and
    higher stays better."""
    net = copy.deepcopy(model).train()
    xr = x.clone().requires_grad_(True)
    _, boundaries = net(xr, return_boundaries=True)
    g = torch.Generator().manual_seed(0)
    terms: list[float] = []
    for inp, out in zip(boundaries[:-1], boundaries[1:], strict=True):
        sigma = _spectral_norm(out, inp, iterations, g)
        terms.append(sigma + 1.0 / sigma if sigma > 0 else math.inf)
    s_t = -sum(terms) / len(terms)
    return -_log(-s_t / 2.0) if math.isfinite(s_t) else -math.inf


def ntk_condition(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """TE-NAS trainability (Chen et al. 2021, eq. 3): ``-log kappa(Theta)`` with the empirical
    NTK ``Theta = G G^T``, G the per-sample gradients of the summed logits w.r.t. all
    weights, ``kappa = lambda_max / lambda_min``."""
    net = copy.deepcopy(model).train()
    weights = _weights(net)
    out = net(x)
    rows = []
    for i in range(len(x)):
        grads = torch.autograd.grad(out[i].sum(), weights, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([g.flatten() for g in grads if g is not None]).double())
    gram = torch.stack(rows)
    if not torch.isfinite(gram).all():
        return math.nan
    eig = torch.linalg.eigvalsh(gram @ gram.T)
    lo, hi = float(eig[0]), float(eig[-1])
    return -math.log(hi / lo) if lo > 0 and hi > 0 else -math.inf


def params(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Baseline: ``log`` of the trainable parameter count."""
    return _log(float(sum(p.numel() for p in model.parameters() if p.requires_grad)))


def flops(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Baseline: ``log`` of multiply-accumulates per sample (FLOPs = 2 MACs, same ranking)."""
    trace = getattr(model, "trace", None)
    return _log(float(trace.macs)) if trace is not None else math.nan


@dataclass(frozen=True)
class Proxy:
    name: str
    fn: Callable[[nn.Module, Tensor, Tensor], float]
    batch_size: int
    direction: str  # how the paper's raw value was turned into "higher = better", in log space
    citation: str
    # Bumped when a fix changes what the proxy returns, so that a cache reruns this proxy alone
    # (``revisions``, ``compute_proxies(kept=...)``).
    version: int = 1


PROXIES: dict[str, Proxy] = {
    p.name: p
    for p in (
        Proxy("naswot", naswot, 64, "log|K_H|, higher", "Mellor et al. 2021, eq. 2"),
        Proxy(
            "synflow",
            synflow,
            1,
            "log R-saliency sum, higher",
            "Tanaka et al. 2020; Abdelfattah et al. 2021",
            version=2,  # 2: naswot, which runs before it, no longer moves the BatchNorm statistics it reads
        ),
        Proxy("snip", snip, 64, "log saliency sum, higher", "Lee et al. 2019; Abdelfattah et al. 2021"),
        Proxy(
            "grad_norm",
            grad_norm,
            64,
            "log sum of layer gradient norms, higher",
            "Abdelfattah et al. 2021",
        ),
        Proxy(
            "jacob_cov",
            jacob_cov,
            64,
            "paper's log-eigenvalue sum, higher",
            "Mellor et al. 2020 (v1)",
        ),
        Proxy("zico", zico, 64, "sum of logs, higher (4 batches of 16)", "Li et al. 2023"),
        Proxy(
            "meco",
            meco,
            64,
            "sum of min eigenvalues (bounded, linear), higher",
            "Jiang et al. 2023",
        ),
        Proxy("swap", swap, 32, "log count of unique patterns, higher", "Peng et al. 2024"),
        Proxy(
            "az_trainability",
            az_trainability,
            32,
            "-log(mean(sigma+1/sigma)/2), higher",
            "Lee & Ham 2024",
        ),
        Proxy("ntk_cond", ntk_condition, 32, "-log kappa(NTK), higher", "Chen et al. 2021 (TE-NAS)"),
        Proxy("params", params, 0, "log count, higher", "baseline"),
        Proxy("flops", flops, 0, "log MACs, higher", "baseline"),
    )
}


def revisions() -> dict[str, int]:
    """The proxies revised since their first version, with their versions (``fingerprint_parts``)."""
    return {p.name: p.version for p in PROXIES.values() if p.version != 1}


def fingerprint_parts(stored: dict[str, int] | None = None) -> list[dict[str, int]]:
    """What a proxies cache's fingerprint adds for the revised proxies: this checkout's revisions, or
    ``stored``, those a stored result names (to check that only a revision made it stale); nothing
    while none is revised, so that caches from before versions existed stay valid."""
    revised = revisions() if stored is None else stored
    return [revised] if revised else []


def compute_proxies(
    model: nn.Module, x: Tensor, y: Tensor, kept: Mapping[str, Mapping[str, float]] | None = None
) -> dict[str, dict[str, float]]:
    """Every proxy on the first ``batch_size`` samples of ``(x, y)``: score, seconds and version.
    ``kept``: results stored earlier for the same model and batch; a proxy whose stored version is
    its current one is taken from there, not run again (an entry without a version is version 1)."""
    import time

    results: dict[str, dict[str, float]] = {}
    for proxy in PROXIES.values():
        old = (kept or {}).get(proxy.name)
        if old is not None and int(old.get("version", 1)) == proxy.version:
            results[proxy.name] = {**old, "version": proxy.version}
            continue
        n = proxy.batch_size or len(x)
        start = time.perf_counter()
        try:
            score = float(proxy.fn(model, x[:n], y[:n]))
        except (RuntimeError, torch.linalg.LinAlgError, ValueError):
            score = math.nan  # a proxy that crashes on a design scores as the worst
        results[proxy.name] = {"score": score, "seconds": time.perf_counter() - start, "version": proxy.version}
    return results

"""The attention temperature: the scale of the query-key product, set before Jacobian tuning.

An attention layer's output is linear in its value and output projections, so AutoInit tunes
those as gains (``worker.engine.structure``). Its query and key projections act differently: they
set the logits ``q k^T / sqrt(d_h)`` and so how peaked the softmax is, which no APJN target pins
down (the softmax is not positively homogeneous, and a saturated softmax can give any J). They are
set instead by a closed form of our own derivation (not from the papers): the logits are bilinear
in ``W_q`` and ``W_k`` (``q`` and ``k`` scale exactly with their projections, biases included),
so multiplying both by ``c`` multiplies the logits' variance by ``c^4``, and one forward pass finds
the ``c = var^(-1/4)`` that puts it at ``LOGIT_VARIANCE``. Unit variance is what the standard
transformer initialization gives on normalized tokens (Xavier query and key projections give
``q_i`` and ``k_i`` of unit variance, and the ``1/sqrt(d_h)`` makes their product unit variance):
a softmax that neither ignores its logits (variance near 0: uniform mixing) nor saturates to
one token (variance >> 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

import torch
from torch import Tensor

from nas.build import PreflightNet, SelfAttention
from worker.engine._moments import capture

__all__ = ["LOGIT_VARIANCE", "attention_temperatures", "logit_variances"]

LOGIT_VARIANCE = 1.0


@torch.no_grad()
def logit_variances(model: PreflightNet, x: Tensor, params: Mapping[str, Tensor] | None = None) -> dict[str, float]:
    """The second moment of every attention layer's logits ``q k^T / sqrt(d_h)`` on ``x`` (masked
    future positions left out), keyed by the attention module's name; ``params`` replaces tensors."""
    names = [name for name, m in model.named_modules() if isinstance(m, SelfAttention)]
    if not names:
        return {}
    modules = [cast(SelfAttention, model.get_submodule(name)) for name in names]
    projections = [m for attention in modules for m in (attention.q, attention.k)]
    with capture(projections) as records:
        if params:
            torch.func.functional_call(model, dict(params), (x,))
        else:
            model(x)
    out = {}
    for i, (name, attention) in enumerate(zip(names, modules, strict=True)):
        q, k = records[2 * i].y.double(), records[2 * i + 1].y.double()
        n, t, d = q.shape
        h = attention.heads
        qh = q.reshape(n, t, h, d // h).transpose(1, 2)
        kh = k.reshape(n, t, h, d // h).transpose(1, 2)
        logits = qh @ kh.transpose(-2, -1) / math.sqrt(d // h)
        if attention.causal:
            keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
            logits = logits[..., keep]
        out[name] = float(logits.pow(2).mean())
    return out


def attention_temperatures(
    model: PreflightNet, x: Tensor, variances: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Multipliers for the query and key projections (weights and biases) that put every attention
    layer's logit second moment at ``LOGIT_VARIANCE`` (``variances``: already measured, else
    measured here); a layer whose logits are zero or not finite keeps its scale (there is nothing
    to scale, or nothing to trust)."""
    scales: dict[str, float] = {}
    parameters = dict(model.named_parameters())
    for name, variance in (variances if variances is not None else logit_variances(model, x)).items():
        if not (math.isfinite(variance) and variance > 0):
            continue
        factor = (LOGIT_VARIANCE / variance) ** 0.25
        for projection in ("q", "k"):
            for tensor in ("weight", "bias"):
                if f"{name}.{projection}.{tensor}" in parameters:
                    scales[f"{name}.{projection}.{tensor}"] = factor
    return scales

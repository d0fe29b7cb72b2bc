"""Block-to-block average partial Jacobian norms (APJN) and forward second moments.

AutoInit (He, Doshi, Gromov; ``shared/papers/autoinit-jacobian-tuning.txt``) measures
criticality with the APJN of eq. 3 between adjacent block boundaries,

    J^{l,l+1} = 1/(|B| N_{l+1}) * sum_{x, x' in B} || d h^{l+1}(x') / d h^l(x) ||_F^2,

estimated with Gaussian vectors (eq. 7): for v ~ N(0, I),
E ||v^T d h^{l+1} / d h^l||^2 = ||d h^{l+1} / d h^l||_F^2. The paper prints the
normalisation as ``N_l``; eq. 3 and the ReLU result J = sigma_w^2 / 2 (eq. 20) need the size
of the *output* boundary, ``N_{l+1}``, which is what is used here.

Cost: one forward pass in which every boundary is detached and made a leaf, so each block's
graph is local; then one vector-Jacobian product of ``sum_l <v_l, h^{l+1}>`` gives every
``v_l^T d h^{l+1} / d h^l`` at once. The ``N_v`` vectors are batched through the backward
pass with ``is_grads_batched`` (vmap), falling back to a loop where vmap cannot be used.

Batch semantics (section 3, "General strategy"): each sample gets its own vector. Without
BatchNorm the samples do not interact, the cross terms vanish and the estimate is the
per-sample (|B| = 1) APJN averaged over the batch, with ``N_v * |B|`` independent terms. With
BatchNorm, independent per-sample vectors make the same single backward pass an unbiased
estimate of the full-batch sum of eq. 3 (cross-sample derivatives included), at the batch
size that training will use.

``K^l`` is the NNGP kernel diagonal of eq. 9 measured on the flattened boundary:
``mean_x mean_i h_i^l(x)^2``. All reductions are in float64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn
from torch.func import functional_call

__all__ = ["JacobianProfile", "block_jacobians", "has_batch_coupling", "run_blocks"]

_BATCH_COUPLING = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


@dataclass(frozen=True)
class JacobianProfile:
    """APJN and second moments at every block boundary of one network and batch.

    ``terms[mu, x, l]`` is the contribution of vector ``mu`` and sample ``x`` to block ``l``;
    ``apjn = terms.mean((0, 1))``. ``k[l]`` is K at boundary ``l`` (0 is the input).
    Non-finite forward values leave ``finite`` False and the affected entries NaN or inf.
    """

    terms: Tensor  # float64 [N_v, B, L]
    k: Tensor  # float64 [L + 1]
    batch_coupled: bool

    @property
    def apjn(self) -> Tensor:
        return self.terms.mean(dim=(0, 1))

    @property
    def log_apjn(self) -> Tensor:
        return torch.log(self.apjn)

    @property
    def log_k(self) -> Tensor:
        return torch.log(self.k)

    @property
    def log_apjn_stderr(self) -> Tensor:
        """Standard error of ``log apjn`` (delta method over the ``N_v * |B|`` terms; with
        BatchNorm the per-sample terms are correlated, so only the ``N_v`` sums are used)."""
        per = self.terms.sum(dim=1, keepdim=True) / self.terms.shape[1] if self.batch_coupled else self.terms
        flat = per.flatten(0, 1)
        n = flat.shape[0]
        if n < 2:
            return torch.full_like(self.apjn, math.inf)
        return flat.std(dim=0) / math.sqrt(n) / self.apjn

    @property
    def finite(self) -> bool:
        return bool(torch.isfinite(self.terms).all() and torch.isfinite(self.k).all())


def has_batch_coupling(model: nn.Module) -> bool:
    """True when a layer mixes samples in training mode (BatchNorm)."""
    return any(isinstance(m, _BATCH_COUPLING) for m in model.modules())


def run_blocks(
    model: nn.Module,
    x: Tensor,
    params: Mapping[str, Tensor] | None = None,
    detach: bool = True,
) -> tuple[list[Tensor], list[Tensor]]:
    """Forward through ``model.blocks`` one block at a time.

    Returns (block inputs, block outputs). With ``detach`` each input is a fresh leaf that
    requires grad, so a backward pass through output ``l`` stops at input ``l``. ``params``
    (names as in ``model.named_parameters()`` and ``named_buffers()``) replace the model's
    own tensors through ``torch.func.functional_call``: the AutoInit twin without a copy.
    """
    blocks = cast(nn.ModuleList, model.blocks)  # a PreflightNet's, or any model with blocks
    per_block = _split_by_block(params, len(blocks)) if params is not None else None
    inputs: list[Tensor] = []
    outputs: list[Tensor] = []
    h = x
    for i, block in enumerate(blocks):
        h_in = h.detach().requires_grad_(True) if detach else h
        inputs.append(h_in)
        h = block(h_in) if per_block is None else functional_call(block, per_block[i], (h_in,), strict=False)
        outputs.append(h)
    return inputs, outputs


def block_jacobians(
    model: nn.Module,
    x: Tensor,
    n_vectors: int = 2,
    generator: torch.Generator | None = None,
    params: Mapping[str, Tensor] | None = None,
) -> JacobianProfile:
    """Estimate every J^{l,l+1} (eq. 7) and K^l (eq. 9) from one forward pass and one
    batched vector-Jacobian product.

    >>> from nas import build_model
    >>> net = build_model({"input_shape": [8], "blocks": [{"layers": [{"type": "linear", "out": 8}]}]}, seed=0)
    >>> block_jacobians(net, torch.randn(4, 8), n_vectors=2).apjn.shape
    torch.Size([1])
    """
    if n_vectors < 1:
        raise ValueError(f"n_vectors must be at least 1, but got {n_vectors=}.")
    if x.dim() < 2 or x.shape[0] < 1:
        raise ValueError(f"x must be a batch [B, ...] with B >= 1, but got shape {tuple(x.shape)}.")
    coupled = has_batch_coupling(model)
    with torch.enable_grad():
        inputs, outputs = run_blocks(model, x, params)
        k = torch.stack([_second_moment(x)] + [_second_moment(o) for o in outputs])
        vectors = [
            torch.randn((n_vectors, *o.shape), generator=generator, device=o.device, dtype=o.dtype) for o in outputs
        ]
        grads = _batched_vjp(outputs, inputs, vectors)
    terms = torch.stack(
        [g.detach().double().pow(2).flatten(2).sum(-1) / (o[0].numel()) for g, o in zip(grads, outputs, strict=True)],
        dim=-1,
    )  # [N_v, B, L]: ||v^T dh^{l+1}/dh^l(x)||^2 / N_{l+1}
    return JacobianProfile(terms=terms, k=k.detach(), batch_coupled=coupled)


def _second_moment(h: Tensor) -> Tensor:
    return h.detach().double().pow(2).mean()


def _batched_vjp(outputs: list[Tensor], inputs: list[Tensor], vectors: list[Tensor]) -> list[Tensor]:
    """``v_l^T d out_l / d in_l`` for every block and vector: one vmapped backward pass, or
    one backward per vector where a layer has no batching rule."""
    live = [o.requires_grad for o in outputs]
    outs = [o for o, keep in zip(outputs, live, strict=True) if keep]
    ins = [i for i, keep in zip(inputs, live, strict=True) if keep]
    vecs = [v for v, keep in zip(vectors, live, strict=True) if keep]
    grads: list[Tensor | None]
    if not outs:
        grads = []
    else:
        try:
            grads = list(torch.autograd.grad(outs, ins, vecs, is_grads_batched=True, allow_unused=True))
        except RuntimeError:
            per_vector = [
                torch.autograd.grad(outs, ins, [v[m] for v in vecs], retain_graph=True, allow_unused=True)
                for m in range(vecs[0].shape[0])
            ]
            grads = [
                None if per_vector[0][j] is None else torch.stack([pv[j] for pv in per_vector])  # type: ignore[misc]
                for j in range(len(ins))
            ]
    result: list[Tensor] = []
    it = iter(grads)
    for inp, vec, keep in zip(inputs, vectors, live, strict=True):
        g = next(it) if keep else None
        # a block whose output does not depend on its input (constant) has a zero Jacobian
        result.append(torch.zeros((vec.shape[0], *inp.shape), device=inp.device, dtype=inp.dtype) if g is None else g)
    return result


def _split_by_block(params: Mapping[str, Tensor], n_blocks: int) -> list[dict[str, Tensor]]:
    """``blocks.3.0.weight`` -> block 3, key ``0.weight``."""
    per_block: list[dict[str, Tensor]] = [{} for _ in range(n_blocks)]
    for name, tensor in params.items():
        head, index, rest = name.split(".", 2)
        if head != "blocks":
            raise KeyError(f"parameter name {name!r} does not start with 'blocks.'")
        per_block[int(index)][rest] = tensor
    return per_block

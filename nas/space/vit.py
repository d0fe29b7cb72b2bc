"""A vision-transformer search space: pre-LN ViT blocks over patch tokens (format 1.1).

Dosovitskiy et al., "An Image is Worth 16x16 Words" (ICLR 2021), with the pre-LN block of
Xiong et al. (2020): ``x + attention(layernorm(x))``, then ``x + mlp(layernorm(x))``, the MLP
``linear(r D), gelu, linear(D)``. The image becomes ``(H / p)(W / p)`` tokens by a patch
embedding, a learned position embedding is added, and the head averages the tokens (no class
token), normalizes and classifies. Each transformer block is one block of the spec, so APJN and
K are measured between transformer blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nas.space.chains import (
    Layer,
    Spec,
    _check_fits_format,
    _check_n_classes,
    _check_range,
    _count,
    _positive_finite,
    _suggest_int,
    _Trial,
)
from nas.spec import MAX_BLOCKS, MAX_SPEC_INT

__all__ = ["ViTSpace", "transformer_block", "vit_spec"]


def transformer_block(width: int, heads: int, mlp_ratio: float = 4.0) -> list[Layer]:
    """The two residual layers of a pre-LN transformer block on [T, width]."""
    if not _positive_finite(mlp_ratio):  # NaN failed in round(), -1 quietly made an MLP of one unit
        raise ValueError(f"mlp_ratio must be a positive finite number, but got mlp_ratio={mlp_ratio!r}.")
    hidden = max(1, round(width * mlp_ratio))
    attention = [{"type": "layernorm", "over": "last"}, {"type": "attention", "heads": heads}]
    mlp = [
        {"type": "layernorm", "over": "last"},
        {"type": "linear", "out": hidden},
        {"type": "gelu"},
        {"type": "linear", "out": width},
    ]
    return [{"type": "residual", "body": attention}, {"type": "residual", "body": mlp}]


def vit_spec(
    depth: int,
    width: int,
    heads: int,
    mlp_ratio: float = 4.0,
    patch: int = 4,
    input_shape: Sequence[int] = (1, 28, 28),
    n_classes: int = 10,
    init: dict[str, Any] | None = None,
) -> Spec:
    """A ViT: patch embedding and position embedding, ``depth`` pre-LN blocks, a mean-token head.

    >>> import nas
    >>> nas.parse_spec(vit_spec(depth=2, width=32, heads=4)).blocks[1].layers[0].type
    'residual'
    """
    if not _count(depth, 0):  # range(-1) quietly made a ViT without transformer blocks
        raise ValueError(f"depth must be an integer of at least 0, but got depth={depth!r}.")
    embed = [{"type": "patch_embed", "patch": patch, "out": width}, {"type": "pos_embed"}]
    blocks: list[dict[str, Any]] = [{"name": "embed", "layers": embed}]
    blocks += [{"name": f"block{i}", "layers": transformer_block(width, heads, mlp_ratio)} for i in range(depth)]
    head = [{"type": "token_mean"}, {"type": "layernorm"}, {"type": "linear", "out": n_classes}]
    blocks.append({"name": "head", "layers": head})
    spec: Spec = {"format": "1.1", "input_shape": list(input_shape), "blocks": blocks}
    if init is not None:
        spec["init"] = init
    return spec


@dataclass(frozen=True)
class ViTSpace:
    """Depth, width, heads, MLP ratio and patch size of a ViT. ``head_dims`` are the per-head
    widths searched (heads = width / head_dim; each must divide every width, so a parameter's
    choices never change between trials); patch sizes that do not divide the image are refused
    up front."""

    input_shape: tuple[int, ...] = (1, 28, 28)
    n_classes: int = 10
    depth: tuple[int, int] = (1, 8)
    widths: tuple[int, ...] = (32, 64, 96, 128)
    head_dims: tuple[int, ...] = (16, 32)
    mlp_ratios: tuple[float, ...] = (2.0, 4.0)
    patches: tuple[int, ...] = (4, 7)

    def __post_init__(self) -> None:
        if len(self.input_shape) != 3 or not all(_count(size, 1) for size in self.input_shape):
            raise ValueError(f"input_shape must be [C, H, W], but got input_shape={list(self.input_shape)}.")
        _check_range("depth", self.depth, 1, integer=True, most=MAX_BLOCKS)
        _check_n_classes(self.n_classes)
        for name in ("widths", "head_dims", "patches"):  # Optuna refuses an empty choice only at the first trial
            choices = getattr(self, name)
            if not choices or any(not _count(v, 1) for v in choices):
                raise ValueError(f"{name} must be a non-empty list of positive integers, but got {name}={choices!r}.")
        h, w = self.input_shape[1:]
        for patch in self.patches:
            if h % patch or w % patch:  # each is a positive integer (checked above)
                raise ValueError(f"patch {patch} must divide the {h}x{w} image, but got patches={self.patches}.")
        for width in self.widths:  # fixed choices per parameter, as Optuna's samplers need
            if any(width % d for d in self.head_dims):
                raise ValueError(f"every head_dim must divide every width, but {width} and head_dims={self.head_dims}.")
        if not self.mlp_ratios or not all(_positive_finite(r) for r in self.mlp_ratios):  # inf, NaN: every trial failed
            raise ValueError(f"mlp_ratios must be positive finite numbers, but got mlp_ratios={self.mlp_ratios}.")
        hidden = max(self.widths) * max(self.mlp_ratios)  # the widest layer: a block's MLP
        if max(max(self.widths), hidden) > MAX_SPEC_INT:
            raise ValueError(
                f"widths={self.widths!r} times mlp_ratios={self.mlp_ratios!r} reach {hidden:.0f} units, beyond the "
                f"spec format's limit of {MAX_SPEC_INT}."
            )
        _check_fits_format(self)

    def __call__(self, trial: _Trial) -> Spec:
        depth = _suggest_int(trial, "depth", self.depth)
        width = trial.suggest_categorical("width", list(self.widths))
        head_dim = trial.suggest_categorical("head_dim", list(self.head_dims))
        ratio = trial.suggest_categorical("mlp_ratio", list(self.mlp_ratios))
        patch = trial.suggest_categorical("patch", list(self.patches))
        return vit_spec(depth, width, width // head_dim, ratio, patch, self.input_shape, self.n_classes)

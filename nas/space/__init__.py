"""Search spaces: specs from an Optuna trial.

A search space is any callable ``space(trial) -> dict`` that returns a spec; each ready-made
one is a frozen dataclass whose fields are the ranges searched:

- ``nas.space.chains``: :class:`MLPSpace`, :class:`CNNSpace`, :class:`ResidualSpace` (format 1.0)
  and the ``suggest_*`` helpers custom spaces compose.
- ``nas.space.nasbench201``: :class:`NASBench201Space`, the benchmark's 15,625 cells, and
  :func:`nasbench201_spec` from the benchmark's op indices or architecture string (format 1.1).
- ``nas.space.vit``: :class:`ViTSpace` (depth, width, heads, MLP ratio, patch size) and
  :func:`vit_spec` (format 1.1).
"""

from __future__ import annotations

from nas.space.chains import (
    ACTIVATIONS,
    INIT_SCHEMES,
    NORMS,
    CNNSpace,
    MLPSpace,
    ResidualSpace,
    SearchSpace,
    head_block,
    norm_layer,
    suggest_activation,
    suggest_init,
    suggest_norm,
)
from nas.space.nasbench201 import (
    NB201_EDGES,
    NB201_OPS,
    NASBench201Space,
    nasbench201_arch_string,
    nasbench201_cell,
    nasbench201_cells,
    nasbench201_spec,
    parse_nasbench201_arch,
)
from nas.space.vit import ViTSpace, transformer_block, vit_spec

__all__ = [
    "ACTIVATIONS",
    "CNNSpace",
    "INIT_SCHEMES",
    "MLPSpace",
    "NASBench201Space",
    "NB201_EDGES",
    "NB201_OPS",
    "NORMS",
    "ResidualSpace",
    "SearchSpace",
    "ViTSpace",
    "head_block",
    "nasbench201_arch_string",
    "nasbench201_cell",
    "nasbench201_cells",
    "nasbench201_spec",
    "norm_layer",
    "parse_nasbench201_arch",
    "suggest_activation",
    "suggest_init",
    "suggest_norm",
    "transformer_block",
    "vit_spec",
]

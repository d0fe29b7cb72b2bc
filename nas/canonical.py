"""Canonical form and content hash: one network, one hash.

Two specs that mean the same network (key order, whitespace, omitted vs explicit
defaults, a spec-wide init vs the same init on each layer, ``"same"`` vs the equivalent
integer padding, the order a cell's edges are listed in) get the same canonical JSON; any change
of meaning changes it. Names are labels, not meaning, and are left out. A spec that uses nothing
of format 1.1 has the canonical form (and hash) it had under v1, whatever its ``format`` says;
the fields 1.1 adds to v1 layers are written only where they differ from v1's meaning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from nas.options import HEAD_STD, HEAD_STD_NORMALIZED, ConditionOptions
from nas.spec import (
    SPEC_FORMAT_VERSION,
    ArchitectureSpec,
    AttentionLayer,
    CellLayer,
    Conv2dLayer,
    Init,
    Layer,
    LayerNormLayer,
    LinearLayer,
    NormLayer,
    PatchEmbedLayer,
    PoolLayer,
    ResidualLayer,
    needs_v11,
)

__all__ = [
    "DATA_OPTION",
    "NOT_IN_KEY",
    "applied_output_std",
    "cache_key",
    "canonical_dict",
    "canonical_json",
    "canonical_layer",
    "key_options",
    "spec_hash",
    "uses_v11",
]

# Where a job runs is the worker's choice among those its device preference allows; it is
# not part of what the job computes, so not part of the cache key.
NOT_IN_KEY = frozenset({"device"})
# Not an engine option but part of the key: the id of an uploaded data batch (POST /v1/batches)
DATA_OPTION = "data"


def canonical_dict(spec: ArchitectureSpec) -> dict[str, Any]:
    """The spec with every default filled in and every inherited init resolved."""
    return {
        "format": "1.1" if uses_v11(spec) else SPEC_FORMAT_VERSION,
        "input_shape": list(spec.input_shape),
        "blocks": [[canonical_layer(layer, spec.init) for layer in block.layers] for block in spec.blocks],
    }


def uses_v11(spec: ArchitectureSpec) -> bool:
    """Whether any layer, at any depth, needs format 1.1."""
    return any(_needs_v11_nested(layer) for block in spec.blocks for layer in block.layers)


def _needs_v11_nested(layer: Layer) -> bool:
    if needs_v11(layer):
        return True
    if isinstance(layer, ResidualLayer):
        return any(_needs_v11_nested(child) for child in (*layer.body, *layer.shortcut))
    return False  # a cell needs 1.1 itself


def canonical_json(spec: ArchitectureSpec) -> str:
    """Compact, key-sorted JSON of :func:`canonical_dict`."""
    if not isinstance(spec, ArchitectureSpec):  # a dict has no .blocks: say what to pass instead
        raise TypeError(f"expected a parsed spec, got a {type(spec).__name__}: pass nas.parse_spec(spec)")
    return json.dumps(_signless_zeros(canonical_dict(spec)), sort_keys=True, separators=(",", ":"), allow_nan=False)


def spec_hash(spec: ArchitectureSpec) -> str:
    """SHA-256 of the canonical JSON, hex: the same for every way of writing one network."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def _init(init: Init) -> dict[str, Any]:
    if init.scheme == "normal":
        assert init.std is not None
        return {"scheme": "normal", "std": init.std * init.gain}
    return {"scheme": init.scheme, "gain": init.gain}


def canonical_layer(layer: Layer, default_init: Init) -> dict[str, Any]:
    """One layer's canonical form, its children's included."""
    data = layer.model_dump(mode="json", by_alias=True)
    if isinstance(layer, (LinearLayer, Conv2dLayer, AttentionLayer, PatchEmbedLayer)):
        data["init"] = _init(layer.init or default_init)
    if isinstance(layer, LayerNormLayer) and layer.over == "all":
        del data["over"]  # v1's layernorm, written as v1 wrote it
    if isinstance(layer, Conv2dLayer):
        padding = layer.effective_padding
        if padding == "same" and layer.kernel % 2:
            padding = (layer.kernel - 1) // 2  # odd kernel, stride 1: "same" is symmetric
        data["padding"] = padding
    if isinstance(layer, PoolLayer):
        data["stride"] = layer.effective_stride
        if not layer.padding:
            del data["padding"]  # v1's pool
    if isinstance(layer, ResidualLayer):
        data["body"] = [canonical_layer(child, default_init) for child in layer.body]
        data["shortcut"] = [canonical_layer(child, default_init) for child in layer.shortcut]
    if isinstance(layer, CellLayer):
        edges = [  # signless before they are sorted: an op's -0.0 must not reorder the edges
            _signless_zeros({"from": e.source, "to": e.to, "op": [canonical_layer(op, default_init) for op in e.op]})
            for e in layer.edges
        ]
        data["edges"] = sorted(edges, key=lambda e: json.dumps(e, sort_keys=True))  # a set of edges, not a list
        if layer.nodes == 2:
            data["output"] = "last"  # node 1 alone: its concat is itself
    return data


def canonical_ops_json(ops: list[Layer], default_init: Init) -> str:
    """An edge's ops as the canonical JSON sorts them (-0.0 written 0.0), to order parallel edges
    the way the hash does."""
    return json.dumps(_signless_zeros([canonical_layer(op, default_init) for op in ops]), sort_keys=True)


def key_options(spec: ArchitectureSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical tuning options written as what the engine computes, so that options that
    compute the same report are one job and one cache entry: ``output_std`` "auto" as the number
    the engine applies to this network (``applied_output_std``), and ``synthetic_inputs``, which
    only a submission without data reads, at its default when data is given."""
    keyed = dict(options)
    if "output_std" in keyed:
        keyed["output_std"] = applied_output_std(spec, keyed["output_std"])
    if DATA_OPTION in keyed and "synthetic_inputs" in keyed:
        keyed["synthetic_inputs"] = ConditionOptions.model_fields["synthetic_inputs"].default
    return keyed


def applied_output_std(spec: ArchitectureSpec, output_std: float | str | None) -> float | str | None:
    """``output_std`` as the engine applies it to this network: "auto" is ``HEAD_STD_NORMALIZED``
    when a BatchNorm layer is anywhere in it (residual bodies and cell edges included), else
    ``HEAD_STD`` (what trained better on benchmark v2's development set, docs/conditioning.md
    section 8); a number or None as it is. The one rule for the engine and the job's key."""
    if output_std != "auto":
        return output_std
    normalized = any(_has_batchnorm(layer) for block in spec.blocks for layer in block.layers)
    return HEAD_STD_NORMALIZED if normalized else HEAD_STD


def _has_batchnorm(layer: Layer) -> bool:
    if isinstance(layer, NormLayer):
        return True
    if isinstance(layer, ResidualLayer):
        return any(_has_batchnorm(child) for child in (*layer.body, *layer.shortcut))
    if isinstance(layer, CellLayer):
        return any(_has_batchnorm(op) for edge in layer.edges for op in edge.op)
    return False


def cache_key(spec_hash: str, options: Mapping[str, Any], engine: str) -> str:
    """One job's identity: SHA-256 of the spec hash, the canonical (key-sorted) JSON of its
    tuning options (every default filled in, ``NOT_IN_KEY`` left out) and the engine's revision
    (``service.revision.engine_revision``): the same network tuned with other options, or by
    another engine, is another job."""
    canonical = json.dumps(_signless_zeros(options), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(f"{spec_hash}\n{canonical}\n{engine}".encode()).hexdigest()


def _signless_zeros(value: Any) -> Any:
    """``value`` with every -0.0 written as 0.0: a factor, a rate or a threshold of -0.0 means
    what 0 means, and JSON wrote it "-0.0", another hash and another job."""
    if isinstance(value, float) and value == 0.0:
        return 0.0
    if isinstance(value, Mapping):
        return {key: _signless_zeros(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_signless_zeros(item) for item in value]
    return value

"""Canonical form and content hash: one network, one hash.

Two specs that mean the same network (key order, whitespace, omitted vs explicit
defaults, a spec-wide init vs the same init on each layer, ``"same"`` vs the equivalent
integer padding) get the same canonical JSON; any change of meaning changes it. Names are
labels, not meaning, and are left out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from nas.shapes import conv_padding
from nas.spec import (
    SPEC_FORMAT_VERSION,
    ArchitectureSpec,
    Conv2dLayer,
    Init,
    Layer,
    LinearLayer,
    PoolLayer,
    ResidualLayer,
)

__all__ = ["DATA_OPTION", "NOT_IN_KEY", "cache_key", "canonical_dict", "canonical_json", "spec_hash"]

# Where a job runs is the worker's choice among those its device preference allows; it is
# not part of what the job computes, so not part of the cache key.
NOT_IN_KEY = frozenset({"device"})
# Not an engine option but part of the key: the id of an uploaded data batch (POST /v1/batches)
DATA_OPTION = "data"


def canonical_dict(spec: ArchitectureSpec) -> dict[str, Any]:
    """The spec with every default filled in and every inherited init resolved."""
    return {
        "format": SPEC_FORMAT_VERSION,
        "input_shape": list(spec.input_shape),
        "blocks": [[_layer(layer, spec.init) for layer in block.layers] for block in spec.blocks],
    }


def canonical_json(spec: ArchitectureSpec) -> str:
    """Compact, key-sorted JSON of :func:`canonical_dict`."""
    return json.dumps(canonical_dict(spec), sort_keys=True, separators=(",", ":"), allow_nan=False)


def spec_hash(spec: ArchitectureSpec) -> str:
    """SHA-256 of the canonical JSON, hex."""
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def _init(init: Init) -> dict[str, Any]:
    if init.scheme == "normal":
        assert init.std is not None
        return {"scheme": "normal", "std": init.std * init.gain}
    return {"scheme": init.scheme, "gain": init.gain}


def _layer(layer: Layer, default_init: Init) -> dict[str, Any]:
    data = layer.model_dump(mode="json")
    if isinstance(layer, (LinearLayer, Conv2dLayer)):
        data["init"] = _init(layer.init or default_init)
    if isinstance(layer, Conv2dLayer):
        padding = conv_padding(layer)
        if padding == "same" and layer.kernel % 2:
            padding = (layer.kernel - 1) // 2  # odd kernel, stride 1: "same" is symmetric
        data["padding"] = padding
    if isinstance(layer, PoolLayer):
        data["stride"] = layer.effective_stride
    if isinstance(layer, ResidualLayer):
        data["body"] = [_layer(child, default_init) for child in layer.body]
        data["shortcut"] = [_layer(child, default_init) for child in layer.shortcut]
    return data


def cache_key(spec_hash: str, options: Mapping[str, Any]) -> str:
    """One job's identity: SHA-256 of the spec hash and the canonical (key-sorted) JSON of its
    tuning options (every default filled in, ``NOT_IN_KEY`` left out): the same network tuned
    with other options is another job."""
    canonical = json.dumps(options, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(f"{spec_hash}\n{canonical}".encode()).hexdigest()

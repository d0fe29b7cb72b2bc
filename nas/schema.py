"""The published JSON Schema of spec format 1.1 (which accepts every 1.0 spec), generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from nas.spec import ArchitectureSpec

__all__ = ["spec_json_schema"]

SCHEMA_ID = "https://preflight.dev/schemas/architecture-spec-v1.1.json"


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) that every valid spec (1.0 or 1.1) satisfies.

    Shape rules (a linear after a conv needs a flatten, residual paths and the edges into a cell
    node agree, the format version a layer needs) are beyond JSON Schema; ``nas.parse_spec``
    checks them.
    """
    schema = _standard_bounds(ArchitectureSpec.model_json_schema())
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


# pydantic writes a constrained int under a validator (nas.spec.Integer) with its own keywords,
# which JSON Schema validators ignore: the published schema admitted a width of 0 or -5 heads
_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}


def _standard_bounds(node: Any) -> Any:
    """The schema with pydantic's ``gt`` / ``ge`` / ``lt`` / ``le`` of each subschema (a mapping
    with a ``type`` string) renamed to JSON Schema's keywords; property names stay as they are."""
    if isinstance(node, list):
        return [_standard_bounds(item) for item in node]
    if not isinstance(node, dict):
        return node
    is_schema = isinstance(node.get("type"), str)
    return {
        (_BOUNDS[key] if is_schema and key in _BOUNDS and isinstance(value, int | float) else key): _standard_bounds(
            value
        )
        for key, value in node.items()
    }

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
    schema = ArchitectureSpec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}

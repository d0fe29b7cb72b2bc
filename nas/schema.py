"""The published JSON Schema of spec format v1, generated from the pydantic models."""

from __future__ import annotations

from typing import Any

from nas.spec import ArchitectureSpec

__all__ = ["spec_json_schema"]

SCHEMA_ID = "https://preflight.dev/schemas/architecture-spec-v1.json"


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) that every valid v1 spec satisfies.

    Shape rules (a linear after a conv needs a flatten, residual paths agree) are beyond
    JSON Schema; ``nas.parse_spec`` checks them.
    """
    schema = ArchitectureSpec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}

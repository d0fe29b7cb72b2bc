"""What a NAS controller imports: the architecture spec, the model builder and (with the
service running) the REST client and Optuna integration."""

from __future__ import annotations

from nas.build import PreflightNet, build_model
from nas.canonical import canonical_dict, canonical_json, spec_hash
from nas.schema import spec_json_schema
from nas.spec import ArchitectureSpec, SpecError, SpecIssue
from nas.summary import ModelSummary, summarize
from nas.validate import SpecLimits, parse_spec

__all__ = [
    "ArchitectureSpec",
    "ModelSummary",
    "PreflightNet",
    "SpecError",
    "SpecIssue",
    "SpecLimits",
    "build_model",
    "canonical_dict",
    "canonical_json",
    "parse_spec",
    "spec_hash",
    "spec_json_schema",
    "summarize",
]

"""The one entry point that turns untrusted JSON into a valid, size-checked spec."""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from nas.shapes import MAX_NESTING, ShapeTrace, trace_shapes
from nas.spec import ArchitectureSpec, SpecError, issues_from_validation_error, load_spec_json
from nas.strict_json import UnencodableKeyError, refuse_unencodable_keys

__all__ = [
    "STEP_MAC_FACTOR",
    "SpecLimits",
    "check_limits",
    "conditioning_issue",
    "count_layers",
    "job_limit_issue",
    "parse_and_trace",
    "parse_spec",
    "unlabelled_probe_issue",
]

# multiply-accumulates of one training step per sample, in forward passes: forward, then the
# backward's gradients with respect to the inputs and to the weights
STEP_MAC_FACTOR = 3


class SpecLimits(BaseSettings):
    """Size limits enforced before anything is allocated (env ``PREFLIGHT_SPEC_*``)."""

    model_config = SettingsConfigDict(env_prefix="PREFLIGHT_SPEC_", frozen=True)

    max_blocks: int = Field(512, ge=1, le=512)
    max_layers: int = Field(4096, ge=1)
    max_parameters: int = Field(100_000_000, ge=1)
    max_activation_bytes: int = Field(4 * 2**30, ge=1)
    activation_batch_size: int = Field(256, ge=1)  # the least batch the activation limit assumes
    bytes_per_element: int = Field(4, ge=1)
    # compute of one training step at the job's batch (STEP_MAC_FACTOR x forward MACs x batch):
    # 1e13 is about ViT-B at batch 64 five times over, a few seconds of a large GPU
    max_step_macs: int = Field(10**13, ge=1)


def check_limits(spec: ArchitectureSpec, trace: ShapeTrace, limits: SpecLimits) -> None:
    """Reject a spec that is too large to build, with the limit and the setting that sets it."""
    if len(spec.blocks) > limits.max_blocks:
        raise SpecError.at(
            "blocks",
            f"{len(spec.blocks)} blocks exceed the limit of {limits.max_blocks} (setting PREFLIGHT_SPEC_MAX_BLOCKS)",
        )
    if len(trace.layers) > limits.max_layers:
        raise SpecError.at(
            "blocks",
            f"{len(trace.layers)} layers exceed the limit of {limits.max_layers} (setting PREFLIGHT_SPEC_MAX_LAYERS)",
        )
    if trace.parameters > limits.max_parameters:
        raise SpecError.at(
            "blocks",
            f"{trace.parameters:,} parameters exceed the limit of {limits.max_parameters:,} "
            "(setting PREFLIGHT_SPEC_MAX_PARAMETERS)",
        )
    activation_bytes = trace.activation_elements * limits.activation_batch_size * limits.bytes_per_element
    if activation_bytes > limits.max_activation_bytes:
        raise SpecError.at(
            "blocks",
            f"activations need {activation_bytes / 2**20:,.0f} MiB at batch "
            f"{limits.activation_batch_size}, over the limit of "
            f"{limits.max_activation_bytes / 2**20:,.0f} MiB (setting PREFLIGHT_SPEC_MAX_ACTIVATION_BYTES)",
        )


def count_layers(data: Any, cap: int) -> int:
    """The layers of a raw (unvalidated) spec, counted through residual paths and cell edges (each
    edge counts, with or without an op) and stopping past ``cap``: cheap enough to run before
    validation, so that an oversized spec is refused without the seconds pydantic would spend on
    100,000 layers (nor the tens of milliseconds of counting them all), and a server can decide
    where to validate a spec (inline when small, off the event loop when large)."""
    if not isinstance(data, dict) or not isinstance(data.get("blocks"), list):
        return 0
    stack: list[Any] = [block.get("layers") for block in data["blocks"] if isinstance(block, dict)]
    count = 0
    while stack and count <= cap:
        layers = stack.pop()
        if not isinstance(layers, list):
            continue
        for layer in layers:
            count += 1
            if count > cap:
                break
            if isinstance(layer, dict):
                stack.extend(layer.get(key) for key in ("body", "shortcut") if key in layer)
                edges = layer.get("edges")
                if isinstance(edges, list):  # an edge is a module even with no op (the identity)
                    count += len(edges)
                    stack.extend(edge.get("op") for edge in edges if isinstance(edge, dict))
    return count


def conditioning_issue(trace: ShapeTrace) -> str | None:
    """Why a valid spec cannot be conditioned, or None. A network without parameters is a valid
    spec (the format's tests build such cells), but nothing in it can be initialized or trained:
    the probe's backward pass would fail inside torch, and a queue would retry it."""
    if trace.parameters == 0:
        return (
            "the network has no parameters, so there is nothing to initialize, condition or train: "
            "add a weighted layer (linear, conv2d, attention, ...)"
        )
    return None


def unlabelled_probe_issue(trace: ShapeTrace) -> str | None:
    """Why the trainability probe cannot train this network without labels, or None. Without
    labels it draws random class labels over a vector of logits, or Gaussian targets for a single
    output (``worker.engine.probe``): an output that is not a vector has no such targets, and the
    probe would fail inside, leaving a "keep" verdict scored without it."""
    output = list(trace.boundaries[-1])
    if len(output) == 1 or math.prod(output) == 1:  # one output of any rank: Gaussian targets fit it
        return None
    return (
        f"the network's output has shape {output}, not a vector of class scores, so the trainability probe has "
        "no targets for it without labels: end the network with global_avgpool (or flatten) and linear, "
        f"condition on a data batch whose 'y' holds float targets of shape {output} per sample, or set the "
        "option probe_steps to 0"
    )


def job_limit_issue(trace: ShapeTrace, options: dict[str, Any], limits: SpecLimits) -> tuple[str, str] | None:
    """What a job's own batch sizes make too large, as (JSON path, message), or None: activation
    memory at the largest batch the job will run (``batch_size``, ``hessian_batch_size``, and never
    below ``activation_batch_size``), and the compute of one training step at ``batch_size``."""
    batches = {key: int(options[key]) for key in ("batch_size", "hessian_batch_size") if key in options}
    path, batch = max(batches.items(), key=lambda item: item[1], default=("", 0))
    if batch > limits.activation_batch_size:
        need = trace.activation_elements * batch * limits.bytes_per_element
        if need > limits.max_activation_bytes:
            return (
                f"options.{path}",
                f"{path}={batch} needs {need / 2**20:,.0f} MiB of activations for this spec, over the limit "
                f"of {limits.max_activation_bytes / 2**20:,.0f} MiB (setting PREFLIGHT_SPEC_MAX_ACTIVATION_BYTES); "
                "use a smaller batch",
            )
    batch = int(options.get("batch_size", 64))
    step = STEP_MAC_FACTOR * trace.macs * batch
    if step > limits.max_step_macs:
        return (
            "options.batch_size" if "batch_size" in options else "spec",
            f"one training step of this spec at batch {batch} is {step:.3g} multiply-accumulates, over the limit "
            f"of {limits.max_step_macs:.3g} (setting PREFLIGHT_SPEC_MAX_STEP_MACS)",
        )
    return None


def _json_kind(value: Any) -> str:
    """What JSON calls ``value``'s kind (a JSON reader sees "array", not Python's "list")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, (list, tuple)) else type(value).__name__


_TOO_DEEP = f"layers nest too deeply: residual layers and cells nest at most {MAX_NESTING} deep"


def parse_spec(
    data: ArchitectureSpec | dict[str, Any] | str | bytes,
    limits: SpecLimits | None = None,
) -> ArchitectureSpec:
    """Validate a spec (dict, JSON text or parsed model): fields, shapes through every
    layer, and size limits. Raises SpecError whose issues name the JSON path and reason.

    >>> parse_spec({"input_shape": [4], "blocks": [{"layers": [{"type": "linear", "out": 2}]}]}).blocks[0].layers[0].out
    2
    """
    return parse_and_trace(data, limits)[0]


def parse_and_trace(
    data: ArchitectureSpec | dict[str, Any] | str | bytes,
    limits: SpecLimits | None = None,
) -> tuple[ArchitectureSpec, ShapeTrace]:
    """:func:`parse_spec` and the shape trace it computed, so that a caller that needs both
    (``nas.build_model``) traces the spec once."""
    if isinstance(data, (str, bytes)):
        data = load_spec_json(data)
    if isinstance(data, ArchitectureSpec):
        spec = data
    else:
        if not isinstance(data, dict):
            raise SpecError.at("$", f"a spec is a JSON object, not {_json_kind(data)}")
        active = limits if limits is not None else SpecLimits()
        if (layers := count_layers(data, active.max_layers)) > active.max_layers:
            raise SpecError.at(
                "blocks",
                f"{layers}+ layers exceed the limit of {active.max_layers} (setting PREFLIGHT_SPEC_MAX_LAYERS; "
                "a cell's edges count as layers; counted before validation, stopping past the limit)",
            )
        try:
            spec = ArchitectureSpec.model_validate(data)
        except ValidationError as exc:
            if any(error["type"] == "recursion_depth_exceeded" for error in exc.errors()):  # pydantic's, past ~250
                raise SpecError.at("$", _TOO_DEEP) from None
            if any(error["type"] == "string_unicode" for error in exc.errors()):  # a key JSON text could not hold
                try:
                    refuse_unencodable_keys(data)
                except UnencodableKeyError as unencodable:
                    raise SpecError.at(unencodable.path, unencodable.reason) from None
            raise SpecError(issues_from_validation_error(exc)) from None
        except RecursionError:
            raise SpecError.at("$", _TOO_DEEP) from None
    trace = trace_shapes(spec)
    check_limits(spec, trace, limits if limits is not None else SpecLimits())
    return spec, trace

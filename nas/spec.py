"""Architecture spec v1.1: the wire contract between NAS controllers, the service and workers.

The format is documented in ``docs/spec.md``. Version 1.1 adds cells (DAGs of ops, as in
NAS-Bench-201) and transformer layers; a spec without ``"format": "1.1"`` is a 1.0 spec, which
keeps v1's meaning and hash and may not use them (``nas.shapes`` names the version a layer needs).
A spec is parsed once, where it enters, into frozen
pydantic models; every error names the JSON path at fault (``blocks[3].layers[1] (linear)``)
and says how to fix it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from nas._numbers import is_integral, is_real
from nas.strict_json import StrictJSONError, is_unicode_text, loads_strict


def _integer(value: Any) -> Any:
    """Integers are strict: ``"16"``, ``16.0`` or ``True`` where a count belongs is a mistake to
    report, not to coerce; any integral number (a numpy integer too) is accepted."""
    if not is_integral(value):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return int(value)


def _real(value: Any) -> Any:
    """Real numbers are strict as counts are: ``true`` or ``"1"`` where a std or a factor belongs is
    a mistake to report, not to read as 1; any real number (an integer, a numpy float) is accepted."""
    if not is_real(value):
        raise PydanticCustomError("float_type", "Input should be a number")
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range (10**400)
        number = math.inf
    if not math.isfinite(number):  # every number of a spec is finite
        raise PydanticCustomError("finite_number", "Input should be a finite number")
    return number


def _boolean(value: Any) -> Any:
    """A switch is true or false (a numpy bool too): ``"no"``, ``0`` or ``1.0`` was read as one."""
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    raise PydanticCustomError("bool_type", "Input should be a boolean, true or false")


NOT_UNICODE_TEXT = "must be valid Unicode text (it holds a lone surrogate such as \\ud800)"


def storable_text(value: str) -> str:
    """A name a database can store and every client can print: no NUL character (PostgreSQL's
    text refuses it) and no lone surrogate (not encodable as UTF-8)."""
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (\\u0000)")
    if not is_unicode_text(value):
        raise ValueError(NOT_UNICODE_TEXT)
    return value


Name = Annotated[str, AfterValidator(storable_text)]
# The longest study name a job's options take: Optuna's own limit (its RDB storage's study_name column),
# so that a gate or pruner may name any study Optuna's RDB storage accepts (nas.gate.service_study_name
# writes the others, which its other storages take, as a storable label)
STUDY_NAME_LENGTH = 512
# Bounds that keep every accepted spec buildable: PyTorch's kernels take sizes, strides and paddings
# as 32-bit integers (a stride of 2**63 passed validation and broke the forward pass), and a factor
# of the network's scale is squared on the way (a std or a residual's beta of 1e155 overflowed)
MAX_SPEC_INT = 2**31 - 1
MAX_SPEC_MAGNITUDE = 1e6
MAX_CELL_NODES = 1024
MAX_BLOCKS = 512  # a spec's blocks at most (nas.validate.SpecLimits.max_blocks cannot raise it)

# an integral number (a numpy integer too), never a bool, a string or a float: the spec's counts and the
# options' (nas.options)
Integer = Annotated[int, BeforeValidator(_integer)]
PositiveInt = Annotated[Integer, Field(gt=0, le=MAX_SPEC_INT)]
NonNegativeInt = Annotated[Integer, Field(ge=0, le=MAX_SPEC_INT)]
# a convolution's or pool's kernel, stride and padding: beyond a few thousand, torch's CPU kernels take
# seconds per sample (a pool's window is no multiply-accumulate the limits count) and at a stride of
# 2**16 on a 1x1 input its conv backward crashed the process
MAX_WINDOW = 1024
WindowInt = Annotated[Integer, Field(gt=0, le=MAX_WINDOW)]
WindowPadding = Annotated[Integer, Field(ge=0, le=MAX_WINDOW)]
# a real number (a numpy one too) or a switch, never a bool where a number belongs, a string or a number
# where a switch does
Real = Annotated[float, BeforeValidator(_real)]
Switch = Annotated[bool, BeforeValidator(_boolean)]
PositiveFactor = Annotated[Real, Field(gt=0, le=MAX_SPEC_MAGNITUDE, allow_inf_nan=False)]
Factor = Annotated[Real, Field(ge=-MAX_SPEC_MAGNITUDE, le=MAX_SPEC_MAGNITUDE, allow_inf_nan=False)]

__all__ = [
    "STUDY_NAME_LENGTH",
    "ActivationLayer",
    "ArchitectureSpec",
    "AttentionLayer",
    "Block",
    "CellEdge",
    "CellLayer",
    "Conv2dLayer",
    "DropoutLayer",
    "FlattenLayer",
    "GlobalAvgPoolLayer",
    "GroupNormLayer",
    "Integer",
    "Init",
    "LAYER_TYPES",
    "Layer",
    "LayerNormLayer",
    "LeakyReluLayer",
    "LinearLayer",
    "MAX_CELL_NODES",
    "MAX_BLOCKS",
    "MAX_SPEC_INT",
    "MAX_WINDOW",
    "MAX_SPEC_MAGNITUDE",
    "NormLayer",
    "PatchEmbedLayer",
    "PoolLayer",
    "PosEmbedLayer",
    "ResidualLayer",
    "ScaleLayer",
    "SpecError",
    "SpecIssue",
    "TokenMeanLayer",
    "V11_LAYER_TYPES",
    "WEIGHTED_LAYER_TYPES",
    "ZeroLayer",
    "error_path",
    "primary_errors",
    "readable_message",
    "json_key",
    "json_path",
    "quote_short",
    "needs_v11",
]

SPEC_FORMAT_VERSION = 1  # the canonical form's "format" of a spec that uses nothing from 1.1


def _format_string(value: Any) -> Any:
    """``"format": 1.1`` (a number) is the likeliest slip; say how to write it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise PydanticCustomError("format_number", 'write the format version as a string, "1.0" or "1.1"')
    return value


SpecFormat = Annotated[Literal["1.0", "1.1"], BeforeValidator(_format_string)]


class _Strict(BaseModel):
    """Frozen, closed models: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


InitScheme = Literal["fan_in", "fan_out", "arithmetic", "geometric", "torch_default", "normal"]


class Init(_Strict):
    """Weight initialization: Gaussian, mean 0, the scheme's variance times ``gain**2``."""

    scheme: InitScheme = "fan_in"
    gain: PositiveFactor = 1.0
    std: PositiveFactor | None = None

    @model_validator(mode="after")
    def _std_only_for_normal(self) -> Init:
        if self.scheme == "normal" and self.std is None:
            raise ValueError('scheme "normal" needs a positive "std"')
        if self.scheme != "normal" and self.std is not None:
            raise ValueError(f'"std" is only used by scheme "normal", not by {self.scheme!r}')
        return self


class LinearLayer(_Strict):
    type: Literal["linear"]
    out: PositiveInt
    bias: Switch = True
    init: Init | None = None


class Conv2dLayer(_Strict):
    type: Literal["conv2d"]
    out: PositiveInt
    kernel: WindowInt
    stride: WindowInt = 1
    padding: Literal["same"] | WindowPadding = "same"
    groups: PositiveInt = 1
    bias: Switch = True
    init: Init | None = None

    @property
    def effective_padding(self) -> int | Literal["same"]:
        """``"same"`` keeps H, W at stride 1; with a larger stride it pads ``(kernel - 1) // 2``
        on each side (output ``ceil(H / stride)`` for odd kernels), since PyTorch's
        ``padding="same"`` refuses strides above 1."""
        if self.padding != "same":
            return self.padding
        return "same" if self.stride == 1 else (self.kernel - 1) // 2

    @model_validator(mode="after")
    def _groups_divide_out(self) -> Conv2dLayer:
        if self.out % self.groups:
            raise ValueError(f"groups={self.groups} must divide out={self.out}")
        return self


class NormLayer(_Strict):
    """BatchNorm, 1d or 2d from the input rank; affine weight 1, bias 0."""

    type: Literal["batchnorm"]


class LayerNormLayer(_Strict):
    """LayerNorm over every per-sample dimension (``"all"``, v1) or the last one (``"last"``,
    v1.1, as transformers use it); affine weight 1, bias 0."""

    type: Literal["layernorm"]
    over: Literal["all", "last"] = "all"


class GroupNormLayer(_Strict):
    type: Literal["groupnorm"]
    groups: PositiveInt


class ActivationLayer(_Strict):
    type: Literal["relu", "gelu", "silu", "tanh", "sigmoid", "identity"]


class LeakyReluLayer(_Strict):
    type: Literal["leaky_relu"]
    slope: Factor = 0.01


class PoolLayer(_Strict):
    type: Literal["maxpool", "avgpool"]
    kernel: WindowInt
    stride: WindowInt | None = None  # None means "= kernel"
    padding: WindowPadding = 0  # v1.1; an average counts only the real inputs at the border

    @model_validator(mode="after")
    def _padding_at_most_half_the_kernel(self) -> PoolLayer:
        if 2 * self.padding > self.kernel:
            raise ValueError(f"padding={self.padding} must be at most half of kernel={self.kernel}")
        return self

    @property
    def effective_stride(self) -> int:
        return self.stride if self.stride is not None else self.kernel


class GlobalAvgPoolLayer(_Strict):
    type: Literal["global_avgpool"]


class FlattenLayer(_Strict):
    type: Literal["flatten"]


class DropoutLayer(_Strict):
    type: Literal["dropout"]
    p: Annotated[Real, Field(ge=0, lt=1)]


class ScaleLayer(_Strict):
    type: Literal["scale"]
    factor: Factor


class ResidualLayer(_Strict):
    """``y = alpha * shortcut(x) + beta * body(x)``; both paths must give the same shape."""

    type: Literal["residual"]
    body: Annotated[list[Layer], Field(min_length=1)]
    shortcut: list[Layer] = Field(default_factory=list)
    alpha: Factor = 1.0
    beta: Factor = 1.0


class ZeroLayer(_Strict):
    """Zeros of its input's shape (NAS-Bench-201's ``none`` op); v1.1."""

    type: Literal["zero"]


class AttentionLayer(_Strict):
    """Multi-head self-attention on [T, D]: q, k, v and output projections D -> D and
    ``softmax(q k^T / sqrt(D / heads)) v``; v1.1."""

    type: Literal["attention"]
    heads: PositiveInt
    causal: Switch = False
    bias: Switch = True
    init: Init | None = None


class PatchEmbedLayer(_Strict):
    """[C, H, W] to [T, out]: a conv with kernel = stride = ``patch``, positions as tokens; v1.1."""

    type: Literal["patch_embed"]
    patch: PositiveInt
    out: PositiveInt
    bias: Switch = True
    init: Init | None = None


class PosEmbedLayer(_Strict):
    """Adds a learned [T, D] tensor drawn N(0, std^2); v1.1."""

    type: Literal["pos_embed"]
    std: PositiveFactor = 0.02


class TokenMeanLayer(_Strict):
    """[T, D] to [D], the mean over positions; v1.1."""

    type: Literal["token_mean"]


class CellEdge(_Strict):
    """``op`` applied to node ``from``, summed into node ``to`` (``[]`` is the identity)."""

    # validated by its alias only: "source" is the attribute's name here, not a key of the format
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: NonNegativeInt = Field(alias="from")
    to: PositiveInt
    op: list[Layer] = Field(default_factory=list)


class CellLayer(_Strict):
    """A DAG over ``nodes`` feature maps (v1.1): node 0 is the input, node j > 0 the sum of its
    incoming edges' ops; ``"last"`` returns the last node, ``"concat"`` nodes 1.. along dim 0."""

    type: Literal["cell"]
    nodes: Annotated[int, BeforeValidator(_integer), Field(ge=2, le=MAX_CELL_NODES)]
    edges: Annotated[list[CellEdge], Field(min_length=1)]
    output: Literal["last", "concat"] = "last"


Layer = Annotated[
    LinearLayer
    | Conv2dLayer
    | NormLayer
    | LayerNormLayer
    | GroupNormLayer
    | ActivationLayer
    | LeakyReluLayer
    | PoolLayer
    | GlobalAvgPoolLayer
    | FlattenLayer
    | DropoutLayer
    | ScaleLayer
    | ResidualLayer
    | ZeroLayer
    | AttentionLayer
    | PatchEmbedLayer
    | PosEmbedLayer
    | TokenMeanLayer
    | CellLayer,
    Field(discriminator="type"),
]
ResidualLayer.model_rebuild()
CellEdge.model_rebuild()
CellLayer.model_rebuild()

LAYER_TYPES: tuple[str, ...] = (
    "linear",
    "conv2d",
    "batchnorm",
    "layernorm",
    "groupnorm",
    "relu",
    "gelu",
    "silu",
    "tanh",
    "sigmoid",
    "identity",
    "leaky_relu",
    "maxpool",
    "avgpool",
    "global_avgpool",
    "flatten",
    "dropout",
    "scale",
    "residual",
    "cell",
    "zero",
    "attention",
    "patch_embed",
    "pos_embed",
    "token_mean",
)
V11_LAYER_TYPES: frozenset[str] = frozenset({"cell", "zero", "attention", "patch_embed", "pos_embed", "token_mean"})
WEIGHTED_LAYER_TYPES: tuple[str, ...] = ("linear", "conv2d")


def needs_v11(layer: Layer) -> str | None:
    """Why this layer itself (not its children) needs format 1.1, or None if 1.0 has it."""
    if layer.type in V11_LAYER_TYPES:
        return f"layer type {layer.type!r}"
    if isinstance(layer, LayerNormLayer) and layer.over != "all":
        return f'layernorm "over": {layer.over!r}'
    if isinstance(layer, PoolLayer) and layer.padding:
        return f'{layer.type} "padding"'
    return None


class Block(_Strict):
    """A run of layers; block boundaries are where APJN and K are measured."""

    name: Name | None = None
    layers: Annotated[list[Layer], Field(min_length=1)]


class ArchitectureSpec(_Strict):
    """One candidate architecture (format 1.0 when ``format`` is absent, or 1.1)."""

    format: SpecFormat = "1.0"
    name: Name | None = None
    input_shape: Annotated[list[PositiveInt], Field(min_length=1, max_length=3)]
    init: Init = Field(default_factory=Init)
    blocks: Annotated[list[Block], Field(min_length=1, max_length=MAX_BLOCKS)]

    @field_validator("input_shape")
    @classmethod
    def _vector_or_image(cls, shape: list[int]) -> list[int]:
        if len(shape) == 2:
            raise ValueError(f"input_shape {shape} has rank 2; use [D] for vectors or [C, H, W] for images")
        return shape


class SpecIssue(BaseModel):
    """One thing wrong with a spec: where (JSON path) and why."""

    model_config = ConfigDict(frozen=True)

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class SpecError(ValueError):
    """The spec is not a valid v1 architecture; ``issues`` says where and why."""

    def __init__(self, issues: list[SpecIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(str(issue) for issue in issues) or "invalid spec")

    @classmethod
    def at(cls, path: str, message: str) -> SpecError:
        return cls([SpecIssue(path=path, message=message)])


def json_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as a JSON path: ``blocks[3].layers[1] (linear).out``.

    A layer-type tag that pydantic inserts after a list index (the discriminated union)
    is shown in parentheses, as a reader of the spec names that layer.
    """
    out = ""
    in_layer_list = False  # the last part was an index into a list of layers (where pydantic adds the tag)
    field: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            in_layer_list = field in _LAYER_LISTS
            continue
        if in_layer_list and part in LAYER_TYPES:
            out += f" ({part})"
        elif not part.isidentifier():
            continue  # pydantic's label of a union member ("literal['same']"), not a field
        else:
            out = json_key(out, part)
            field = part
        in_layer_list = False
    return out or "$"


# The fields that hold a list of layers: an index into one is followed by the layer's type tag
# (``blocks[0].layers[1] (linear)``); after an index into another list a layer type's name is a
# field (an unknown key ``relu`` of a block is ``blocks[0].relu``).
_LAYER_LISTS = frozenset({"layers", "body", "shortcut", "op"})


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field; remove it (see `preflight schema` for the fields of each type)"
    if kind == "union_tag_invalid":  # the tag as given (pydantic's ctx shows a lone surrogate as U+FFFD), cut short
        given = error["input"].get("type") if isinstance(error.get("input"), Mapping) else None
        tag = given if isinstance(given, str) else error.get("ctx", {}).get("tag", "?")
        return f"unknown layer type {quote_short(tag)}; expected one of: {', '.join(LAYER_TYPES)}"
    if kind == "union_tag_not_found":
        return 'layer has no "type"; expected one of: ' + ", ".join(LAYER_TYPES)
    if kind == "missing":
        return "required field is missing"
    if kind == "int_type":
        got = quote_short(error["input"])
        return f"expected an integer, got {got} (write it as a JSON number without quotes or decimals)"
    message = readable_message(error)
    if kind == "string_unicode":
        return message  # the input is the text no client can print
    return f"{message} (got {quote_short(error['input'])})" if kind != "value_error" else message


def primary_errors(errors: list[Any]) -> list[Any]:
    """pydantic's errors without a list's "too short" that only counts the items refused beside
    it (``probe_lrs: [0]`` read "greater than 0" and "should have at least 1 item")."""
    refused = {tuple(error["loc"][:-1]) for error in errors if error["loc"]}
    return [e for e in errors if not (e["type"] == "too_short" and tuple(e["loc"]) in refused)]


def readable_message(error: Mapping[str, Any]) -> str:
    """pydantic's message of ``error`` in the words every refusal uses: a validator's ValueError
    without pydantic's "Value error, ", a string holding a lone surrogate as ``storable_text`` says
    it (pydantic: "unable to parse raw data as a unicode string")."""
    if error["type"] == "string_unicode":
        return NOT_UNICODE_TEXT
    return str(error["msg"]).removeprefix("Value error, ")


def quote_short(value: Any, limit: int = 80) -> str:
    """The offending input as the message quotes it, cut to ``limit`` characters: an error about a
    large value must not echo it back whole; JSON's literals as JSON writes them (``true``, not
    Python's ``True``)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    try:
        text = repr(value)
    except RecursionError:  # pydantic hands back the input it could not descend into
        return "a value nested too deeply to show"
    return text if len(text) <= limit else f"{text[: limit - 12]}... ({len(text)} characters)"


def issues_from_validation_error(exc: ValidationError) -> list[SpecIssue]:
    """Turn pydantic's errors into path + message pairs a spec author can act on; the
    alternatives of a union at one path become one issue ("... or ...")."""
    by_path: dict[str, list[str]] = {}
    for error in primary_errors(exc.errors(include_url=False)):
        messages = by_path.setdefault(error_path(tuple(error["loc"]), error["type"]), [])
        if (message := _message(error)) not in messages:
            messages.append(message)
    return [SpecIssue(path=path, message=" or ".join(messages)) for path, messages in by_path.items()]


_LONGEST_KEY = 64  # a longer key in a path is cut: a megabyte-long unknown key came back twice in the 422


def json_key(parent: str, key: str) -> str:
    """The path of ``key`` in the object at ``parent`` ("" at the top): ``parent.key`` for a name,
    ``parent["x-y"]`` otherwise, a key longer than 64 characters cut to its start and its length."""
    if len(key) > _LONGEST_KEY:
        cut = f"...({len(key)} characters)"
        shown = f"{key[:40]}{cut}" if key.isidentifier() else f"[{json.dumps(key[:40], ensure_ascii=False)}{cut}]"
    else:
        shown = key if key.isidentifier() else f"[{json.dumps(key, ensure_ascii=False)}]"
    if shown.startswith("["):
        return f"{parent}{shown}"
    return f"{parent}.{shown}" if parent else shown


def error_path(loc: tuple[int | str, ...], kind: str) -> str:
    """Where a pydantic error of type ``kind`` at ``loc`` is; an unknown key that is not a name
    (``"x-y"``, ``"out "``, ``""``) is quoted, since ``json_path`` drops such parts (they are how
    pydantic labels union members)."""
    if kind == "extra_forbidden" and loc and isinstance(loc[-1], str) and not loc[-1].isidentifier():
        parent = json_path(loc[:-1])
        return json_key("" if parent == "$" else parent, loc[-1])
    return json_path(loc)


def load_spec_json(text: str | bytes) -> Any:
    """Decode JSON text, turning syntax errors into a SpecError at the root and an object that
    names a key twice into one at that object (``nas.strict_json``)."""
    try:
        return loads_strict(text)
    except StrictJSONError as exc:
        raise SpecError.at(exc.path, exc.reason) from None
    except json.JSONDecodeError as exc:
        raise SpecError.at("$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise SpecError.at("$", "JSON nested too deeply to parse (arrays or objects within each other)") from None
    except UnicodeDecodeError as exc:  # bytes that are no UTF-8, -16 or -32 text
        raise SpecError.at("$", f"not JSON text: {exc.reason} at byte {exc.start}") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.set_int_max_str_digits)
        raise SpecError.at("$", f"not a usable JSON number: {exc}") from None

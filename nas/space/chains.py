"""Chain search spaces (MLPs, CNNs, residual nets) and the helpers every space composes.

A search space is any callable ``space(trial) -> dict`` that returns a spec (``docs/spec.md``).
Three chain families are here, each a frozen dataclass whose fields are the ranges searched
(variants are parameters, not copies):

- :class:`MLPSpace`: depth, width (shared or per layer), activation, normalization,
  init scheme and gain, for vector inputs.
- :class:`CNNSpace`: stages of convolutions with pooling (max, average or strided
  convolution) between them, channels doubling per stage, a global-average-pooling or
  flatten head, for image inputs.
- :class:`ResidualSpace`: a stem, residual blocks ``alpha * x + beta * body(x)`` with a
  searched residual scaling ``beta``, for vector or image inputs.

Custom spaces compose the ``suggest_*`` helpers, which name their Optuna parameters
after ``prefix`` so that two parts of one space do not collide::

    def my_space(trial):
        act = nas.space.suggest_activation(trial, ("relu", "tanh"))
        width = trial.suggest_int("width", 32, 128, log=True)
        hidden = [{"layers": [{"type": "linear", "out": width}, act]}
                  for _ in range(trial.suggest_int("depth", 1, 4))]
        return {"input_shape": [64], "init": nas.space.suggest_init(trial),
                "blocks": hidden + [nas.space.head_block(10)]}

Check a custom space once with ``nas.parse_spec(my_space(optuna.trial.FixedTrial({...})))``.
Each hidden layer is its own block, so the conditioning report has one APJN per layer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nas._numbers import is_integral, is_real
from nas.spec import MAX_BLOCKS, MAX_SPEC_INT, MAX_SPEC_MAGNITUDE

__all__ = [
    "ACTIVATIONS",
    "CNNSpace",
    "INIT_SCHEMES",
    "MLPSpace",
    "NORMS",
    "ResidualSpace",
    "SearchSpace",
    "head_block",
    "suggest_activation",
    "suggest_init",
    "suggest_norm",
]

ACTIVATIONS: tuple[str, ...] = ("relu", "leaky_relu", "gelu", "silu", "tanh", "sigmoid")
NORMS: tuple[str, ...] = ("none", "batchnorm", "layernorm", "groupnorm")
INIT_SCHEMES: tuple[str, ...] = ("fan_in", "fan_out", "arithmetic", "geometric", "torch_default")
_ALL_ACTIVATIONS = (*ACTIVATIONS, "identity")

Spec = dict[str, Any]
Layer = dict[str, Any]


class _Trial(Protocol):
    """What the helpers need of ``optuna.trial.Trial`` (``FixedTrial`` has it too)."""

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...
    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...
    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


class SearchSpace(Protocol):
    """A search space: a trial's suggestions turned into a spec."""

    def __call__(self, trial: Any) -> Spec: ...


def suggest_activation(trial: _Trial, choices: Sequence[str] = ACTIVATIONS, prefix: str = "") -> Layer:
    """One activation layer, chosen from ``choices`` (parameter ``{prefix}activation``)."""
    return {"type": trial.suggest_categorical(f"{prefix}activation", list(choices))}


def suggest_norm(trial: _Trial, choices: Sequence[str] = NORMS, channels: int | None = None, prefix: str = "") -> str:
    """A normalization kind (parameter ``{prefix}norm``); ``"none"`` for none. GroupNorm is
    offered only where ``channels`` (image inputs) is given."""
    allowed = [c for c in choices if c != "groupnorm" or channels is not None]
    return trial.suggest_categorical(f"{prefix}norm", allowed) if allowed else "none"


def suggest_init(
    trial: _Trial,
    schemes: Sequence[str] = INIT_SCHEMES,
    gain: tuple[float, float] = (0.5, 2.0),
    prefix: str = "",
) -> dict[str, Any]:
    """An INIT object: scheme from ``schemes``, gain log-uniform in ``gain``
    (parameters ``{prefix}init_scheme`` and ``{prefix}init_gain``)."""
    init: dict[str, Any] = {"scheme": trial.suggest_categorical(f"{prefix}init_scheme", list(schemes))}
    low, high = gain
    init["gain"] = low if low == high else trial.suggest_float(f"{prefix}init_gain", low, high, log=True)
    return init


def head_block(n_classes: int) -> dict[str, Any]:
    """The output block: one linear layer to the logits."""
    return {"name": "head", "layers": [{"type": "linear", "out": n_classes}]}


def norm_layer(kind: str, channels: int | None = None, positions: int | None = None) -> list[Layer]:
    """The layer(s) of a normalization kind: ``[]`` for ``"none"``; GroupNorm uses the
    largest group count in (8, 4, 2, 1) that divides ``channels`` and, where the layer's
    ``positions`` (H * W) are given, leaves each group at least two values to normalize over
    (a group of one channel at 1 x 1 is a spec the service refuses)."""
    if kind == "none":
        return []
    if kind == "groupnorm":
        if channels is None:
            raise ValueError("groupnorm needs the channel count; pass channels=")
        fits = [g for g in (8, 4, 2, 1) if channels % g == 0]
        enough = [g for g in fits if positions is None or channels // g * positions >= 2]
        return [{"type": "groupnorm", "groups": (enough or fits)[0]}]
    return [{"type": kind}]


def _check_layernorm_width(space: MLPSpace | ResidualSpace) -> None:
    """A LayerNorm over a vector normalizes over its width: one unit is a spec the service refuses."""
    if len(space.input_shape) == 1 and "layernorm" in space.norms and space.width[0] < 2:
        raise ValueError(
            f"layernorm normalizes over a layer's width, which must then be at least 2, but got width={space.width!r}; "
            "raise it or drop layernorm from norms."
        )


def _check_range(
    name: str, value: tuple[float, float], low: float, *, integer: bool = False, most: float = math.inf
) -> None:
    """A (low, high) pair of numbers (integers where ``integer``) with ``low`` <= low <= high <=
    ``most``: the spec format's own bound, so that no trial proposes a spec it refuses."""
    number = is_integral if integer else is_real
    pair = isinstance(value, tuple | list) and len(value) == 2
    if not pair or not all(number(v) for v in value):
        what = "integers" if integer else "numbers"
        raise ValueError(f"{name} must be a (low, high) pair of {what}, but got {name}={value!r}.")
    if not (low <= value[0] <= value[1]) or not math.isfinite(value[1]):
        raise ValueError(f"{name} must be a (low, high) pair with {low} <= low <= high, but got {name}={value!r}.")
    if value[1] > most:
        bound = f"{int(most)}" if integer else f"{most:g}"
        raise ValueError(f"{name} must be at most {bound} (the spec format's limit), but got {name}={value!r}.")


class _LargestTrial:
    """A trial at the top of every range and at one end of every choice (a choice such as pooling
    can add blocks): with both ends, the deepest network a space proposes, as its constructor checks."""

    def __init__(self, last: bool) -> None:
        self.last = last

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return high

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return high

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return choices[-1 if self.last else 0]


def _check_fits_format(space: SearchSpace) -> None:
    """Refuse a space whose deepest network has more blocks than the spec format allows: its deepest
    trials would all be refused (a depth of 600 passed, and those trials failed)."""
    blocks = max(len(space(_LargestTrial(last))["blocks"]) for last in (False, True))
    if blocks > MAX_BLOCKS:
        raise ValueError(
            f"{type(space).__name__}'s deepest network has {blocks} blocks, more than the spec format's "
            f"{MAX_BLOCKS}; lower the top of the ranges that set its depth."
        )


def _check_choices(name: str, value: Sequence[str], allowed: Sequence[str]) -> None:
    if isinstance(value, str) or not value or any(v not in allowed for v in value):
        raise ValueError(f"{name} must be a non-empty sequence of {list(allowed)}, but got {name}={value!r}.")


def _check_common(space: Any) -> None:
    _check_input_shape(space.input_shape)
    _check_n_classes(space.n_classes)
    _check_choices("activations", space.activations, _ALL_ACTIVATIONS)
    _check_choices("norms", space.norms, NORMS)
    if len(space.input_shape) == 1 and "groupnorm" in space.norms:  # it would be dropped without a word
        raise ValueError(
            f"groupnorm needs image inputs [C, H, W] (channels to group); drop it from norms={space.norms!r}."
        )
    _check_choices("init_schemes", space.init_schemes, INIT_SCHEMES)
    _check_range("gain", space.gain, 1e-6, most=MAX_SPEC_MAGNITUDE)


def _check_n_classes(n_classes: Any) -> None:
    if not _count(n_classes, 1):
        raise ValueError(f"n_classes must be an integer of at least 1, but got n_classes={n_classes!r}.")


def _most_stages(height: int, width: int) -> int:
    """How many stages an image has room for, each but the first halving the map, down to 1 x 1."""
    return max(1, int(math.log2(min(height, width))) + 1)


def _count(value: Any, low: int) -> bool:
    """An integer (numpy's too, not a bool) of at least ``low``."""
    return is_integral(value) and int(value) >= low


def _positive_finite(value: Any) -> bool:
    """A finite real number (numpy's too, not a bool) above 0."""
    return is_real(value) and math.isfinite(value) and value > 0


def _odd_size(kernel: Any) -> bool:
    return _count(kernel, 1) and kernel % 2 == 1


def _check_input_shape(shape: Any) -> None:
    if not isinstance(shape, tuple | list) or any(not _count(n, 1) for n in shape):
        raise ValueError(f"input_shape must be a list of positive integers, but got input_shape={shape!r}.")


def _suggest_int(trial: _Trial, name: str, bounds: tuple[int, int], log: bool = False) -> int:
    low, high = bounds
    return low if low == high else trial.suggest_int(name, low, high, log=log)


@dataclass(frozen=True)
class MLPSpace:
    """Fully connected networks: ``depth`` hidden blocks ``[linear, norm?, activation]``
    and a linear head. Widths are log-uniform; one width for all layers unless
    ``per_layer_width``."""

    input_shape: tuple[int] | list[int]
    n_classes: int
    depth: tuple[int, int] = (1, 8)
    width: tuple[int, int] = (16, 256)
    per_layer_width: bool = False
    activations: Sequence[str] = ACTIVATIONS
    norms: Sequence[str] = ("none", "batchnorm", "layernorm")
    init_schemes: Sequence[str] = INIT_SCHEMES
    gain: tuple[float, float] = (0.5, 2.0)
    prefix: str = ""

    def __post_init__(self) -> None:
        if len(self.input_shape) != 1:
            raise ValueError(f"MLPSpace needs a vector input [D], but got input_shape={list(self.input_shape)}.")
        _check_common(self)
        _check_range("depth", self.depth, 1, integer=True, most=MAX_BLOCKS)
        _check_range("width", self.width, 1, integer=True, most=MAX_SPEC_INT)
        _check_layernorm_width(self)
        _check_fits_format(self)

    def __call__(self, trial: _Trial) -> Spec:
        p = self.prefix
        depth = _suggest_int(trial, f"{p}depth", self.depth)
        shared = None if self.per_layer_width else _suggest_int(trial, f"{p}width", self.width, log=True)
        activation = suggest_activation(trial, self.activations, p)
        norm = suggest_norm(trial, self.norms, prefix=p)
        blocks = []
        for i in range(depth):
            width = shared if shared is not None else _suggest_int(trial, f"{p}width_{i}", self.width, log=True)
            blocks.append({"layers": [{"type": "linear", "out": width}, *norm_layer(norm), dict(activation)]})
        return {
            "name": f"mlp-{depth}x{shared or 'var'}-{activation['type']}-{norm}",
            "input_shape": list(self.input_shape),
            "init": suggest_init(trial, self.init_schemes, self.gain, p),
            "blocks": [*blocks, head_block(self.n_classes)],
        }


@dataclass(frozen=True)
class CNNSpace:
    """Convolutional networks: ``stages`` stages of ``convs_per_stage`` blocks
    ``[conv, norm?, activation]``, channels doubling per stage from ``channels``, a
    downsampling between stages (``pooling``: ``maxpool``, ``avgpool`` or ``stride``, a
    stride-2 convolution), and a ``global_avgpool`` or ``flatten`` head. Stages are
    capped so that the feature map stays at least 1 x 1."""

    input_shape: tuple[int, int, int] | list[int]
    n_classes: int
    stages: tuple[int, int] = (1, 3)
    convs_per_stage: tuple[int, int] = (1, 2)
    channels: tuple[int, int] = (8, 64)
    kernels: Sequence[int] = (3, 5)
    pooling: Sequence[str] = ("maxpool", "avgpool", "stride")
    heads: Sequence[str] = ("global_avgpool", "flatten")
    activations: Sequence[str] = ACTIVATIONS
    norms: Sequence[str] = NORMS
    init_schemes: Sequence[str] = INIT_SCHEMES
    gain: tuple[float, float] = (0.5, 2.0)
    prefix: str = ""

    def __post_init__(self) -> None:
        if len(self.input_shape) != 3:
            raise ValueError(f"CNNSpace needs an image input [C, H, W], but got input_shape={list(self.input_shape)}.")
        _check_common(self)
        _check_range("stages", self.stages, 1, integer=True)
        _check_range("convs_per_stage", self.convs_per_stage, 1, integer=True, most=MAX_BLOCKS)
        _check_range("channels", self.channels, 1, integer=True, most=MAX_SPEC_INT)
        _check_choices("pooling", self.pooling, ("maxpool", "avgpool", "stride"))
        _check_choices("heads", self.heads, ("global_avgpool", "flatten"))
        if not self.kernels or any(not _odd_size(k) for k in self.kernels):
            raise ValueError(f"kernels must be odd sizes >= 1, but got kernels={list(self.kernels)!r}.")
        most = _most_stages(*self.input_shape[1:])
        if self.stages[0] > most:
            raise ValueError(
                f"a {self.input_shape[1]}x{self.input_shape[2]} image has room for at most {most} stages, "
                f"but got stages={self.stages!r}."
            )
        widest = self.channels[1] * 2 ** (min(self.stages[1], most) - 1)  # the channels double per stage
        if widest > MAX_SPEC_INT:
            raise ValueError(
                f"channels={self.channels!r}, doubled over up to {min(self.stages[1], most)} stages, reach {widest}, "
                f"beyond the spec format's limit of {MAX_SPEC_INT}."
            )
        _check_fits_format(self)

    def __call__(self, trial: _Trial) -> Spec:
        p = self.prefix
        _, height, width = self.input_shape
        stages = _suggest_int(trial, f"{p}stages", (self.stages[0], min(self.stages[1], _most_stages(height, width))))
        per_stage = _suggest_int(trial, f"{p}convs_per_stage", self.convs_per_stage)
        channels = _suggest_int(trial, f"{p}channels", self.channels, log=True)
        kernel = trial.suggest_categorical(f"{p}kernel", list(self.kernels))
        pooling = trial.suggest_categorical(f"{p}pooling", list(self.pooling)) if stages > 1 else "none"
        head = trial.suggest_categorical(f"{p}head", list(self.heads))
        activation = suggest_activation(trial, self.activations, p)
        norm = suggest_norm(trial, self.norms, channels=channels, prefix=p)
        blocks: list[dict[str, Any]] = []
        for stage in range(stages):
            out = channels * 2**stage
            for j in range(per_stage):
                conv: Layer = {"type": "conv2d", "out": out, "kernel": kernel}
                if stage > 0 and j == 0 and pooling == "stride":
                    conv |= {"stride": 2, "padding": kernel // 2}
                    height, width = ((side + 2 * (kernel // 2) - kernel) // 2 + 1 for side in (height, width))
                blocks.append({"layers": [conv, *norm_layer(norm, out, height * width), dict(activation)]})
            if stage < stages - 1 and pooling in ("maxpool", "avgpool"):
                blocks.append({"name": "pool", "layers": [{"type": pooling, "kernel": 2}]})
                height, width = height // 2, width // 2
        reduce = [{"type": "global_avgpool"}] if head == "global_avgpool" else [{"type": "flatten"}]
        return {
            "name": f"cnn-{stages}x{per_stage}-c{channels}-{activation['type']}-{norm}-{pooling}",
            "input_shape": list(self.input_shape),
            "init": suggest_init(trial, self.init_schemes, self.gain, p),
            "blocks": [*blocks, {"name": "head", "layers": [*reduce, {"type": "linear", "out": self.n_classes}]}],
        }


@dataclass(frozen=True)
class ResidualSpace:
    """Residual networks for vector or image inputs: a stem block ``[linear|conv,
    activation]``, ``depth`` residual blocks ``alpha * x + beta * body(x)`` whose body is
    ``body_layers`` times ``[norm?, activation, linear|conv]`` (pre-activation), and a
    head. The residual scaling ``beta`` is searched log-uniformly in ``beta``."""

    input_shape: tuple[int, ...] | list[int]
    n_classes: int
    depth: tuple[int, int] = (1, 8)
    width: tuple[int, int] = (16, 128)
    body_layers: tuple[int, int] = (1, 2)
    beta: tuple[float, float] = (0.1, 1.0)
    alpha: float = 1.0
    kernel: int = 3
    activations: Sequence[str] = ACTIVATIONS
    norms: Sequence[str] = ("none", "batchnorm", "layernorm")
    init_schemes: Sequence[str] = INIT_SCHEMES
    gain: tuple[float, float] = (0.5, 2.0)
    prefix: str = ""

    def __post_init__(self) -> None:
        if len(self.input_shape) not in (1, 3):
            raise ValueError(f"ResidualSpace needs [D] or [C, H, W], but got input_shape={list(self.input_shape)}.")
        _check_common(self)
        _check_range("depth", self.depth, 1, integer=True, most=MAX_BLOCKS)
        _check_range("width", self.width, 1, integer=True, most=MAX_SPEC_INT)
        _check_range("body_layers", self.body_layers, 1, integer=True)
        _check_layernorm_width(self)
        _check_range("beta", self.beta, 1e-6, most=MAX_SPEC_MAGNITUDE)
        if not is_real(self.alpha) or not math.isfinite(self.alpha) or abs(self.alpha) > MAX_SPEC_MAGNITUDE:
            raise ValueError(
                f"alpha must be a finite number within +-{MAX_SPEC_MAGNITUDE:g} (the spec format's limit), "
                f"but got alpha={self.alpha!r}."
            )
        if not _odd_size(self.kernel):  # "same" padding keeps the residual's shape only for odd kernels
            raise ValueError(f"kernel must be an odd size >= 1, but got kernel={self.kernel!r}.")
        _check_fits_format(self)

    def __call__(self, trial: _Trial) -> Spec:
        p = self.prefix
        image = len(self.input_shape) == 3
        depth = _suggest_int(trial, f"{p}depth", self.depth)
        width = _suggest_int(trial, f"{p}width", self.width, log=True)
        body_layers = _suggest_int(trial, f"{p}body_layers", self.body_layers)
        low, high = self.beta
        beta = low if low == high else trial.suggest_float(f"{p}beta", low, high, log=True)
        activation = suggest_activation(trial, self.activations, p)
        norm = suggest_norm(trial, self.norms, channels=width if image else None, prefix=p)

        def weighted() -> Layer:
            if image:
                return {"type": "conv2d", "out": width, "kernel": self.kernel}
            return {"type": "linear", "out": width}

        body: list[Layer] = []
        for _ in range(body_layers):
            body += [*norm_layer(norm, width), dict(activation), weighted()]
        residual = {"type": "residual", "alpha": self.alpha, "beta": beta, "body": body}
        head: list[Layer] = [*norm_layer(norm, width), dict(activation)]
        head += [{"type": "global_avgpool"}] if image else []
        return {
            "name": f"res-{depth}x{width}-b{beta:.2g}-{activation['type']}-{norm}",
            "input_shape": list(self.input_shape),
            "init": suggest_init(trial, self.init_schemes, self.gain, p),
            "blocks": [
                {"name": "stem", "layers": [weighted(), dict(activation)]},
                *({"layers": [copy.deepcopy(residual)]} for _ in range(depth)),
                {"name": "head", "layers": [*head, {"type": "linear", "out": self.n_classes}]},
            ],
        }

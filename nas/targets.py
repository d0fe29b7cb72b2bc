"""One rule for labels against a network's output, decided from plain facts (no torch).

The worker checks a batch's tensors with it (``worker.engine.inputs.check_targets``) and the
service can check a stored batch's shape metadata with it before a job is queued, so the two
never disagree on which labels a network can be scored against.

Float targets must hold as many values per sample as the network outputs (not a broadcast:
targets ``[N]`` against an output ``[N, 1]`` are the same values). Class labels must be one
integer per sample, the network must output ``[C >= 2]`` logits, and the labels must lie in
``[0, C - 1]``.

Class labels far from balanced fit, but flatter the trainability probe: its loss is read against
the uniform prediction's (``ln C``), which a network that learns only the class frequencies beats
(``label_balance`` below ``IMBALANCED``; the service warns on upload, over the largest label
plus one classes, and the engine notes it in the report, over the network's output width, both
with ``imbalance_warning``'s words).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

__all__ = [
    "IMBALANCED",
    "LabelKind",
    "head_imbalance_warning",
    "imbalance_warning",
    "label_balance",
    "one_class_warning",
    "target_error",
    "whole_floats_warning",
]

LabelKind = Literal["class", "float"]
# below this balance the probe's figure flatters (docs/conditioning.md, section 7); the benchmark's
# 64-sample batches are at 0.90 to 0.97
IMBALANCED = 0.85


def label_balance(labels: Sequence[int], classes: int) -> float:
    """The class labels' entropy over ``ln classes``, rounded to 4 digits (1: every class equally
    often; classes that never occur count). Counted from the labels present, so a huge label
    costs nothing. ``classes`` >= 2."""
    shares = [count / len(labels) for count in Counter(labels).values()]
    return round(sum(-p * math.log(p) for p in shares) / math.log(classes), 4)  # 0.0, never -0.0


def imbalance_warning(balance: float, classes: int, *, subject: str = "y", present: int | None = None) -> str | None:
    """The warning for class labels of this ``label_balance`` (None at or above ``IMBALANCED``):
    what they make the report read wrong, and what to do. ``present``: how many distinct labels
    occur, when known (named when fewer than ``classes``: a label of 2**31 among 0 and 1 reads
    as imbalance over 2**31 + 1 classes)."""
    if balance >= IMBALANCED:
        return None
    occur = "" if present is None or present >= classes else f"; only {present} of the classes 0 to {classes - 1} occur"
    return (
        f"{subject}: the class labels are imbalanced (their entropy is {balance:.2f} of ln {classes}{occur}): a "
        "network that learns only the class frequencies lowers the trainability probe's loss, so its score and "
        "verdict read better than the network is; condition on about as many samples of each class"
    )


def head_imbalance_warning(balance: float, classes: int, head: int, *, subject: str = "y") -> str | None:
    """The warning for a batch balanced as a whole whose first ``head`` samples, the ones a job
    conditions on, are not (``balance`` theirs; None at or above ``IMBALANCED``): a batch sorted
    by class."""
    if balance >= IMBALANCED:
        return None
    return (
        f"{subject}: the first {head} samples, the ones a job conditions on at the default batch_size, are imbalanced "
        f"(their entropy is {balance:.2f} of ln {classes}) though the whole batch is not, so the trainability "
        "probe's loss flatters the network; shuffle the batch"
    )


def one_class_warning(label: int, *, subject: str = "y") -> str:
    """The warning for class labels that are all ``label``: a network fits them by its bias alone."""
    return (
        f"{subject}: every label is class {label}: a network that always predicts it fits them at once, so the "
        "trainability probe's loss says nothing of how the network trains; condition on samples of several classes"
    )


def whole_floats_warning(*, subject: str = "y") -> str:
    """The warning for float labels that are all whole numbers: class labels sent as floats (a
    label tensor cast to float) are fitted as regression targets, by squared error."""
    return (
        f"{subject}: every label is a whole number sent as a float (such as 1.0), so the labels are float "
        "regression targets, fitted by squared error; if they are class labels, send them as integers"
    )


def target_error(
    labels: LabelKind,
    per_sample: Sequence[int],
    output_shape: Sequence[int],
    class_range: tuple[int, int] | None = None,
    *,
    subject: str = "data 'y'",
) -> str | None:
    """None when the labels fit the network's output, else the reason as one sentence.

    ``labels``: ``"class"`` (integer class labels) or ``"float"`` (regression targets);
    ``per_sample``: the shape of one sample's label (``[]`` for one class label per sample);
    ``output_shape``: the network's output shape per sample; ``class_range``: the smallest
    and largest class label, when known (None: not checked); ``subject``: how the message
    names the labels (e.g. ``"data 'y'"``).

    >>> target_error("class", [], [10], (0, 9)) is None
    True
    >>> target_error("class", [], [10], (0, 12))
    "data 'y': class labels must be in [0, 9] for 10 logits, but range over [0, 12]"
    """
    output = list(output_shape)
    outputs = math.prod(output)
    if labels == "float":
        width = math.prod(per_sample)
        if width != outputs:
            return (
                f"{subject}: {width} float target(s) per sample, but the network outputs {output} ({outputs} per "
                "sample)"
            )
        return None
    if len(per_sample) != 0:
        return f"{subject}: class labels must be one integer per sample, but got shape {list(per_sample)} per sample"
    if len(output) != 1 or outputs < 2:
        return f"{subject}: class labels, but the network outputs {output}, not [C >= 2] logits"
    if class_range is not None:
        low, high = class_range
        if low < 0 or high >= outputs:
            return (
                f"{subject}: class labels must be in [0, {outputs - 1}] for {outputs} logits, but range over "
                f"[{low}, {high}]"
            )
    return None

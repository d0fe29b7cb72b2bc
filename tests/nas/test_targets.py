"""nas.targets: the one rule for labels against a network's output, and how balanced class labels are."""

from __future__ import annotations

import math
import re

import pytest

from nas.targets import LabelKind, label_balance, target_error

# labels, per-sample label shape, output shape, class range, what the message says (None: fits)
CASES: list[tuple[LabelKind, list[int], list[int], tuple[int, int] | None, str | None]] = [
    ("class", [], [10], (0, 9), None),
    ("class", [], [10], None, None),
    ("class", [], [2], (0, 1), None),
    ("class", [], [10], (5, 12), r"in \[0, 9\] for 10 logits, but range over \[5, 12\]"),
    ("class", [], [10], (-1, 3), r"range over \[-1, 3\]"),
    ("class", [2], [10], (0, 1), "one integer per sample"),
    ("class", [], [1], (0, 0), r"outputs \[1\], not \[C >= 2\] logits"),
    ("class", [], [3, 4], (0, 1), r"outputs \[3, 4\], not \[C >= 2\] logits"),
    ("float", [], [1], None, None),
    ("float", [1], [1], None, None),
    ("float", [2, 2], [4], None, None),
    (
        "float",
        [3],
        [10],
        None,
        r"3 float target\(s\) per sample, but the network outputs \[10\] \(10 per sample\)",
    ),
    ("float", [], [2], None, r"1 float target\(s\) per sample"),
]


@pytest.mark.parametrize(("labels", "per_sample", "output", "class_range", "expected"), CASES)
def test_the_rule(
    labels: LabelKind,
    per_sample: list[int],
    output: list[int],
    class_range: tuple[int, int] | None,
    expected: str | None,
) -> None:
    error = target_error(labels, per_sample, output, class_range)
    if expected is None:
        assert error is None
    else:
        assert error is not None and re.search(expected, error), error


def test_the_subject_names_the_labels() -> None:
    message = target_error("class", [], [1], subject="the data batch")
    assert message is not None and message.startswith("the data batch: class labels, but the network outputs")


def test_one_class_has_balance_zero_not_minus_zero() -> None:
    """``y: [2, 2]`` was stored and answered as ``balance: -0.0``."""
    assert math.copysign(1.0, label_balance([2, 2], 3)) == 1.0


def test_label_balance_counts_classes_that_never_occur() -> None:
    assert label_balance([0, 1, 2, 0, 1, 2], 3) == pytest.approx(1.0)
    assert label_balance([0] * 9 + [1], 2) == pytest.approx(0.469, abs=1e-3)
    assert label_balance([0, 1, 0, 1], 4) == pytest.approx(0.5)  # two of four classes: ln 2 / ln 4
    huge = 2**52  # counted from the labels present, never a table of 2^52 entries
    assert label_balance([0, huge], huge + 1) == pytest.approx(math.log(2) / math.log(huge + 1), abs=1e-4)

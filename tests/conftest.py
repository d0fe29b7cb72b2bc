"""Fashion-MNIST for the tests that read it (benchmark v2, the demo): the real IDX files
(Debian's ``dataset-fashion-mnist`` or ``PREFLIGHT_FASHION_MNIST_DIR``). Without them the tests
that need them skip with the message that says how to get them, or fail when
``PREFLIGHT_REQUIRE_FASHION_MNIST=1`` (as in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nas.fashion_mnist import FashionMNISTMissing, find_dir


@pytest.fixture(scope="session")
def fashion_mnist_dir() -> Path:
    try:
        return find_dir()
    except FashionMNISTMissing as error:
        if os.environ.get("PREFLIGHT_REQUIRE_FASHION_MNIST") == "1":
            pytest.fail(f"PREFLIGHT_REQUIRE_FASHION_MNIST=1 but: {error}")
        pytest.skip(str(error))

"""Plain exceptions of the store; the API layer translates them into problem responses."""

from __future__ import annotations

__all__ = ["InvalidBatch"]


class InvalidBatch(ValueError):
    """A data batch (or a spec's fit to one) is invalid at ``path``, a JSON path into the
    request (``x[3]``, ``spec.input_shape``); the API answers 422 with ``"{path}: {message}"``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

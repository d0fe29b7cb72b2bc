"""Plain exceptions of the store; the API layer translates them into problem responses."""

from __future__ import annotations

__all__ = ["BatchInUse", "BatchQuotaReached", "InvalidBatch"]


class InvalidBatch(ValueError):
    """A data batch (or a spec's fit to one) is invalid at ``path``, a JSON path into the
    request (``x[3]``, ``spec.input_shape``); the API answers 422 with ``"{path}: {message}"``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class BatchQuotaReached(Exception):
    """The owner holds ``quota`` data batches already and the upload is new to it; the API
    answers 409 naming the setting."""

    def __init__(self, quota: int) -> None:
        super().__init__(f"quota of {quota} data batches reached")
        self.quota = quota


class BatchInUse(Exception):
    """``count`` queued or running submissions name the data batch to be deleted, and their jobs
    would fail without it; the API answers 409 and deletes nothing."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} queued or running submissions name the data batch")
        self.count = count

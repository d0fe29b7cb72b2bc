"""What can go wrong between a NAS controller and the Preflight service.

One root, :class:`PreflightError`; one subclass per kind of failure a caller handles
differently, and one warning, :class:`BatchWarning`, for what the service stores but flags.
Errors the service answers carry its RFC 9457 problem document
(``problem``: ``type``, ``title``, ``status``, ``detail`` and any extension member such as
the spec validator's ``errors``). Each class's docstring is its default message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AuthenticationError",
    "BatchRejectedError",
    "BatchWarning",
    "CandidateFailed",
    "ClientError",
    "ClientSettingError",
    "ConflictError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PreflightConnectionError",
    "PreflightError",
    "RateLimitedError",
    "ServerError",
    "SpecRejectedError",
    "UnexpectedResponseError",
    "WaitTimeout",
    "error_for_status",
]


class BatchWarning(UserWarning):
    """The service stored the data batch but says it will make the reports read wrong (its
    ``warnings``: e.g. imbalanced class labels, which flatter the trainability probe)."""


class ClientSettingError(ValueError):
    """The client cannot use its URL or token (given, or from PREFLIGHT_URL and
    PREFLIGHT_API_TOKEN): a setting to correct, not a failure of the service."""


class PreflightError(Exception):
    """The Preflight service could not do what was asked."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class PreflightConnectionError(PreflightError):
    """The service could not be reached (connection refused, reset, or timed out),
    even after retrying; is it running at PREFLIGHT_URL?"""

    def __init__(self, message: str | None = None, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url  # the service URL the client tried, when its message names it


class UnexpectedResponseError(PreflightError):
    """The answer is not the Preflight API's (a web page, a redirect, JSON of another shape): is
    PREFLIGHT_URL the service's base URL?"""


class WaitTimeout(PreflightError):
    """The candidate was not conditioned within the time allowed to wait for it."""

    def __init__(self, message: str | None = None, *, candidate: Any = None) -> None:
        super().__init__(message)
        self.candidate = candidate


class CandidateFailed(PreflightError):
    """The service could not condition the candidate (the job failed or was cancelled)."""

    def __init__(self, message: str | None = None, *, candidate: Any = None) -> None:
        super().__init__(message)
        self.candidate = candidate


class _ProblemError(PreflightError):
    """The service answered with an error."""

    def __init__(self, status: int, problem: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.problem: dict[str, Any] = dict(problem or {})
        title = self.problem.get("title") or (type(self).__doc__ or "").strip()
        detail = self.problem.get("detail")
        super().__init__(f"HTTP {status}: {title}" + (f": {detail}" if detail else ""))

    @property
    def title(self) -> str | None:
        return self.problem.get("title")

    @property
    def detail(self) -> str | None:
        return self.problem.get("detail")


class ClientError(_ProblemError):
    """The service refused the request (HTTP 4xx); the problem detail says why."""


class AuthenticationError(ClientError):
    """The API token is missing, wrong or revoked (HTTP 401 or 403); set PREFLIGHT_API_TOKEN."""


class NotFoundError(ClientError):
    """No such candidate, study or data batch that the token may see (HTTP 404)."""


class ConflictError(ClientError):
    """The request conflicts with the resource's state (HTTP 409), e.g. cancelling a
    finished candidate, uploading a data batch past the token's quota of them, or deleting one
    that the token's queued or running candidates name."""


class PayloadTooLargeError(ClientError):
    """The request body is over the service's size limit (HTTP 413): submit fewer specs per
    request, or upload a smaller data batch; the detail names the limit's setting."""


class SpecRejectedError(ClientError):
    """The service rejected a spec or the options (HTTP 422); ``problem`` names the JSON
    path at fault."""


class BatchRejectedError(SpecRejectedError):
    """The service rejected a data batch (HTTP 422 from ``upload_batch``); ``problem`` names the
    JSON path at fault (``x[3][0]``, ``y``). A :class:`SpecRejectedError`, so code that catches
    every refused request still does."""


class RateLimitedError(ClientError):
    """The service asks to slow down (HTTP 429)."""


class ServerError(_ProblemError):
    """The service failed (HTTP 5xx), even after retrying."""


_BY_STATUS: dict[int, type[ClientError]] = {
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: SpecRejectedError,
    429: RateLimitedError,
}


def error_for_status(status: int, problem: Mapping[str, Any] | None = None) -> PreflightError:
    """The exception for an HTTP error status, carrying the problem document."""
    if status >= 500:
        return ServerError(status, problem)
    return _BY_STATUS.get(status, ClientError)(status, problem)

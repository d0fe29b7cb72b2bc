"""REST client of the Preflight service, synchronous and asynchronous (httpx).

Each operation (submit, wait, fetch, ...) is written once, as a generator that yields the
I/O it needs (an ``httpx.Request`` to send, or a pause before a retry) and receives the
answer; :class:`PreflightClient` drives these generators with ``httpx.Client`` and
``time.sleep``, :class:`AsyncPreflightClient` with ``httpx.AsyncClient`` and
``asyncio.sleep``. Retry, backoff, long-polling and the decoding of answers and
problem+json errors therefore exist once and behave the same in both clients.

Configuration comes from the arguments, else the environment: ``PREFLIGHT_URL`` (default
``http://127.0.0.1:8000``) and ``PREFLIGHT_API_TOKEN`` (sent as ``Authorization: Bearer``).

Submitting is safe to retry: the service keys a candidate by its canonical spec and
options, so a submission repeated after a lost answer returns the same candidate.

>>> with PreflightClient() as client:                        # doctest: +SKIP
...     candidate = client.condition(spec, options={"study": "mlp"}, timeout=120)
...     candidate.verdict, candidate.score, candidate.report.scales
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import re
import threading
import time
import warnings
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from nas._numbers import is_real
from nas.errors import (
    BatchRejectedError,
    BatchWarning,
    CandidateFailed,
    ClientSettingError,
    PreflightConnectionError,
    SpecRejectedError,
    UnexpectedResponseError,
    WaitTimeout,
    error_for_status,
)
from nas.report import ConditioningReport
from nas.spec import ArchitectureSpec, json_key, json_path, load_spec_json

__all__ = [
    "DEFAULT_URL",
    "AsyncPreflightClient",
    "Candidate",
    "PreflightClient",
    "CandidateTimings",
    "RetryPolicy",
    "SpecLike",
]

DEFAULT_URL = "http://127.0.0.1:8000"
TERMINAL_STATUSES = frozenset({"done", "failed", "cancelled"})
MAX_SERVER_POLL = 3600.0  # the longest long-poll the service takes (GET .../wait?timeout=)
MAX_BATCH = 256  # specs in one request of submit_many: the service's default PREFLIGHT_MAX_BATCH
RIDE_OUT_PAUSE = 0.25  # the shortest pause between tries past the policy's attempts (never a busy loop)
_OUTAGE_STATUSES = frozenset({429, 502, 503, 504})  # answers of a service that is restarting or busy
SpecLike = ArchitectureSpec | Mapping[str, Any] | str | bytes
Unfinished = Literal["raise", "return"]  # a candidate still unfinished at a wait's deadline: WaitTimeout, or as is

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """When and after how long a failed request is tried again.

    A request is retried after a connection error, a timeout, or an HTTP 5xx or 429
    answer, at most ``attempts`` tries in all. The pause before try ``n + 1`` is
    ``min(max_backoff, backoff * multiplier**(n - 1))``, spread by up to ``jitter`` (a
    fraction) so that many controllers do not retry in step; a ``Retry-After`` header
    that asks for longer wins (capped at ``max_backoff``).

    ``ride_out``: a wait (and ``condition``'s submission) keeps trying, past ``attempts``,
    through an outage of a service that has answered this client before (no answer, or a 429,
    502, 503 or 504: a restart of the service or of its database takes longer than the
    tries span), until its timeout, or for as long as it waits when it has none; at least
    ``RIDE_OUT_PAUSE`` seconds apart. A 500, or a service that never answered (a wrong URL),
    gets ``attempts`` tries.
    """

    attempts: int = 5
    backoff: float = 0.25
    multiplier: float = 2.0
    max_backoff: float = 8.0
    jitter: float = 0.1
    ride_out: bool = True

    def __post_init__(self) -> None:
        attempts, backoff, multiplier = self.attempts, self.backoff, self.multiplier
        max_backoff, jitter = self.max_backoff, self.jitter
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            raise ValueError(f"attempts must be an integer of at least 1, but got {attempts=}.")
        if not (math.isfinite(backoff) and backoff >= 0):
            raise ValueError(f"backoff must be a finite number >= 0, but got {backoff=}.")
        if not (math.isfinite(multiplier) and multiplier >= 1):
            raise ValueError(f"multiplier must be a finite number >= 1, but got {multiplier=}.")
        if not (math.isfinite(max_backoff) and max_backoff >= backoff):
            raise ValueError(f"max_backoff must be finite and at least backoff={backoff}, but got {max_backoff=}.")
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], but got {jitter=}.")
        if not isinstance(self.ride_out, bool):
            raise ValueError(f"ride_out must be True or False, but got {self.ride_out!r}.")

    def retries_status(self, status: int) -> bool:
        """Whether an answer with this HTTP status is worth another try."""
        return status >= 500 or status == 429

    def retries_error(self, error: BaseException) -> bool:
        """Whether this transport error is worth another try (a URL the client cannot
        speak to is not)."""
        return isinstance(error, httpx.TransportError) and not isinstance(error, httpx.UnsupportedProtocol)

    def delay(self, attempt: int, rng: random.Random | None = None, retry_after: float | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based)."""
        base = self._exponential(attempt)
        if rng is not None and self.jitter:
            base *= 1.0 + self.jitter * (2.0 * rng.random() - 1.0)
        if retry_after is not None and retry_after > base:
            base = min(self.max_backoff, retry_after)
        return max(0.0, base)

    def _exponential(self, attempt: int) -> float:
        """``min(max_backoff, backoff * multiplier**(attempt - 1))``, compared in logs: the power
        itself overflowed a float past a few hundred tries (a wait retries until its deadline)."""
        if self.backoff == 0 or self.multiplier == 1:
            return self.backoff
        if (attempt - 1) * math.log(self.multiplier) >= math.log(self.max_backoff / self.backoff):
            return self.max_backoff
        return float(self.backoff * self.multiplier ** (attempt - 1))


@dataclass(frozen=True)
class CandidateTimings:
    """Where a candidate's time went, in seconds (None: not reached yet)."""

    queued_seconds: float | None = None  # from creation to the last start
    run_seconds: float | None = None  # from the last start to the end
    tuning_seconds: float | None = None  # the engine's own measure

    @classmethod
    def from_json(cls, data: Any) -> CandidateTimings | None:
        if not isinstance(data, Mapping):
            return None
        return cls(*(_float_or_none(data.get(k)) for k in ("queued_seconds", "run_seconds", "tuning_seconds")))


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Candidate:
    """A candidate as the service describes it: id, status, (once done) its report; ``cached``:
    on submission, whether the service already had it; ``error``: why a failed job failed."""

    id: str
    status: str
    report: ConditioningReport | None = None
    cached: bool | None = None
    error: str | None = None
    timings: CandidateTimings | None = None
    data: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        report, cached, error = data.get("report"), data.get("cached"), data.get("error")
        # a newer service may add report keys (as `expressivity` was): this client reads the keys
        # it knows and ignores the rest, which stay in `data`; a known key of the wrong type
        # still fails
        return cls(
            id=str(data["id"]),
            status=str(data["status"]),
            report=ConditioningReport.model_validate(report, extra="ignore") if isinstance(report, Mapping) else None,
            cached=cached if isinstance(cached, bool) else None,
            error=str(error) if error is not None else None,
            timings=CandidateTimings.from_json(data.get("timings")),
            data=dict(data),
        )

    @property
    def finished(self) -> bool:
        """Done, failed or cancelled: waiting longer changes nothing."""
        return self.status in TERMINAL_STATUSES

    @property
    def score(self) -> float | None:
        """The conditioning score (higher is better conditioned), once done."""
        return None if self.report is None else self.report.score

    @property
    def verdict(self) -> str | None:
        """``"keep"`` or ``"prune"``, once done."""
        return None if self.report is None else self.report.verdict

    def require_report(self) -> ConditioningReport:
        """The report; raises :class:`CandidateFailed` when the job did not produce one."""
        if self.status == "done" and self.report is not None:
            return self.report
        reason = self.error or self.data.get("detail") or "no reason given"
        raise CandidateFailed(f"candidate {self.id} ended {self.status!r}: {reason}", candidate=self)


@dataclass(frozen=True)
class _Sleep:
    seconds: float


# An operation yields requests and pauses, receives responses, returns its result.
_Operation = Generator["httpx.Request | _Sleep", "httpx.Response | None", T]


def spec_payload(spec: SpecLike, path: str = "spec") -> Any:
    """A spec as the JSON value the service receives (unvalidated: the service judges; NumPy
    numbers read as Python's, a NaN or infinity refused at ``path``, see :func:`json_safe`)."""
    if isinstance(spec, ArchitectureSpec):
        return spec.model_dump(mode="json", exclude_none=True, by_alias=True)
    if isinstance(spec, (str, bytes)):  # read strictly: json.loads would drop a repeated key's first value
        return json_safe(load_spec_json(spec), path)  # Python's json reads NaN, which JSON has not
    if not isinstance(spec, Mapping):  # dict() of a list of specs makes a nonsense spec of its first keys
        raise TypeError(
            f"a spec is a dict, JSON text or nas.ArchitectureSpec, but got a {type(spec).__name__}; "
            "several specs go to submit_many / condition_many"
        )
    return json_safe(spec, path)


def options_payload(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Tuning options as the JSON object the service receives (see :func:`json_safe`)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):  # dict("abc") said "dictionary update sequence element #0"
        raise TypeError(f"options is a dict of tuning options, e.g. {{'steps': 10}}, but got {options!r:.200}")
    safe: dict[str, Any] = json_safe(options, "options")
    return safe


def json_safe(value: Any, path: str) -> Any:
    """``value`` as JSON can carry it: NumPy and torch numbers and arrays as Python numbers and
    lists (a search space computed with NumPy gives ``np.int64``), tuples as lists. A NaN or an
    infinity, which JSON has no literal for, is a ValueError naming its path
    (``spec.blocks[0].layers[1].factor``), and anything else JSON cannot carry a TypeError naming
    it: httpx refused the whole body with "Out of range float values are not JSON compliant" or
    "not JSON serializable", naming nothing."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path} is {value}: JSON carries finite numbers only")
        return value
    if isinstance(value, Mapping):
        if bad := next((key for key in value if not isinstance(key, str)), None):
            raise TypeError(f"{path} has the key {bad!r:.100}, which is no text: the keys of a JSON object are strings")
        return {key: json_safe(item, json_key(path, key)) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if type(value).__module__.split(".")[0] in ("numpy", "torch") and hasattr(value, "tolist"):
        return json_safe(value.tolist(), path)
    raise TypeError(f"{path} is a {type(value).__name__}, which JSON cannot carry: give numbers, text, lists and dicts")


_BATCHES_PAGE = 1000  # the service's largest page

# a proxy's answers when the request went on to the service and no answer came back
_RELAYED_WITHOUT_ANSWER = frozenset({502, 504})


def _may_have_acted(error: httpx.TransportError) -> bool:
    """Whether a failed try may have been carried out: the request may have been sent (a read or a
    write that failed, a broken answer), not a connection never made or a pool never left."""
    return not isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # an HTTP date; text that is neither (a proxy's "soon") leaves the backoff as it is
        parsed = email.utils.parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError):
        return None
    return None if parsed is None else max(0.0, parsed.timestamp() - time.time())


def _problem(response: httpx.Response) -> dict[str, Any]:
    """The problem+json document of an error answer, or the text as its detail."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    text = response.text.strip()
    return {"status": response.status_code, "detail": text[:2000] if text else None}


def decode(response: httpx.Response) -> Any:
    """The JSON of a 2xx answer; the typed :class:`~nas.errors.PreflightError` otherwise (an
    answer that is not the API's, a web page or a redirect: :class:`~nas.errors.UnexpectedResponseError`)."""
    if response.is_success:
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            raise UnexpectedResponseError(
                f"{_requested(response)} answered HTTP {response.status_code} with {kind}, not the Preflight "
                "API's JSON; is PREFLIGHT_URL the service's base URL?"
            ) from None
    if response.is_redirect:  # httpx does not follow them: the body would be sent again elsewhere
        location = response.headers.get("location", "nowhere")
        raise UnexpectedResponseError(
            f"{_requested(response)} answered HTTP {response.status_code}, a redirect to {location}; "
            "set PREFLIGHT_URL to where the service answers (https:// behind a TLS proxy?)"
        )
    problem = _problem(response)
    # a proxy's own 413 or 429 still says what to do (a smaller body, slower); its other pages do not
    if response.is_client_error and response.status_code not in (413, 429) and not _from_the_api(response, problem):
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        raise UnexpectedResponseError(
            f"{_requested(response)} answered HTTP {response.status_code} with {kind}, not the Preflight API's "
            "problem document; is PREFLIGHT_URL the service's base URL (a proxy's own page answered)?"
        )
    raise error_for_status(response.status_code, problem)


def _from_the_api(response: httpx.Response, problem: dict[str, Any]) -> bool:
    """Whether an error answer is the service's own: JSON with the problem document's status (the
    API answers every error so, RFC 9457); a web page or an empty body is a proxy's or another server's."""
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind.endswith("json") and problem.get("status") == response.status_code


def _requested(response: httpx.Response) -> str:
    return f"{response.request.method} {_shown(response.request.url)}"


def _candidate(data: Any) -> Candidate:
    """A candidate of the API's answer; an answer of another shape is not the service's."""
    if not isinstance(data, Mapping) or data.get("id") is None or not isinstance(data.get("status"), str):
        raise UnexpectedResponseError(
            f"the answer is not a Preflight candidate (got {_shape_of(data)}); is PREFLIGHT_URL the service's base URL?"
        )
    try:
        return Candidate.from_json(data)
    except ValidationError as refused:  # a report this client cannot read: pydantic's error named no request
        fault = refused.errors()[0]
        raise UnexpectedResponseError(
            f"candidate {data['id']}: its report cannot be read at {json_path(('report', *fault['loc']))}: "
            f"{fault['msg']} (a service of another release?)"
        ) from None


def _renumbered(refusal: SpecRejectedError, start: int) -> SpecRejectedError:
    """A batch's refusal with its ``specs[i]`` paths counted from the whole list, not the batch."""
    if not start:
        return refusal

    def shifted(text: Any) -> Any:
        return _SPEC_INDEX.sub(lambda m: f"specs[{int(m.group(1)) + start}]", text) if isinstance(text, str) else text

    problem = dict(refusal.problem or {})
    problem["detail"] = shifted(problem.get("detail"))
    if isinstance(problem.get("errors"), list):
        problem["errors"] = [
            {**issue, "path": shifted(issue.get("path"))} if isinstance(issue, Mapping) else issue
            for issue in problem["errors"]
        ]
    return type(refusal)(refusal.status, problem)


_SPEC_INDEX = re.compile(r"\bspecs\[(\d+)\]")
_PASSWORD = re.compile(r"(//[^/@:]*:)[^/@]*@")  # the password of a URL's userinfo


def _shown(url: Any) -> str:
    """A URL for a message, a password in it written ``***`` (error messages reach logs); by text,
    so that a URL that does not parse is shown the same way."""
    return _PASSWORD.sub(r"\1***@", str(url))


def _shape_of(data: Any) -> str:
    if isinstance(data, Mapping):
        return f"an object with keys {sorted(map(str, data))[:8]}"
    return "nothing" if data is None else f"a JSON {type(data).__name__}"


def _base_url(url: str | None) -> str:
    """The service's base URL from ``url``, else ``PREFLIGHT_URL``, else the default; checked here,
    since httpx's InvalidURL came at the first call (an env file's newline, ``http://[::1``)."""
    source = "url" if url else "PREFLIGHT_URL"
    text = (url or os.environ.get("PREFLIGHT_URL") or DEFAULT_URL).strip().rstrip("/")
    shown = _shown(text)  # it may not parse: the password is cut out of the text
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise ClientSettingError(f"{source} {shown!r:.200} is not a URL ({exc}); give e.g. {DEFAULT_URL}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ClientSettingError(f"{source} {shown!r:.200} is not an http(s) URL with a host; give e.g. {DEFAULT_URL}")
    return text


def _wait_seconds(timeout: Any) -> float | None:
    """A wait's timeout as seconds or None. A NaN deadline is never reached, so it polled forever."""
    if timeout is None:
        return None
    if not is_real(timeout):  # NumPy numbers are numbers, as the gate and the pruner take them
        raise TypeError(f"timeout is a number of seconds or None, but got {timeout!r:.100}")
    if math.isnan(float(timeout)):
        raise ValueError("timeout is a number of seconds or None, but got nan")
    return float(timeout)


class _Core:
    """The operations, free of I/O: what both clients share."""

    def __init__(
        self,
        url: str | None,
        token: str | None,
        timeout: float,
        retry: RetryPolicy,
        max_poll: float,
        rng: random.Random | None,
    ) -> None:
        if url is not None and not isinstance(url, str):
            raise TypeError(f"url must be the service's base URL as a string, but got {url!r}.")
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a nas.client.RetryPolicy, e.g. RetryPolicy(attempts=1), but got {retry!r}.")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, but got {timeout=}.")
        if not (math.isfinite(max_poll) and max_poll > 0):
            raise ValueError(f"max_poll must be a positive number of seconds, but got {max_poll=}.")
        self.url = _base_url(url)
        source = "token" if token is not None else "PREFLIGHT_API_TOKEN"
        token = token if token is not None else os.environ.get("PREFLIGHT_API_TOKEN")
        if token is not None and not isinstance(token, str):
            raise TypeError(f"token must be a string, but got {type(token).__name__}.")
        token = token.strip() if token is not None else None  # as the service reads it (an env file's newline)
        if token and not all("!" <= c <= "~" for c in token):  # a header of other characters never reaches the service
            raise ClientSettingError(
                f"{source} holds a character no token has (tokens are printable ASCII without spaces); "
                "copy it again from `preflight token create`."
            )
        self.headers = {"accept": "application/json, application/problem+json"}
        if token:
            if httpx.URL(self.url).userinfo:  # httpx sends them as Basic auth, over the bearer token
                raise ClientSettingError(
                    f"the service URL {_shown(self.url)} holds a user name or password, which would be sent "
                    f"as Basic auth in place of {source}'s bearer token: drop them from the URL"
                )
            self.headers["authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self.retry = retry
        self.answered = False  # the service has answered this client: an outage is then ridden out
        self.max_poll = max_poll
        self.rng = rng if rng is not None else random.Random()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
        deadline: float | None = None,
        poll: Callable[[], float] | None = None,
        deletes: bool = False,
    ) -> _Operation[Any]:
        """One API call with retries; returns the decoded JSON. ``deadline`` (``time.monotonic``):
        the end of the operation it serves (a wait, a ``condition``), until which an outage is
        ridden out (``RetryPolicy.ride_out``). ``poll``: a long-poll's seconds, computed again for
        each try, so that a retry does not ask the server for the first try's whole poll.
        ``deletes``: a 404 to a retry after a try that may have reached the service and got no
        answer of its own (``_may_have_acted``) is None: that try may have deleted it."""
        attempt = 0
        acted = False  # an earlier try may have been carried out
        while True:
            attempt += 1
            request = self._build(method, path, params, body, timeout, poll)
            try:
                response = yield request
            except httpx.DecodingError as exc:  # a body its own headers misdescribe: a proxy's doing
                raise UnexpectedResponseError(
                    f"{method} {_shown(request.url)} answered a body that cannot be decoded ({exc}); "
                    "is PREFLIGHT_URL the service's base URL, with no proxy rewriting its answers?"
                ) from None
            except httpx.TransportError as exc:
                acted = acted or _may_have_acted(exc)
                if not (self.retry.retries_error(exc) and self._another_try(attempt, deadline, None, poll is not None)):
                    raise PreflightConnectionError(
                        f"{method} {_shown(request.url)} failed after {attempt} tries: "
                        f"{type(exc).__name__}: {exc}; is the service running at {_shown(self.url)}?",
                        url=_shown(self.url),
                    ) from exc
                yield _Sleep(self._pause(attempt, deadline))
                continue
            assert response is not None
            self.answered = True
            status = response.status_code
            if self.retry.retries_status(status) and self._another_try(attempt, deadline, status, poll is not None):
                acted = acted or status in _RELAYED_WITHOUT_ANSWER
                yield _Sleep(self._pause(attempt, deadline, _retry_after(response)))
                continue
            if deletes and acted and status == 404:
                return None
            return decode(response)

    def _build(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        timeout: float | None,
        poll: Callable[[], float] | None,
    ) -> httpx.Request:
        if poll is not None:  # the poll left now, and the request's time with it
            seconds = poll()
            params, timeout = {**(params or {}), "timeout": round(seconds, 3)}, seconds + self.timeout
        return httpx.Request(
            method,
            self.url + path,
            params=params,
            json=body,
            headers=self.headers,
            extensions={"timeout": httpx.Timeout(timeout or self.timeout, connect=10.0).as_dict()},
        )

    def _another_try(self, attempt: int, deadline: float | None, status: int | None, long_poll: bool) -> bool:
        """Whether a failed try (no answer: ``status`` None) is followed by another. An outage of
        a service that has answered this client before is ridden out until ``deadline``, or, for
        a long-poll without one, for as long as it waits. A long-poll past its deadline does not try
        a service that gave no answer again. Otherwise ``retry.attempts`` tries in all."""
        outage = status is None or status in _OUTAGE_STATUSES
        now = time.monotonic()
        if self.retry.ride_out and self.answered and outage:
            if (deadline is not None and now < deadline) or (deadline is None and long_poll):
                return True
        if long_poll and status is None and deadline is not None and now >= deadline:
            return False
        return attempt < self.retry.attempts

    def _pause(self, attempt: int, deadline: float | None, retry_after: float | None = None) -> float:
        """The policy's pause (at least ``RIDE_OUT_PAUSE`` past its attempts), cut short at the
        deadline of an operation that is still running."""
        pause = self.retry.delay(attempt, self.rng, retry_after)
        if attempt >= self.retry.attempts:
            pause = max(pause, RIDE_OUT_PAUSE)
        left = None if deadline is None else deadline - time.monotonic()
        return pause if left is None or left <= 0 else min(pause, left)

    def submit(
        self, spec: SpecLike, options: Mapping[str, Any] | None, deadline: float | None = None
    ) -> _Operation[Candidate]:
        body = {"spec": spec_payload(spec), "options": options_payload(options)}
        return _candidate((yield from self.request("POST", "/v1/candidates", body=body, deadline=deadline)))

    def submit_many(
        self, specs: Iterable[SpecLike], options: Mapping[str, Any] | None, deadline: float | None = None
    ) -> _Operation[list[Candidate]]:
        """Queue the specs, ``MAX_BATCH`` to a request (the service's default ``PREFLIGHT_MAX_BATCH``:
        a larger batch was a 413). A refusal names the spec by its place in ``specs``; the batches
        before it stay queued (submitting them again finds the same jobs)."""
        if isinstance(specs, Mapping | str | bytes | ArchitectureSpec):
            raise TypeError("submit_many takes a list of specs; one spec goes to submit / condition")
        payloads = [spec_payload(s, f"specs[{i}]") for i, s in enumerate(specs)]
        sent = options_payload(options)
        out: list[Candidate] = []
        for start in range(0, len(payloads), MAX_BATCH):
            body = {"specs": payloads[start : start + MAX_BATCH], "options": sent}
            try:
                data = yield from self.request("POST", "/v1/candidates", body=body, deadline=deadline)
            except SpecRejectedError as refusal:
                raise _renumbered(refusal, start) from None
            if not isinstance(data, Mapping) or not isinstance(data.get("candidates"), list):
                raise UnexpectedResponseError(f"the answer is not a list of candidates (got {_shape_of(data)})")
            out.extend(_candidate(item) for item in data["candidates"])
        return out

    def get(self, candidate_id: str) -> _Operation[Candidate]:
        return _candidate((yield from self.request("GET", _candidate_path(candidate_id))))

    def cancel(self, candidate_id: str) -> _Operation[Candidate | None]:
        data = yield from self.request("DELETE", _candidate_path(candidate_id))
        return _candidate(data) if isinstance(data, Mapping) and "id" in data else None

    def wait(self, candidate_id: str, timeout: float | None) -> _Operation[Candidate]:
        """Long-poll until the candidate is finished or ``timeout`` seconds have passed."""
        timeout = _wait_seconds(timeout)
        path = _candidate_path(candidate_id) + "/wait"
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            data = yield from self.request("GET", path, deadline=deadline, poll=lambda: self._poll_seconds(deadline))
            candidate = _candidate(data)
            if candidate.finished:
                return candidate
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(
                    f"candidate {candidate.id} is still {candidate.status!r} after {timeout} s",
                    candidate=candidate,
                )

    def _poll_seconds(self, deadline: float | None) -> float:
        """One long-poll's seconds: ``max_poll``, the service's longest, or what is left of the wait."""
        left = self.max_poll if deadline is None else deadline - time.monotonic()
        return max(0.0, min(self.max_poll, left, MAX_SERVER_POLL))

    def wait_many(
        self, ids: Iterable[str], timeout: float | None, unfinished: Unfinished = "raise"
    ) -> _Operation[list[Candidate]]:
        """Wait for every candidate, all within one ``timeout``; one still unfinished then raises
        WaitTimeout, or with ``unfinished="return"`` is returned as last seen."""
        timeout = _wait_seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for candidate_id in ids:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out.append((yield from self.wait(candidate_id, left)))
            except WaitTimeout as exc:
                if unfinished == "raise" or exc.candidate is None:
                    raise
                out.append(exc.candidate)
        return out

    def condition(
        self, spec: SpecLike, options: Mapping[str, Any] | None, timeout: float | None
    ) -> _Operation[Candidate]:
        timeout = _wait_seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout  # a submission within it rides out a restart
        candidate = yield from self.submit(spec, options, deadline)
        if candidate.finished:
            return candidate
        return (yield from self.wait(candidate.id, None if deadline is None else max(0.0, deadline - time.monotonic())))

    def condition_many(
        self,
        specs: Iterable[SpecLike],
        options: Mapping[str, Any] | None,
        timeout: float | None,
        unfinished: Unfinished = "raise",
    ) -> _Operation[list[Candidate]]:
        timeout = _wait_seconds(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        submitted = yield from self.submit_many(specs, options, deadline)
        pending = [c.id for c in submitted if not c.finished]
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        waited = iter((yield from self.wait_many(pending, left, unfinished)))
        return [c if c.finished else next(waited) for c in submitted]

    def study_summary(self, study: str) -> _Operation[dict[str, Any]]:
        if not isinstance(study, str):
            raise TypeError(f"study is the study's name, a string, but got {study!r}")
        # dots too: httpx resolves a "." or ".." segment away before sending (/v1/studies/../summary is /v1/summary)
        name = quote(study, safe="").replace(".", "%2E")
        summary = yield from self.request("GET", f"/v1/studies/{name}/summary")
        if not isinstance(summary, dict):
            raise UnexpectedResponseError(f"the answer is not a study summary (got {_shape_of(summary)})")
        return summary

    def upload_batch(self, body: dict[str, Any]) -> _Operation[str]:
        """Post a body of :func:`_batch_body`."""
        try:
            stored = yield from self.request("POST", "/v1/batches", body=body)
        except SpecRejectedError as refusal:
            raise BatchRejectedError(refusal.status, refusal.problem) from None
        if not isinstance(stored, Mapping) or stored.get("id") is None:
            raise UnexpectedResponseError(f"the answer is not a stored data batch (got {_shape_of(stored)})")
        for warning in stored.get("warnings", []):  # e.g. imbalanced labels: the probe's figure flatters
            warnings.warn(f"data batch {stored['id']}: {warning}", BatchWarning, stacklevel=4)
        return str(stored["id"])

    def delete_batch(self, batch_id: str) -> _Operation[None]:
        yield from self.request("DELETE", _batch_path(batch_id), deletes=True)

    def list_batches(self) -> _Operation[list[dict[str, Any]]]:
        """Every page of ``GET /v1/batches``."""
        batches: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": _BATCHES_PAGE} | ({} if cursor is None else {"cursor": cursor})
            page = yield from self.request("GET", "/v1/batches", params=params)
            if not isinstance(page, Mapping) or not isinstance(page.get("batches"), list):
                raise UnexpectedResponseError(f"the answer is not a list of data batches (got {_shape_of(page)})")
            batches += page["batches"]
            cursor = page.get("next_cursor")
            if cursor is None:
                return batches


def _batch_body(x: Any, y: Any) -> dict[str, Any]:
    """The JSON body of an upload, its NaNs and infinities refused here (about a second per 2**20
    float32 numbers: the async client runs it in a thread)."""
    body = {"x": _nested(x, "x")} | ({} if y is None else {"y": _nested(y, "y")})
    for name, value in body.items():
        _refuse_non_finite(name, value)
    return body


def _nested(array: Any, name: str) -> Any:
    """Nested lists from an array-like (a tensor, a NumPy array), or from a list or tuple of them
    (one tensor per sample, as ``[dataset[i][0] for i in range(64)]`` gives), which JSON cannot
    carry as they are."""
    if array is None:  # np.asarray(None) is nan: "x is nan" named the wrong fault
        raise TypeError(f"{name} is required: an array of samples (a tensor, a NumPy array or nested lists)")
    if isinstance(array, Mapping):
        raise TypeError(
            f"{name} is an array of samples (a tensor, a NumPy array or nested lists), not a "
            f"{type(array).__name__}: call upload_batch(x, y) with the inputs and the labels"
        )
    return _lists(array)


def _lists(array: Any) -> Any:
    if hasattr(array, "detach"):  # a torch tensor: read through NumPy (bfloat16 has no NumPy dtype)
        array = array.detach().cpu()
        if array.is_floating_point() and array.element_size() < 4:
            array = array.float()
        array = array.numpy()
    if hasattr(array, "tolist"):
        dtype = getattr(array, "dtype", None)
        if getattr(dtype, "kind", "") == "b":  # a mask or binary image: JSON's true is no number, 1 is
            return array.astype("int64").tolist()
        short = getattr(dtype, "kind", "") == "f" and getattr(dtype, "itemsize", 8) <= 4
        return _shortest(array) if short else array.tolist()
    if isinstance(array, list | tuple):
        return [_lists(item) for item in array]
    return array


def _shortest(array: Any) -> Any:
    """A float32 (or float16) array as nested floats that print in float32's shortest form
    (``0.1``, not float64's ``0.10000000149011612``): the engine reads float32, and about 12
    bytes a number in place of 20 lets 2**20 of them through the body limit. NumPy's ``str`` of
    a float32 is its shortest form; a value it would not give back exactly keeps its float64."""
    import numpy as np

    exact = np.asarray(array, dtype=np.float32)
    short = exact.astype(str).astype(np.float64)
    return np.where(short.astype(np.float32) == exact, short, exact.astype(np.float64)).tolist()


def _refuse_non_finite(name: str, value: Any) -> None:
    """Name the first NaN or infinity of a batch: JSON cannot carry one, so httpx would refuse the
    whole body with "Out of range float values are not JSON compliant". Ragged or non-numeric
    input passes, for the service to name where it is."""
    import numpy as np

    try:
        array = np.asarray(value, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        return
    bad = np.argwhere(~np.isfinite(array))
    if len(bad):
        where = "".join(f"[{int(i)}]" for i in bad[0])
        raise ValueError(f"{name}{where} is {array[tuple(bad[0])]}: a data batch holds finite numbers only")


def _candidate_path(candidate_id: str) -> str:
    if not isinstance(candidate_id, str):  # a Candidate sent its 5 KB repr as the id; None sent "None"
        hint = " (pass candidate.id)" if isinstance(candidate_id, Candidate) else ""
        raise TypeError(f"a candidate id is a string{hint}, but got a {type(candidate_id).__name__}")
    return f"/v1/candidates/{_path_segment(candidate_id, 'candidate')}"


def _batch_path(batch_id: str) -> str:
    if not isinstance(batch_id, str):
        raise TypeError(f"a data batch id is a string, but got a {type(batch_id).__name__}")
    return f"/v1/batches/{_path_segment(batch_id, 'data batch')}"


def _path_segment(item_id: str, what: str) -> str:
    """The id as one path segment. An empty id, "." or ".." is none: the request would go to the
    collection or above it (an empty id read as a redirect to fix PREFLIGHT_URL)."""
    if item_id in ("", ".", ".."):
        raise ValueError(f"{item_id!r} is no {what} id")
    return quote(item_id, safe="")


class PreflightClient:
    """Blocking client of the Preflight REST API; safe to share between threads.

    Args:
        url: the service's base URL; default ``PREFLIGHT_URL``, else ``http://127.0.0.1:8000``.
        token: the API token; default ``PREFLIGHT_API_TOKEN`` (none sent when unset).
        timeout: seconds allowed for one request (a long-poll gets its poll time on top).
        retry: when and how long to back off and retry.
        max_poll: the longest single long-poll; :meth:`wait` polls again until its timeout.
        rng: randomness of the backoff jitter (seed it in tests).
        transport: an httpx transport, e.g. ``httpx.MockTransport`` in tests.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        max_poll: float = 30.0,
        rng: random.Random | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._core = _Core(url, token, timeout, retry or RetryPolicy(), max_poll, rng)
        self._http = httpx.Client(transport=transport)

    @property
    def url(self) -> str:
        return self._core.url

    def _run(self, operation: _Operation[T]) -> T:
        try:
            step = next(operation)
            while True:
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    step = operation.send(None)
                    continue
                try:
                    response = self._http.send(step)
                except (httpx.TransportError, httpx.DecodingError) as exc:
                    step = operation.throw(exc)
                else:
                    step = operation.send(response)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]  # the operation's declared result

    def submit(self, spec: SpecLike, options: Mapping[str, Any] | None = None) -> Candidate:
        """Queue one spec for conditioning (or find it done already); returns at once."""
        return self._run(self._core.submit(spec, options))

    def submit_many(self, specs: Iterable[SpecLike], options: Mapping[str, Any] | None = None) -> list[Candidate]:
        """Queue many specs in one request, so the worker pool takes them in parallel."""
        return self._run(self._core.submit_many(specs, options))

    def get(self, candidate_id: str) -> Candidate:
        """The candidate's status and, once done, its report."""
        return self._run(self._core.get(candidate_id))

    def wait(self, candidate_id: str, timeout: float | None = None) -> Candidate:
        """Long-poll until the candidate is done, failed or cancelled; raises
        :class:`~nas.errors.WaitTimeout` after ``timeout`` seconds (None: no limit)."""
        return self._run(self._core.wait(candidate_id, timeout))

    def wait_many(
        self, ids: Iterable[str], timeout: float | None = None, *, unfinished: Unfinished = "raise"
    ) -> list[Candidate]:
        """:meth:`wait` for each id, all within one ``timeout``; a candidate still unfinished then
        raises :class:`~nas.errors.WaitTimeout`, or with ``unfinished="return"`` is returned as
        last seen (queued or running)."""
        return self._run(self._core.wait_many(ids, timeout, unfinished))

    def condition(
        self, spec: SpecLike, options: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Candidate:
        """Submit and wait."""
        return self._run(self._core.condition(spec, options, timeout))

    def condition_many(
        self,
        specs: Iterable[SpecLike],
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        unfinished: Unfinished = "raise",
    ) -> list[Candidate]:
        """Submit all specs in one request and wait for all, in the order given (``unfinished``:
        as for :meth:`wait_many`)."""
        return self._run(self._core.condition_many(specs, options, timeout, unfinished))

    def cancel(self, candidate_id: str) -> Candidate | None:
        """Cancel a queued or running candidate."""
        return self._run(self._core.cancel(candidate_id))

    def study_summary(self, study: str) -> dict[str, Any]:
        """Counts and score quantiles of a study's candidates."""
        return self._run(self._core.study_summary(study))

    def upload_batch(self, x: Any, y: Any = None) -> str:
        """Upload a batch of inputs ``x`` [N, *input_shape] and optional labels ``y`` [N] (arrays
        or nested lists); returns its id, for the option ``data``: candidates submitted with
        ``{"data": id}`` are conditioned, and their trainability probed, on this batch.

        Float32 and narrower floats are sent in float32's shortest form. Raises
        :class:`~nas.errors.BatchRejectedError` naming the JSON path the service refused,
        :class:`~nas.errors.ConflictError` when the token holds its quota of batches, and
        warns :class:`~nas.errors.BatchWarning` for labels that make reports read wrong."""
        return self._run(self._core.upload_batch(_batch_body(x, y)))

    def delete_batch(self, batch_id: str) -> None:
        """Let go of an uploaded batch, freeing a place in the token's quota of batches (the
        content is deleted with its last holder). Raises :class:`~nas.errors.NotFoundError` when
        the token holds no such batch, :class:`~nas.errors.ConflictError` while its queued or
        running candidates name it."""
        self._run(self._core.delete_batch(batch_id))

    def list_batches(self) -> list[dict[str, Any]]:
        """The data batches this token holds (an admin token: every stored one), in the order of
        their ids, as ``GET /v1/batches`` gives them: ``{"id", "shape", "labels", "balance",
        "warnings"}`` each."""
        return self._run(self._core.list_batches())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PreflightClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncPreflightClient:
    """The same API as :class:`PreflightClient`, for asyncio; same arguments."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        max_poll: float = 30.0,
        rng: random.Random | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._core = _Core(url, token, timeout, retry or RetryPolicy(), max_poll, rng)
        self._transport = transport
        # one connection pool per event loop: httpx's connections belong to the loop that opened them;
        # loops in several threads (Optuna's n_jobs, each with asyncio.run) share the dict
        self._pools: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._pools_lock = threading.Lock()

    @property
    def url(self) -> str:
        return self._core.url

    def _pool(self) -> httpx.AsyncClient:
        """This event loop's connection pool. A client used in another loop failed with "Event loop
        is closed" after ``asyncio.run`` had closed the first, or with "bound to a different event
        loop" while it was open. The pool of a loop that has closed is dropped: its connections
        cannot be closed from another loop and are left to the garbage collector (use one client per
        loop, or ``aclose()`` it in each loop before that loop ends)."""
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            for closed in [other for other in self._pools if other is not loop and other.is_closed()]:
                del self._pools[closed]
            if loop not in self._pools:
                self._pools[loop] = httpx.AsyncClient(transport=self._transport)
            return self._pools[loop]

    async def _run(self, operation: _Operation[T]) -> T:
        http = self._pool()
        try:
            step = next(operation)
            while True:
                if isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                    step = operation.send(None)
                    continue
                try:
                    response = await http.send(step)
                except (httpx.TransportError, httpx.DecodingError) as exc:
                    step = operation.throw(exc)
                else:
                    step = operation.send(response)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]  # the operation's declared result

    async def submit(self, spec: SpecLike, options: Mapping[str, Any] | None = None) -> Candidate:
        return await self._run(self._core.submit(spec, options))

    async def submit_many(self, specs: Iterable[SpecLike], options: Mapping[str, Any] | None = None) -> list[Candidate]:
        return await self._run(self._core.submit_many(specs, options))

    async def get(self, candidate_id: str) -> Candidate:
        return await self._run(self._core.get(candidate_id))

    async def wait(self, candidate_id: str, timeout: float | None = None) -> Candidate:
        return await self._run(self._core.wait(candidate_id, timeout))

    async def wait_many(
        self, ids: Iterable[str], timeout: float | None = None, *, unfinished: Unfinished = "raise"
    ) -> list[Candidate]:
        return await self._run(self._core.wait_many(ids, timeout, unfinished))

    async def condition(
        self, spec: SpecLike, options: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Candidate:
        return await self._run(self._core.condition(spec, options, timeout))

    async def condition_many(
        self,
        specs: Iterable[SpecLike],
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        unfinished: Unfinished = "raise",
    ) -> list[Candidate]:
        return await self._run(self._core.condition_many(specs, options, timeout, unfinished))

    async def cancel(self, candidate_id: str) -> Candidate | None:
        return await self._run(self._core.cancel(candidate_id))

    async def study_summary(self, study: str) -> dict[str, Any]:
        return await self._run(self._core.study_summary(study))

    async def upload_batch(self, x: Any, y: Any = None) -> str:
        """See :meth:`PreflightClient.upload_batch` (the arrays are written out in a thread)."""
        return await self._run(self._core.upload_batch(await asyncio.to_thread(_batch_body, x, y)))

    async def delete_batch(self, batch_id: str) -> None:
        """See :meth:`PreflightClient.delete_batch`."""
        await self._run(self._core.delete_batch(batch_id))

    async def list_batches(self) -> list[dict[str, Any]]:
        """See :meth:`PreflightClient.list_batches`."""
        return await self._run(self._core.list_batches())

    async def aclose(self) -> None:
        """Close this event loop's connections (a pool another open loop holds is closed by
        ``aclose()`` in that loop)."""
        with self._pools_lock:
            pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()

    async def __aenter__(self) -> AsyncPreflightClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

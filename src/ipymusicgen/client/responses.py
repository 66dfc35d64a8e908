"""The response side of the client: read a body within bounds, scrub the key, unwrap, classify, parse.

No I/O here. A face reads the body through a `BodyReader` (size and time bounded) and hands the
response to `Responses.process`, which scrubs every string of the decoded body (a server that echoes
the key cannot leak it into an error, a record or the journal), unwraps the envelope and raises the
right error. An error's class follows the HTTP status first; the message decides only where the
status is ambiguous (a 5xx, or an error status inside a 200 envelope).
"""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError as PydanticValidationError

from ..errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    CreateOutcomeUnknownError,
    EnvelopeAuthenticationError,
    EnvelopeError,
    InsufficientCreditsError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RedirectRefusedError,
    ServerAuthenticationError,
    UnprocessableEntityError,
    refused_key_hint,
)
from ..models.schema import TaskRecord, V2Song, ValidationErrorBody
from .retry import retry_after

T = TypeVar("T")

DOUBTFUL_STATUS = frozenset({408, 500, 502, 503, 504, 520, 522, 524})
"""Statuses after which a paid request may or may not have been carried out (not 501: never done)."""
NEVER_DONE_5XX = frozenset({501, 505})
"""The 5xx statuses that say the request was not carried out (not implemented, HTTP version refused)."""


DONE_ELSEWHERE = 303
"""303 See Other answers a POST that was carried out, pointing at its result: a paid one may be done and charged."""


def create_may_have_landed(exc: BaseException) -> bool:
    """Whether a failed paid create may have reached the service (so it must not be resent blindly)."""
    if isinstance(exc, CreateOutcomeUnknownError | APIResponseValidationError):
        return True
    return isinstance(exc, APIStatusError) and is_doubtful(exc.status_code)


def is_doubtful(status: int) -> bool:
    """Whether a paid request answered with `status` may have been carried out: a timeout, a 303 (done; the
    answer is elsewhere), or any 5xx (a proxy's 598/599 or a CDN's 52x come after the request went on) except
    those that say it was not."""
    if status == DONE_ELSEWHERE:
        return True
    return status in DOUBTFUL_STATUS or (500 <= status < 600 and status not in NEVER_DONE_5XX)


DOUBT_HINT = (
    "The request may still have been carried out: it was NOT resent, to avoid paying twice. Check key_info() "
    "(the music count) and your recent tasks before trying again."
)
MAX_BODY_BYTES = 10 * 1024 * 1024
"""The largest API answer read (JSON of a few thousand tasks is well under 1 MB); larger is refused."""
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecursionError, MemoryError, PydanticValidationError)
"""What parsing a hostile body can raise: all of it becomes an `APIResponseValidationError`."""


@dataclass(frozen=True)
class Endpoint:
    """One row of the endpoint table. `paid` calls are never retried once they may have arrived."""

    name: str
    method: str
    path: str
    v2: bool = False
    paid: bool = False


GENERATE = Endpoint("generate", "POST", "/v1/music/generate", paid=True)
LYRICS = Endpoint("lyrics", "POST", "/v1/lyrics", paid=True)
KEY_INFO = Endpoint("key info", "GET", "/v1/get_api_key_info")
TASKS = Endpoint("tasks", "GET", "/v1/music/tasks")
VIBE = Endpoint("generate-vibe", "POST", "/v1/music/generate-vibe", paid=True)
WAV = Endpoint("generate-wav", "POST", "/v1/music/generate-wav", paid=True)
MP4 = Endpoint("generate-mp4", "POST", "/v1/music/generate-mp4", paid=True)
SUBMIT_V2 = Endpoint("v2 submit", "POST", "/v2/submit", v2=True, paid=True)
QUERY_V2 = Endpoint("v2 query", "GET", "/v2/query", v2=True)


def public_url(url: httpx.URL | str) -> httpx.URL:
    """The address to name in a message: no user info (proxy credentials), query or fragment."""
    return httpx.URL(url).copy_with(query=None, fragment=None, userinfo=b"")


class BodyReader:
    """Collects a streamed body, refusing one larger than `limit` bytes or slower than `deadline`.

    The faces feed it chunk by chunk, so a server that drips one byte a second or never finishes
    cannot hold a call past its deadline (httpx's timeouts bound each read, not the whole body).
    """

    def __init__(self, response: httpx.Response, *, deadline: float, limit: int = MAX_BODY_BYTES) -> None:
        self.response = response
        self.deadline = deadline
        self.limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise self._too_large(int(declared))

    def _too_large(self, size: int) -> APIResponseValidationError:
        return APIResponseValidationError(
            f"The answer from {self.response.request.url.host} is larger than {self.limit // 2**20} MB "
            f"({size} bytes or more); not read.",
            request=self.response.request,
        )

    def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self.limit:
            raise self._too_large(self._size)
        self._chunks.append(chunk)
        if time.monotonic() > self.deadline:
            raise httpx.ReadTimeout("the answer did not finish in time", request=self.response.request)

    def finish(self) -> httpx.Response:
        """The response, readable as usual (`.content`, `.json()`), with the body collected."""
        self.response._content = b"".join(self._chunks)  # what `Response.read()` sets; the stream is consumed
        return self.response


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        for name in ("message", "msg", "detail", "error", "error_message"):
            value = body.get(name)
            if isinstance(value, str) and value:
                return value[:300]
            if isinstance(value, dict):
                return _error_text(value)
    if isinstance(body, str):
        return body[:300]
    return ""


def _mentions_key_problem(text: str) -> bool:
    lowered = text.lower()
    return ("key" in lowered or "auth" in lowered or "token" in lowered) and any(
        word in lowered
        for word in (
            "invalid",
            "missing",
            "unauthor",
            "not found",
            "required",
            "expired",
            "wrong",
            "forbidden",
            "denied",
            "no api",
        )
    )


def _mentions_budget(text: str) -> bool:
    """A team gateway's refusal: its budgets (a user's or the team's), which the user cannot top up."""
    return "budget" in text.lower()


def _mentions_credits(text: str) -> bool:
    lowered = text.lower()
    return any(
        word in lowered
        for word in (
            "credit",
            "insufficient",
            "balance",
            "quota",
            "not enough",
            "music count",
            "left count",
            "counts left",
            "count left",
            "points",
        )
    )


def _is_envelope(body: Any) -> bool:
    if not isinstance(body, dict) or "status" not in body:
        return False
    status = body["status"]
    is_code = (isinstance(status, int) and not isinstance(status, bool)) or (
        isinstance(status, str) and status.isdigit() and len(status) < 10
    )
    return is_code and ("data" in body or "message" in body or "msg" in body)


def task_records(data: Any) -> list[TaskRecord]:
    if isinstance(data, dict):
        data = data.get("tasks") or data.get("list") or data.get("items") or [data]
    if not isinstance(data, list):
        raise TypeError(f"expected a list of tasks, got {type(data).__name__}")
    return [TaskRecord.model_validate(item) for item in data]


def v2_songs(data: Any) -> list[V2Song]:
    if isinstance(data, dict):
        data = data.get("songs") or data.get("list") or data.get("data") or [data]
    if not isinstance(data, list):
        raise TypeError(f"expected a list of songs, got {type(data).__name__}")
    return [V2Song.model_validate(item) for item in data]


@functools.lru_cache(maxsize=8)
def key_pattern(key: str) -> re.Pattern[str]:
    """The key as a server may echo it: as is, URL-encoded, JSON-escaped, in any case (a host is lower-cased)."""
    forms = {key, urllib.parse.quote(key), urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key)}
    forms.add(key.replace("/", "\\/"))
    return re.compile("|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)), re.IGNORECASE)


@functools.lru_cache(maxsize=8)
def _key_bytes_pattern(key: str) -> re.Pattern[bytes]:
    return re.compile(key_pattern(key).pattern.encode("utf-8"), re.IGNORECASE)


class Responses:
    """Turns responses and transport failures into results or errors, with the key scrubbed out.

    `key` is a callable so a client whose settings change is always scrubbed with its current key.
    """

    def __init__(self, key: Callable[[], str | None]) -> None:
        self._key = key

    # -- the key never rides along -------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """Text with the key (if the server or the transport echoed it) masked."""
        key = self._key()
        return key_pattern(key).sub("***", text) if key and len(key) >= 4 and isinstance(text, str) else text

    def scrub(self, value: Any) -> Any:
        """A decoded body with every string (keys of objects too) redacted; iterative, so depth is no risk."""
        key = self._key()
        if not key or len(key) < 4:
            return value
        pattern = key_pattern(key)
        root: list[Any] = [value]
        stack: list[tuple[Any, Any]] = [(root, 0)]
        while stack:
            parent, slot = stack.pop()
            item = parent[slot]
            if isinstance(item, str):
                parent[slot] = pattern.sub("***", item)
            elif isinstance(item, dict):
                clean = {(pattern.sub("***", k) if isinstance(k, str) else k): v for k, v in item.items()}
                parent[slot] = clean
                stack.extend((clean, k) for k in clean)
            elif isinstance(item, list):
                stack.extend((item, i) for i in range(len(item)))
        return root[0]

    def _scrub_response(self, response: httpx.Response) -> None:
        """The raw body and headers errors keep (`exc.response`) lose the key too."""
        key = self._key()
        if not key or len(key) < 4:
            return
        pattern = key_pattern(key)
        items = response.headers.multi_items()
        if any(pattern.search(name) or pattern.search(value) for name, value in items):
            response.headers = httpx.Headers([(pattern.sub("***", n), pattern.sub("***", v)) for n, v in items])
        content = getattr(response, "_content", None)
        if isinstance(content, bytes):
            response._content = _key_bytes_pattern(key).sub(b"***", content)
        reason = response.extensions.get("reason_phrase")
        if isinstance(reason, bytes):
            response.extensions["reason_phrase"] = _key_bytes_pattern(key).sub(b"***", reason)

    # -- transport failures --------------------------------------------------------------------------

    def transport_error(
        self, endpoint: Endpoint, exc: Exception, request: httpx.Request, not_sent: bool, attempt_id: str | None
    ) -> APIConnectionError:
        detail = self.redact(str(exc)) or type(exc).__name__
        where = public_url(request.url)
        if endpoint.paid and not not_sent:
            return CreateOutcomeUnknownError(
                f"The {endpoint.name} request may have reached {where} but no full answer came back ({detail}). "
                "It was NOT resent, to avoid paying twice. Check key_info() (the music count) and your "
                "recent tasks before trying again.",
                request=request,
                attempt_id=attempt_id,
            )
        if isinstance(exc, httpx.TimeoutException):
            return APITimeoutError(f"The music service at {where} did not answer in time ({detail}).", request=request)
        return APIConnectionError(f"Could not reach the music service at {where} ({detail}).", request=request)

    # -- answers ---------------------------------------------------------------------------------------

    def decode(self, endpoint: Endpoint, response: httpx.Response) -> Any:
        """The scrubbed JSON body, the scrubbed text if it is not JSON, or None if empty."""
        self._scrub_response(response)
        content = response.content
        try:
            return self.scrub(json.loads(content)) if content.strip() else None
        except (ValueError, RecursionError, MemoryError):
            if response.is_success:
                raise APIResponseValidationError(
                    f"The {endpoint.name} answer was not JSON (or too deep to read): {self._text(response)[:200]!r}",
                    request=response.request,
                    body=self._text(response)[:1000],
                ) from None
            return self._text(response)[:1000]

    def _text(self, response: httpx.Response) -> str:
        return self.redact(response.content[:4000].decode("utf-8", "replace"))

    def process(self, endpoint: Endpoint, response: httpx.Response) -> Any:
        """The unwrapped `data` of a good answer; otherwise the right `APIStatusError`."""
        if response.is_redirect or 300 <= response.status_code < 400:
            self._scrub_response(response)  # the error keeps the response: its Location and body may echo the key
            raise self.redirect_error(endpoint, response)
        body = self.decode(endpoint, response)
        try:
            if not response.is_success:
                raise self.status_error(endpoint, response, body)
            if _is_envelope(body):
                status = int(body["status"])
                if status != 200:
                    raise self.status_error(endpoint, response, body, envelope_status=status)
                if "data" in body:
                    return body["data"]
                return {k: v for k, v in body.items() if k not in ("status", "message", "msg")}
        except (RecursionError, MemoryError):
            raise APIResponseValidationError(f"The {endpoint.name} answer was too deeply nested to read.") from None
        if response.is_success and body is None:
            raise APIResponseValidationError(f"The {endpoint.name} answer was empty.", request=response.request)
        return body

    def redirect_error(
        self, endpoint: Endpoint, response: httpx.Response
    ) -> RedirectRefusedError | CreateOutcomeUnknownError:
        """A redirect is never followed (the key must not go to another address). To a paid create it says
        nothing of whether the create was carried out (a 303 says it was): its outcome is unknown."""
        location = response.headers.get("location", "")
        try:
            target = response.request.url.join(location).host if location else ""
        except (httpx.InvalidURL, ValueError):
            target = ""
        where = f" to {self.redact(target)!r}" if target else ""
        if endpoint.paid:
            return CreateOutcomeUnknownError(
                f"The {endpoint.name} request was answered HTTP {response.status_code}, a redirect{where}, which is "
                "never followed (the key must not go to another address). The request may have been carried out "
                "and charged: it was NOT resent, to avoid paying twice. Check key_info() (the music count) and your "
                "recent tasks, and base_url / v2_base_url, before trying again.",
                request=response.request,
            )
        return RedirectRefusedError(
            f"{endpoint.name}: the service answered HTTP {response.status_code}, a redirect{where}. API calls never "
            "follow redirects (the key must not go to another address); check base_url / v2_base_url.",
            response=response,
            body=None,
            status_code=response.status_code,
        )

    def status_error(
        self, endpoint: Endpoint, response: httpx.Response, body: Any, envelope_status: int | None = None
    ) -> APIStatusError:
        """The error for a refusal: by HTTP status first, by message only for a 5xx or an envelope status."""
        code = envelope_status if envelope_status is not None else response.status_code
        text = self.redact(_error_text(body) or response.reason_phrase) or "no message"
        kwargs: dict[str, Any] = {"response": response, "body": body, "status_code": code}
        prefix = f"{endpoint.name}: "

        def hint() -> str:
            return refused_key_hint(self._key())

        if envelope_status is not None:
            if _mentions_credits(text):
                if _mentions_budget(text):  # a team gateway's budget: only its admin raises it, nothing to top up
                    return InsufficientCreditsError(
                        prefix + f"the team gateway refused the call ({text}). Ask the gateway's admin to raise "
                        "the budget; %musicgen_key (or key_info()) shows what you have left.",
                        **kwargs,
                    )
                return InsufficientCreditsError(
                    prefix + f"no credits left on this key ({text}). Check key_info() or %musicgen_key; "
                    "top up the key before generating again.",
                    **kwargs,
                )
            if code in (401, 403) or _mentions_key_problem(text):
                return EnvelopeAuthenticationError(prefix + f"the API key was refused ({text}). {hint()}", **kwargs)
            if code == 429:
                return RateLimitError(prefix + f"rate limited ({text}). Slow down and try again.", **kwargs)
            return EnvelopeError(prefix + f"the service said {code}: {text}", **kwargs)
        if code == 422:
            detail = ValidationErrorBody.model_validate(body if isinstance(body, dict) else {}).detail
            lines = "; ".join(str(d)[:300] for d in detail[:10]) or text
            if len(detail) > 10:
                lines += f"; and {len(detail) - 10} more"
            return UnprocessableEntityError(
                prefix + f"the service refused the request: {lines}", detail=detail, **kwargs
            )
        if code == 401:
            return AuthenticationError(prefix + f"the API key was refused ({text}). {hint()}", **kwargs)
        if code == 403:
            return PermissionDeniedError(prefix + f"the API key was refused here ({text}). {hint()}", **kwargs)
        if code == 429:
            wait = retry_after(response)
            hint = f" Try again in {wait:.0f} s." if wait is not None else " Slow down and try again."
            return RateLimitError(prefix + f"rate limited ({text}).{hint}", **kwargs)
        if code >= 500:
            if _mentions_key_problem(text):
                return ServerAuthenticationError(
                    prefix + f"HTTP {code}, the service says the API key was refused ({text}). {hint()}", **kwargs
                )
            return InternalServerError(prefix + f"HTTP {code}: {text}", **kwargs)
        kind: type[APIStatusError] = {400: BadRequestError, 404: NotFoundError}.get(code, APIStatusError)
        return kind(prefix + f"HTTP {code}: {text}", **kwargs)

    def parse(self, endpoint: Endpoint, parser: Callable[[Any], T], data: Any) -> T:
        try:
            return parser(data)
        except UNREADABLE as exc:
            try:
                reason = self.redact(str(exc))[:300]
            except (RecursionError, MemoryError, ValueError):
                reason = type(exc).__name__
            raise APIResponseValidationError(
                f"The {endpoint.name} answer had an unexpected shape: {reason}", body=data
            ) from None

    # -- downloads ---------------------------------------------------------------------------------------

    def download_status_error(self, url: str, response: httpx.Response) -> APIStatusError:
        """A failed audio download: no key was sent there, so no key hint; previews may 403/404 for a while."""
        kind = NotFoundError if response.status_code == 404 else APIStatusError
        where = public_url(url)
        return kind(
            f"Downloading {where} failed: HTTP {response.status_code}. A preview URL may answer 403/404 until "
            "the final file exists; download once the task is complete.",
            response=response,
            body=None,
            status_code=response.status_code,
        )

    def download_failed(self, url: str, exc: httpx.TransportError) -> APIConnectionError:
        where = public_url(url)
        kind = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
        return kind(f"Downloading {where} failed ({self.redact(str(exc)) or type(exc).__name__}); nothing was saved.")

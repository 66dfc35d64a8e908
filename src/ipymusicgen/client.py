"""`MusicClient` (sync) and `AsyncMusicClient` over httpx: one transport core, two faces.

Everything that is not I/O lives in `_Core`: each endpoint is a generator ("flow") that yields
`_Send(request)` or `_Sleep(seconds)` and receives the response (or the transport exception). The sync
face drives flows with `httpx.Client` and `time.sleep`, the async face with `httpx.AsyncClient` and
`asyncio.sleep`; retry policy, envelopes, errors and parsing exist once.
"""

from __future__ import annotations

import email.utils
import random
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar, cast

import httpx
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from ._version import __version__
from .config import Settings, is_loopback
from .downloads import AtomicFile, safe_filename, suffix_for
from .errors import (
    KEY_HINT,
    APIConnectionError,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    CreateOutcomeUnknownError,
    EnvelopeError,
    InsecureTransportError,
    InsufficientCreditsError,
    InternalServerError,
    MusicGenError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    TaskFailedError,
    UnprocessableEntityError,
    WaitTimeoutError,
)
from .journal import Attempt, JournalEntry
from .models import (
    GenerateResult,
    KeyInfo,
    LyricsResult,
    TaskRecord,
    V2Request,
    V2Song,
    ValidationErrorBody,
    build_generate_request,
    build_lyrics_request,
    build_v2_request,
    first_text,
)
from .tasks import TaskSet, TaskState

T = TypeVar("T")
Record = TaskRecord | V2Song
UpdateCallback = Callable[[list[Record]], None]

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
DOUBTFUL_STATUS = frozenset({408, 500, 502, 503, 504, 520, 522, 524})
"""Statuses after which a paid request may or may not have been carried out (not 501: never done)."""
DOUBT_HINT = (
    "The request may still have been carried out: it was NOT resent, to avoid paying twice. Check key_info() "
    "(the music count) and your recent tasks before trying again."
)
MAX_RETRY_AFTER = 60.0
IDS_QUERY_BUDGET = 4000
"""Characters of comma-joined ids per task query; more ids are split so URLs stay well under 8 KB."""


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


class _Send(NamedTuple):
    request: httpx.Request


class _Sleep(NamedTuple):
    seconds: float


Flow = Generator["_Send | _Sleep", Any, T]


class Journal(Protocol):
    """What the client tells a journal (see `journal.py`), so no paid task id is ever lost."""

    def begin(self, endpoint: str, host: str, payload: Mapping[str, Any]) -> str: ...
    def submitted(self, attempt_id: str, ids: list[str], *, v2: bool = False) -> None: ...
    def unknown(self, attempt_id: str, note: str) -> None: ...
    def rejected(self, attempt_id: str, note: str) -> None: ...
    def observe(self, records: Iterable[Record]) -> None: ...
    def downloaded(self, task_id: str, path: str) -> None: ...


class TaskJournal(Journal, Protocol):
    """A journal that can also list what it holds, which `resume()` needs (`journal.Journal` is one)."""

    def unfinished(self, host: str | None = None) -> list[JournalEntry]: ...
    def attempts(self, outcome: str | None = None) -> list[Attempt]: ...


def chunk_ids(ids: list[str], budget: int = IDS_QUERY_BUDGET) -> list[list[str]]:
    """Split ids into comma-joined groups that fit the budget; one group unless there are very many."""
    chunks: list[list[str]] = [[]]
    size = 0
    for task_id in ids:
        if chunks[-1] and size + 1 + len(task_id) > budget:  # size: length of the chunk joined with commas
            chunks.append([])
        size = len(task_id) if not chunks[-1] else size + 1 + len(task_id)
        chunks[-1].append(task_id)
    return [c for c in chunks if c]


def _retry_after(response: httpx.Response | None) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms` or `Retry-After`), if sane."""
    if response is None:
        return None
    headers = response.headers
    try:
        if "retry-after-ms" in headers:
            seconds = float(headers["retry-after-ms"]) / 1000
        elif "retry-after" in headers:
            value = headers["retry-after"]
            try:
                seconds = float(value)
            except ValueError:
                parsed = email.utils.parsedate_to_datetime(value)
                seconds = parsed.timestamp() - time.time()
        else:
            return None
    except (TypeError, ValueError):
        return None
    return seconds if 0 <= seconds <= MAX_RETRY_AFTER else None


def backoff_delay(attempt: int, response: httpx.Response | None = None) -> float:
    """0.5 s x 2^attempt capped at 8 s with jitter, unless the server said how long to wait."""
    asked = _retry_after(response)
    if asked is not None:
        return asked
    return min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())


def _error_text(body: Any) -> str:
    if isinstance(body, dict):
        for name in ("message", "msg", "detail", "error", "error_message"):
            value = body.get(name)
            if isinstance(value, str) and value:
                return value
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


def _mentions_credits(text: str) -> bool:
    lowered = text.lower()
    return any(
        word in lowered
        for word in ("credit", "insufficient", "balance", "quota", "not enough", "music count", "points")
    )


def _is_envelope(body: Any) -> bool:
    if not isinstance(body, dict) or "status" not in body:
        return False
    status = body["status"]
    is_code = (isinstance(status, int) and not isinstance(status, bool)) or (
        isinstance(status, str) and status.isdigit()
    )
    return is_code and ("data" in body or "message" in body or "msg" in body)


class _Core:
    """Request building, retry policy, envelopes, errors and parsing; no I/O."""

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        v2_base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        settings: Settings | None = None,
        journal: Journal | bool | None = True,
        allow_unknown_models: bool | None = None,
        allow_insecure_http: bool | None = None,
        archive: bool | str | Path | None = True,
    ) -> None:
        overrides = {
            "api_key": api_key,
            "base_url": base_url,
            "v2_base_url": v2_base_url,
            "timeout": timeout,
            "max_retries": max_retries,
            "allow_unknown_models": allow_unknown_models,
            "allow_insecure_http": allow_insecure_http,
        }
        base = settings or Settings.from_env()
        self.settings = base.with_changes(**{k: v for k, v in overrides.items() if v is not None})
        self._journal_choice: Journal | bool | None = journal  # True: decided on first use
        self._opened_journal: Any = None  # a journal this client opened itself, closed with it
        self._record_listeners: list[UpdateCallback] = []
        self._check_transport()
        from .archive import attach  # finished songs are archived off the polling thread (archive.py)

        attach(self, archive)  # archive=False: off; a path: there; True: the settings' directory

    def add_record_listener(self, listener: UpdateCallback) -> None:
        """Call `listener(changed_records)` after every polling round that changed something.

        Every way of following tasks (a watcher, `wait()`, `resume()`, a batch) polls through one flow,
        so a listener (the archive, say) sees every song finish exactly where it is learnt.
        """
        self._record_listeners.append(listener)

    def remove_record_listener(self, listener: UpdateCallback) -> None:
        self._record_listeners[:] = [x for x in self._record_listeners if x is not listener]

    @property
    def journal(self) -> Journal | None:
        """Where paid attempts and task ids are recorded before a call returns.

        By default (`journal=True`) the durable SQLite journal of the settings (`MUSICGEN_JOURNAL`, else
        the user data directory), opened on first use, for any real service; a loopback host (the
        sandbox) is journalled only when `journal_path` is set. Pass a `Journal` to share one, or False.
        """
        if self._journal_choice is True:
            wanted = self.settings.journal_path is not None or not is_loopback(self.settings.base_url)
            self._journal_choice = self._open_journal() if wanted else None
        return None if isinstance(self._journal_choice, bool) else self._journal_choice

    @journal.setter
    def journal(self, value: Journal | None) -> None:
        self._journal_choice = value

    def _open_journal(self) -> Journal:
        from .journal import Journal as SqliteJournal

        self._opened_journal = SqliteJournal(self.settings.journal_path)
        return cast(Journal, self._opened_journal)

    def _close_own_journal(self) -> None:
        if self._opened_journal is not None:
            self._opened_journal.close()
            self._opened_journal = None
            self._journal_choice = None

    # -- helpers shared by both faces ----------------------------------------------------------------

    def __repr__(self) -> str:
        s = self.settings
        key = "set" if s.has_key else "not set"
        return f"{type(self).__name__}(base_url={s.base_url!r}, v2_base_url={s.v2_base_url!r}, key={key})"

    def _check_transport(self) -> None:
        if not self.settings.has_key or self.settings.allow_insecure_http:
            return
        for url in (self.settings.base_url, self.settings.v2_base_url):
            if url.startswith("http://") and not is_loopback(url):
                raise InsecureTransportError(
                    f"Refusing to send the API key over plain http to {url}; use https, or opt in with "
                    "allow_insecure_http=True (MUSICGEN_ALLOW_INSECURE_HTTP=1)."
                )

    def _timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.settings.timeout, connect=self.settings.connect_timeout)

    def _headers(self) -> dict[str, str]:
        return {"User-Agent": f"ipymusicgen/{__version__} httpx/{httpx.__version__}", "Accept": "application/json"}

    def redact(self, text: str) -> str:
        """Server text with the key (if the server echoed it) masked."""
        key = self.settings.key_value()
        return text.replace(key, "***") if key and len(key) >= 4 else text

    def _scrub(self, value: Any) -> Any:
        """A server body with every string redacted, so errors can keep it without the key."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        return value

    def _download_status_error(self, url: str, response: httpx.Response) -> APIStatusError:
        """A failed audio download: no key was sent there, so no key hint; previews may 403/404 for a while."""
        kind = NotFoundError if response.status_code == 404 else APIStatusError
        where = httpx.URL(url).copy_with(query=None)
        return kind(
            f"Downloading {where} failed: HTTP {response.status_code}. A preview URL may answer 403/404 until "
            "the final file exists; download once the task is complete.",
            response=response,
            body=None,
            status_code=response.status_code,
        )

    def _build_request(
        self, endpoint: Endpoint, *, json: Any = None, params: Mapping[str, str] | None = None
    ) -> httpx.Request:
        base = self.settings.v2_base_url if endpoint.v2 else self.settings.base_url
        headers = self._headers()
        key = self.settings.key_value()
        if key:
            headers["x-api-key"] = key
        query = "?" + urllib.parse.urlencode(params, safe=",") if params else ""  # `?ids=a,b`, commas literal
        return httpx.Request(endpoint.method, base + endpoint.path + query, json=json, headers=headers)

    # -- the one request flow ------------------------------------------------------------------------

    def _request_flow(
        self,
        endpoint: Endpoint,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        attempt_id: str | None = None,
    ) -> Flow[Any]:
        """Send with the retry policy; return the unwrapped `data`, or raise the right error."""
        attempt = 0
        while True:
            request = self._build_request(endpoint, json=json, params=params)
            outcome = yield _Send(request)
            request.headers.pop("x-api-key", None)  # errors keep the request: the key must not ride along
            can_retry = attempt < self.settings.max_retries
            if isinstance(outcome, Exception):
                not_sent = isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
                if can_retry and (not_sent or not endpoint.paid):
                    yield _Sleep(backoff_delay(attempt))
                    attempt += 1
                    continue
                raise self._transport_error(endpoint, outcome, request, not_sent, attempt_id)
            try:
                return self._process_response(endpoint, outcome)
            except APIStatusError as exc:  # HTTP 5xx/429/..., or the same inside a 200 envelope
                # A refused key stays refused (the service may say so with a 500): no point asking again.
                retryable = exc.status_code in RETRYABLE_STATUS and not isinstance(exc, AuthenticationError)
                if endpoint.paid or not can_retry or not retryable:
                    raise
            yield _Sleep(backoff_delay(attempt, outcome))
            attempt += 1

    def _transport_error(
        self, endpoint: Endpoint, exc: Exception, request: httpx.Request, not_sent: bool, attempt_id: str | None
    ) -> APIConnectionError:
        detail = self.redact(str(exc)) or type(exc).__name__
        where = request.url.copy_with(query=None)
        if endpoint.paid and not not_sent:
            return CreateOutcomeUnknownError(
                f"The {endpoint.name} request may have reached {where} but no answer came back ({detail}). "
                "It was NOT resent, to avoid paying twice. Check key_info() (the music count) and your "
                "recent tasks before trying again.",
                request=request,
                attempt_id=attempt_id,
            )
        if isinstance(exc, httpx.TimeoutException):
            return APITimeoutError(f"The music service at {where} did not answer in time ({detail}).", request=request)
        return APIConnectionError(f"Could not reach the music service at {where} ({detail}).", request=request)

    def _process_response(self, endpoint: Endpoint, response: httpx.Response) -> Any:
        try:
            body: Any = response.json()
        except ValueError:
            body = None
            if response.is_success:
                raise APIResponseValidationError(
                    f"The {endpoint.name} answer was not JSON: {self.redact(response.text[:200])!r}",
                    request=response.request,
                    body=response.text[:1000],
                ) from None
        if not response.is_success:
            raise self._status_error(endpoint, response, body if body is not None else response.text)
        if _is_envelope(body):
            status = int(body["status"])
            if status != 200:
                raise self._status_error(endpoint, response, body, status_code=status)
            if "data" in body:
                return body["data"]
            return {k: v for k, v in body.items() if k not in ("status", "message", "msg")}
        return body

    def _status_error(
        self, endpoint: Endpoint, response: httpx.Response, body: Any, status_code: int | None = None
    ) -> APIStatusError:
        in_envelope = status_code is not None
        code = status_code if status_code is not None else response.status_code
        text = self.redact(_error_text(body)) or response.reason_phrase or "no message"
        kwargs: dict[str, Any] = {"response": response, "body": self._scrub(body), "status_code": code}
        prefix = f"{endpoint.name}: "
        if code == 422 and not in_envelope:
            detail = ValidationErrorBody.model_validate(body if isinstance(body, dict) else {}).detail
            lines = "; ".join(self.redact(str(d)) for d in detail) or text
            return UnprocessableEntityError(
                prefix + f"the service refused the request: {lines}", detail=detail, **kwargs
            )
        if (code in (401, 403) and not in_envelope) or _mentions_key_problem(text):
            return AuthenticationError(prefix + f"the API key was refused ({text}). {KEY_HINT}", **kwargs)
        if in_envelope and _mentions_credits(text):
            return InsufficientCreditsError(
                prefix + f"no credits left on this key ({text}). Check key_info() or %musicgen_key; "
                "top up the key before generating again.",
                **kwargs,
            )
        if code == 429:
            wait = _retry_after(response)
            hint = f" Try again in {wait:.0f} s." if wait is not None else " Slow down and try again."
            return RateLimitError(prefix + f"rate limited ({text}).{hint}", **kwargs)
        if in_envelope:
            return EnvelopeError(prefix + f"the service said {code}: {text}", **kwargs)
        kind: type[APIStatusError] = {400: BadRequestError, 403: PermissionDeniedError, 404: NotFoundError}.get(
            code, APIStatusError
        )
        if code >= 500:
            kind = InternalServerError
        return kind(prefix + f"HTTP {code}: {text}", **kwargs)

    def _parse(self, endpoint: Endpoint, parser: Callable[[Any], T], data: Any) -> T:
        try:
            return parser(data)
        except (PydanticValidationError, TypeError, ValueError, KeyError) as exc:
            raise APIResponseValidationError(
                f"The {endpoint.name} answer had an unexpected shape: {self.redact(str(exc))[:300]}",
                body=data,
            ) from None

    def _paid_flow(
        self,
        endpoint: Endpoint,
        payload: Mapping[str, Any] | None,
        parser: Callable[[Any], T],
        params: Mapping[str, str] | None = None,
    ) -> Flow[tuple[T, str | None]]:
        """A request that costs money: journalled before it is sent, never blindly resent.

        Whatever leaves the outcome in doubt (no answer, a 5xx, an answer that cannot be read) is
        journalled as "unknown", not "rejected": the work may have been done and paid for.
        """
        journal = self.journal
        host = self.settings.v2_base_url if endpoint.v2 else self.settings.base_url
        attempt_id = journal.begin(endpoint.name, host, {**(payload or {}), **(params or {})}) if journal else None
        try:
            data = yield from self._request_flow(endpoint, json=payload, params=params, attempt_id=attempt_id)
            parsed = self._parse(endpoint, parser, data)
        except APIResponseValidationError as exc:
            raise self._note_outcome(attempt_id, exc, unknown=True, hint=True) from None
        except APIStatusError as exc:
            doubtful = exc.status_code in DOUBTFUL_STATUS
            raise self._note_outcome(attempt_id, exc, unknown=doubtful, hint=doubtful) from None
        except CreateOutcomeUnknownError as exc:
            raise self._note_outcome(attempt_id, exc, unknown=True, hint=False) from None
        except MusicGenError as exc:
            raise self._note_outcome(attempt_id, exc, unknown=False, hint=False) from None
        return parsed, attempt_id

    def _note_outcome(self, attempt_id: str | None, exc: MusicGenError, *, unknown: bool, hint: bool) -> MusicGenError:
        """Journal how a paid request ended; a doubtful one also tells the user how to check."""
        if hint and isinstance(exc, APIError):
            exc.message += " " + DOUBT_HINT
            exc.args = (exc.message,)
        if self.journal is not None and attempt_id:
            if unknown:
                self.journal.unknown(attempt_id, str(exc))
            else:
                self.journal.rejected(attempt_id, str(exc))
        return exc

    # -- endpoint flows --------------------------------------------------------------------------------

    def _generate_flow(self, request: Any, fields: dict[str, Any]) -> Flow[GenerateResult]:
        model = build_generate_request(request, allow_unknown_models=self.settings.allow_unknown_models, **fields)
        result, attempt_id = yield from self._paid_flow(GENERATE, model.to_payload(), GenerateResult.model_validate)
        if self.journal and attempt_id:
            self.journal.submitted(attempt_id, result.ids)
        return result

    def _submit_v2_flow(self, request: Any, fields: dict[str, Any]) -> Flow[list[V2Song]]:
        model: V2Request = build_v2_request(request, allow_unknown_models=self.settings.allow_unknown_models, **fields)
        songs, attempt_id = yield from self._paid_flow(SUBMIT_V2, model.to_payload(), _v2_songs)
        if self.journal and attempt_id:
            self.journal.submitted(attempt_id, [s.id for s in songs], v2=True)
        return songs

    def _lyrics_flow(self, prompt: str) -> Flow[LyricsResult]:
        model = build_lyrics_request(prompt)
        result, _ = yield from self._paid_flow(LYRICS, model.to_payload(), LyricsResult.model_validate)
        return result

    def _key_info_flow(self) -> Flow[KeyInfo]:
        data = yield from self._request_flow(KEY_INFO)
        return self._parse(KEY_INFO, KeyInfo.model_validate, data)

    def _tasks_flow(self, ids: str | Iterable[str]) -> Flow[list[TaskRecord]]:
        wanted = _id_list(ids)
        records: list[TaskRecord] = []
        for chunk in chunk_ids(wanted):
            data = yield from self._request_flow(TASKS, params={"ids": ",".join(chunk)})
            records.extend(self._parse(TASKS, _task_records, data))
        if self.journal:
            self.journal.observe(records)
        return records

    def _query_v2_flow(self, song_id: str) -> Flow[V2Song]:
        data = yield from self._request_flow(QUERY_V2, params={"song_id": song_id})
        songs = self._parse(QUERY_V2, _v2_songs, data)
        song = next((s for s in songs if s.id == song_id), songs[0] if songs else None)
        if song is None:
            raise APIResponseValidationError(f"v2 query: no song {song_id!r} in the answer", body=data)
        if self.journal:
            self.journal.observe([song])
        return song

    def _song_url_flow(self, endpoint: Endpoint, song_id: str, names: tuple[str, ...]) -> Flow[str]:
        def pick(data: Any) -> str:
            value = first_text(data, names)
            if value is None:
                raise ValueError(f"no {names[0]} in the answer")
            return value

        value, _ = yield from self._paid_flow(endpoint, None, pick, params={"song_id": song_id})
        return value

    def _poll_flow(self, tasks: TaskSet) -> Flow[list[Record]]:
        """One round: one batched v1 query for every unfinished v1 task, one query per v2 song."""
        v1_ids, v2_ids = tasks.unfinished()
        records: list[Record] = []
        if v1_ids:
            records.extend((yield from self._tasks_flow(v1_ids)))
        for song_id in v2_ids:
            records.append((yield from self._query_v2_flow(song_id)))
        changed = tasks.update(records)
        if changed:
            for listener in list(self._record_listeners):
                listener(changed)
        return changed

    def _wait_flow(
        self,
        ids: str | Iterable[str],
        v2_ids: Iterable[str],
        timeout: float | None,
        interval: float | None,
        on_update: UpdateCallback | None,
        raise_on_failure: bool,
    ) -> Flow[list[Record]]:
        tasks = TaskSet(_id_list(ids), v2_ids=v2_ids)
        timeout = self.settings.wait_timeout if timeout is None else timeout
        interval = self.settings.poll_interval if interval is None else interval
        deadline = time.monotonic() + timeout
        failures = 0
        while True:
            try:
                changed = yield from self._poll_flow(tasks)
            except MusicGenError as exc:
                if not is_transient(exc):
                    raise
                failures += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise _wait_timeout(tasks, timeout, exc) from exc
                pause = max(interval, backoff_delay(failures - 1, getattr(exc, "response", None)))
                yield _Sleep(min(pause, remaining))
                continue
            failures = 0
            if changed and on_update is not None:
                on_update(changed)
            if tasks.all_finished:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _wait_timeout(tasks, timeout)
            yield _Sleep(min(interval, remaining))
        finished = [tasks.get(i) for i in tasks.ids]
        records = [r for r in finished if r is not None]
        failed = [r for r in records if r.state is TaskState.FAILED]
        if failed and raise_on_failure:
            raise TaskFailedError(failed[0])
        return records

    def _resume_journal(self) -> TaskJournal:
        """The journal to resume from: this client's, else the durable one of the settings (kept for polling)."""
        if self.journal is None:
            self.journal = self._open_journal()
        if not hasattr(self.journal, "unfinished") or not hasattr(self.journal, "attempts"):
            raise MusicGenError("resume() needs a journal that lists tasks, such as ipymusicgen.journal.Journal.")
        return cast(TaskJournal, self.journal)

    def unfinished(self) -> Resumed:
        """What the journal holds for this client's hosts: unfinished tasks and doubtful paid requests."""
        journal = self._resume_journal()
        base, v2_base = self.settings.base_url, self.settings.v2_base_url
        v1 = tuple(e.id for e in journal.unfinished(base) if e.version == 1)
        v2 = tuple(e.id for e in journal.unfinished(v2_base) if e.version == 2)
        unknown = tuple(a for a in journal.attempts(outcome="unknown") if a.host in (base, v2_base))
        return Resumed(v1, v2, unknown)

    def _resume_flow(
        self, wait: bool, timeout: float | None, interval: float | None, on_update: UpdateCallback | None
    ) -> Flow[Resumed]:
        found = self.unfinished()
        if not wait or not found.ids:
            return found
        records = yield from self._wait_flow(found.v1_ids, found.v2_ids, timeout, interval, on_update, False)
        return replace(found, records=tuple(records))

    def _download_target(self, task: Record | str, allow_preview: bool) -> tuple[str, str | None, str]:
        if isinstance(task, str):
            if not task.lower().startswith(("http://", "https://")):
                raise MusicGenError(f"Not an http(s) URL to download: {task[:100]!r}")
            return task, None, "song"
        if task.state is not TaskState.COMPLETE and not (allow_preview and task.state is TaskState.PREVIEW):
            raise MusicGenError(f"Task {task.id} is {task.state.value}, not complete: nothing final to download yet.")
        url = task.audio_url or ""
        if not url.lower().startswith(("http://", "https://")):
            raise MusicGenError(f"Task {task.id} has no http(s) audio URL to download.")
        return url, task.title, task.id

    def _download_failed(self, url: str, exc: httpx.TransportError) -> APIConnectionError:
        where = httpx.URL(url).copy_with(query=None)
        kind = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
        return kind(f"Downloading {where} failed ({self.redact(str(exc)) or type(exc).__name__}); nothing was saved.")

    def _downloaded(self, task: Record | str, path: Path) -> Path:
        if self.journal is not None and not isinstance(task, str):
            self.journal.downloaded(task.id, str(path))
        return path


@dataclass(frozen=True)
class Resumed:
    """What `resume()` found: unfinished task ids (v1, v2), doubtful paid requests, and the records once waited."""

    v1_ids: tuple[str, ...] = ()
    v2_ids: tuple[str, ...] = ()
    unknown: tuple[Attempt, ...] = ()
    """Paid requests whose outcome is unknown: check key info and the task list before resending."""
    records: tuple[Record, ...] = ()
    """The finished records (only with `wait=True`)."""

    @property
    def ids(self) -> list[str]:
        return [*self.v1_ids, *self.v2_ids]

    def __repr__(self) -> str:
        done = f", {len(self.records)} finished" if self.records else ""
        return f"Resumed({len(self.v1_ids)} v1 + {len(self.v2_ids)} v2 unfinished, {len(self.unknown)} unknown{done})"


def is_transient(exc: BaseException) -> bool:
    """An error worth polling through: the network or the service had a bad moment (not a wrong key or id)."""
    if isinstance(exc, APIConnectionError | APIResponseValidationError):
        return True
    return (
        isinstance(exc, APIStatusError)
        and not isinstance(exc, AuthenticationError)
        and (exc.status_code in RETRYABLE_STATUS)
    )


def _wait_timeout(tasks: TaskSet, timeout: float, last_error: BaseException | None = None) -> WaitTimeoutError:
    v1, v2 = tasks.unfinished()
    problem = f" The last poll failed: {last_error}" if last_error is not None else ""
    return WaitTimeoutError(
        f"{len(v1) + len(v2)} task(s) still unfinished after {timeout:.0f} s; they go on server-side: wait again "
        f"or resume later.{problem}",
        pending=v1 + v2,
    )


def _id_list(ids: str | Iterable[str]) -> list[str]:
    if isinstance(ids, str):
        return [i.strip() for i in ids.split(",") if i.strip()]
    return [str(i) for i in ids]


def _task_records(data: Any) -> list[TaskRecord]:
    if isinstance(data, dict):
        data = data.get("tasks") or data.get("list") or data.get("items") or [data]
    return [TaskRecord.model_validate(item) for item in data]


def _v2_songs(data: Any) -> list[V2Song]:
    if isinstance(data, dict):
        data = data.get("songs") or data.get("list") or data.get("data") or [data]
    return [V2Song.model_validate(item) for item in data]


_VIBE_NAMES = ("singer_id", "id")
_WAV_NAMES = ("wav_url", "url", "audio_url", "file_url")
_MP4_NAMES = ("mp4_url", "video_url", "url", "file_url")


class MusicClient(_Core):
    """Synchronous client. Needs no event loop; safe to use from any thread.

    >>> client = MusicClient()            # key and hosts from MUSICGEN_* env vars
    >>> ids = client.generate(action="auto", style="lo-fi rain").ids
    >>> songs = client.wait(ids)
    """

    def __init__(self, api_key: str | None = None, *, http_client: httpx.Client | None = None, **kwargs: Any) -> None:
        super().__init__(api_key, **kwargs)
        self._http = http_client or httpx.Client(timeout=self._timeout())

    def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                    continue
                try:
                    outcome: Any = self._http.send(step.request)
                except httpx.TransportError as exc:
                    outcome = exc
                step = flow.send(outcome)
        except StopIteration as stop:
            return stop.value

    def generate(self, request: BaseModel | Mapping[str, Any] | None = None, /, **fields: Any) -> GenerateResult:
        """Start a v1 generation (any action); returns the new task ids at once. Costs credits."""
        return self._run(self._generate_flow(request, fields))

    def submit_v2(self, request: BaseModel | Mapping[str, Any] | None = None, /, **fields: Any) -> list[V2Song]:
        """Start a v2 generation; returns the new songs (still running). Costs credits."""
        return self._run(self._submit_v2_flow(request, fields))

    def query_v2(self, song_id: str) -> V2Song:
        return self._run(self._query_v2_flow(song_id))

    def lyrics(self, prompt: str) -> LyricsResult:
        return self._run(self._lyrics_flow(prompt))

    def key_info(self) -> KeyInfo:
        return self._run(self._key_info_flow())

    def tasks(self, ids: str | Iterable[str]) -> list[TaskRecord]:
        """Details of v1 tasks, in one batched query (`?ids=a,b`)."""
        return self._run(self._tasks_flow(ids))

    def generate_vibe(self, song_id: str) -> str:
        """A `singer_id` made from a song, for `artist_consistency`."""
        return self._run(self._song_url_flow(VIBE, song_id, _VIBE_NAMES))

    def generate_wav(self, song_id: str) -> str:
        """URL of a WAV rendering of a finished song."""
        return self._run(self._song_url_flow(WAV, song_id, _WAV_NAMES))

    def generate_mp4(self, song_id: str) -> str:
        """URL of a video rendering of a finished song."""
        return self._run(self._song_url_flow(MP4, song_id, _MP4_NAMES))

    def poll(self, tasks: TaskSet) -> list[Record]:
        """One polling round for a task set; returns the records that changed."""
        return self._run(self._poll_flow(tasks))

    def wait(
        self,
        ids: str | Iterable[str] = (),
        *,
        v2_ids: Iterable[str] = (),
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
        raise_on_failure: bool = False,
    ) -> list[Record]:
        """Poll until every task is complete or failed (one batched query per interval)."""
        return self._run(self._wait_flow(ids, v2_ids, timeout, interval, on_update, raise_on_failure))

    def resume(
        self,
        *,
        wait: bool = False,
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
    ) -> Resumed:
        """The journal's unfinished tasks for these hosts (after a restart); `wait=True` also polls them to the end."""
        return self._run(self._resume_flow(wait, timeout, interval, on_update))

    def download(self, task: Record | str, directory: str | Path = ".", *, allow_preview: bool = False) -> Path:
        """Stream a finished song (or a URL) to `directory`, named from its title, written atomically."""
        url, title, fallback = self._download_target(task, allow_preview)
        try:
            with self._http.stream("GET", url, timeout=self._timeout(), follow_redirects=True) as response:
                if not response.is_success:
                    raise self._download_status_error(url, response)
                with AtomicFile(Path(directory)) as target:
                    for chunk in response.iter_bytes():
                        target.write(chunk)
                    name = safe_filename(title, suffix_for(url, response.headers.get("content-type")), fallback)
                    return self._downloaded(task, target.commit(name))
        except httpx.TransportError as exc:
            raise self._download_failed(url, exc) from exc

    def close(self) -> None:
        self._http.close()
        self._close_own_journal()

    def __enter__(self) -> MusicClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _async_sleep(seconds: float) -> None:
    import asyncio  # here, not at the top: the sync face (and `%load_ext`) never pays for it

    await asyncio.sleep(seconds)


class AsyncMusicClient(_Core):
    """Asynchronous client for `await` (works with IPython's top-level await)."""

    def __init__(
        self, api_key: str | None = None, *, http_client: httpx.AsyncClient | None = None, **kwargs: Any
    ) -> None:
        super().__init__(api_key, **kwargs)
        self._http = http_client or httpx.AsyncClient(timeout=self._timeout())

    async def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, _Sleep):
                    await _async_sleep(step.seconds)
                    step = flow.send(None)
                    continue
                try:
                    outcome: Any = await self._http.send(step.request)
                except httpx.TransportError as exc:
                    outcome = exc
                step = flow.send(outcome)
        except StopIteration as stop:
            return stop.value

    async def generate(self, request: BaseModel | Mapping[str, Any] | None = None, /, **fields: Any) -> GenerateResult:
        return await self._run(self._generate_flow(request, fields))

    async def submit_v2(self, request: BaseModel | Mapping[str, Any] | None = None, /, **fields: Any) -> list[V2Song]:
        return await self._run(self._submit_v2_flow(request, fields))

    async def query_v2(self, song_id: str) -> V2Song:
        return await self._run(self._query_v2_flow(song_id))

    async def lyrics(self, prompt: str) -> LyricsResult:
        return await self._run(self._lyrics_flow(prompt))

    async def key_info(self) -> KeyInfo:
        return await self._run(self._key_info_flow())

    async def tasks(self, ids: str | Iterable[str]) -> list[TaskRecord]:
        return await self._run(self._tasks_flow(ids))

    async def generate_vibe(self, song_id: str) -> str:
        return await self._run(self._song_url_flow(VIBE, song_id, _VIBE_NAMES))

    async def generate_wav(self, song_id: str) -> str:
        return await self._run(self._song_url_flow(WAV, song_id, _WAV_NAMES))

    async def generate_mp4(self, song_id: str) -> str:
        return await self._run(self._song_url_flow(MP4, song_id, _MP4_NAMES))

    async def poll(self, tasks: TaskSet) -> list[Record]:
        return await self._run(self._poll_flow(tasks))

    async def wait(
        self,
        ids: str | Iterable[str] = (),
        *,
        v2_ids: Iterable[str] = (),
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
        raise_on_failure: bool = False,
    ) -> list[Record]:
        return await self._run(self._wait_flow(ids, v2_ids, timeout, interval, on_update, raise_on_failure))

    async def resume(
        self,
        *,
        wait: bool = False,
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
    ) -> Resumed:
        return await self._run(self._resume_flow(wait, timeout, interval, on_update))

    async def download(self, task: Record | str, directory: str | Path = ".", *, allow_preview: bool = False) -> Path:
        url, title, fallback = self._download_target(task, allow_preview)
        try:
            async with self._http.stream("GET", url, timeout=self._timeout(), follow_redirects=True) as response:
                if not response.is_success:
                    raise self._download_status_error(url, response)
                with AtomicFile(Path(directory)) as target:
                    async for chunk in response.aiter_bytes():
                        target.write(chunk)
                    name = safe_filename(title, suffix_for(url, response.headers.get("content-type")), fallback)
                    return self._downloaded(task, target.commit(name))
        except httpx.TransportError as exc:
            raise self._download_failed(url, exc) from exc

    async def aclose(self) -> None:
        await self._http.aclose()
        self._close_own_journal()

    async def __aenter__(self) -> AsyncMusicClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

"""The client's core: request building, the retry and journaling rules, and every endpoint as a flow; no I/O.

Each endpoint is a generator ("flow", see `flows.py`) that yields `Send(request)` or `Sleep(seconds)` and
receives the response (or the transport exception); the two faces in `faces.py` drive flows with httpx,
sync or async. The response side (bounded reading, key scrubbing, classification, parsing) is in
`responses.py`, the waiting side (poll, wait, resume) in `waiting.py`, the retry policy in `retry.py`.
Journals, archives and batches plug in through `wiring.py`: nothing here imports a higher layer.
"""

from __future__ import annotations

import functools
import math
import time
import urllib.parse
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
from pydantic import BaseModel

from .._version import __version__
from ..config import MAX_SECONDS, Settings, key_in_clear, url_scheme
from ..errors import (
    KEY_HINT,
    APIError,
    APIResponseValidationError,
    APIStatusError,
    AuthenticationError,
    CreateOutcomeUnknownError,
    DownloadError,
    FieldProblem,
    InsecureTransportError,
    JournalWriteWarning,
    MissingKeyError,
    MusicGenError,
    RequestValidationError,
)
from ..models.providers import MUSICFUL, EngineRequest, check_provider
from ..models.schema import (
    MP4_URL_NAMES,
    SINGER_ID_NAMES,
    WAV_URL_NAMES,
    GenerateResult,
    KeyInfo,
    LyricsResult,
    TaskRecord,
    V2Request,
    V2Song,
    build_generate_request,
    build_lyrics_request,
    build_v2_request,
    first_text,
)
from ..models.tasks import TaskState
from .engine_calls import EngineCalls
from .flows import Flow, Journal, Record, Send, Sleep, UpdateCallback
from .responses import (
    DOUBT_HINT,
    GENERATE,
    KEY_INFO,
    LYRICS,
    MAX_BODY_BYTES,
    QUERY_V2,
    SUBMIT_V2,
    TASKS,
    BodyReader,
    Endpoint,
    Responses,
    is_doubtful,
    public_url,
    task_records,
    v2_songs,
)
from .retry import RETRYABLE_STATUS, backoff_delay
from .waiting import WaitFlows, check_id, v1_ids
from .wiring import Wiring, installed

T = TypeVar("T")
IDS_QUERY_BUDGET = 4000
"""Characters of comma-joined ids per task query; more ids are split so URLs stay well under 8 KB."""
MIN_EXCHANGE_SECONDS = 1.0
"""The least time one exchange gets even when a wait's deadline is (nearly) over."""
PAID_STOPPED = (
    "The {name} request was interrupted while it was being sent: it may have reached the service and been "
    "charged. It is journalled as outcome-unknown; check key_info() and your recent tasks before resending."
)


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


def _positional(request: Any, call: str) -> Any:
    """A paid call's one positional: a request model or a mapping of fields; anything else is a mistake."""
    if request is None or isinstance(request, BaseModel | Mapping):
        return request
    raise RequestValidationError(
        [
            FieldProblem(
                "request",
                f"{call}() takes its fields by keyword, e.g. {call}(style={str(request)[:40]!r}) "
                f"(got a positional {type(request).__name__}); nothing was sent",
            )
        ]
    )


def _ids_of_generate(data: Any) -> GenerateResult:
    if data is None or (isinstance(data, dict) and not {"ids", "task_ids", "id", "task_id"} & data.keys()):
        raise ValueError("the answer carried no task ids")
    result = GenerateResult.model_validate(data)
    if not result.ids:
        raise ValueError("the answer carried no task ids")
    for task_id in result.ids:  # an id that could never be waited on is no id (RequestValidationError: a ValueError)
        check_id(task_id, "ids")
    return result


def _submitted_songs(data: Any) -> list[V2Song]:
    songs = v2_songs(data)
    if not songs:
        raise ValueError("the answer carried no songs")
    for song in songs:
        check_id(song.id, "song_id")
    return songs


_VIBE_NAMES = SINGER_ID_NAMES  # where an extra's answer holds what it made: one home, in the models
_WAV_NAMES = WAV_URL_NAMES
_MP4_NAMES = MP4_URL_NAMES


class _Core(WaitFlows):
    """Request building, retry policy, paid-call journaling and the endpoint flows; no I/O."""

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
        wiring: Wiring | None = None,
    ) -> None:
        """`wiring`: what the layers above give this client (its journal, archive and batches), passed in by the
        workspace that builds it; a client made by hand gets the package's default (`client.wiring`)."""
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
        self.responses = Responses(lambda: self.settings.key_value())
        self._journal_choice: Journal | bool | None = journal  # True: decided on first use
        self._opened_journal: Any = None  # a journal this client opened itself, closed with it
        self._record_listeners: list[UpdateCallback] = []
        self._resume_listeners: list[Callable[[], None]] = []
        self._check_settings()
        self.wiring: Wiring = wiring if wiring is not None else installed()
        self.wiring.attach(self, archive)  # the archive listens (archive=False: off; a path: there)

    def add_record_listener(self, listener: UpdateCallback) -> None:
        """Call `listener(changed_records)` after every polling round that changed something.

        Every way of following tasks (a watcher, `wait()`, `resume()`, a batch) polls through one flow,
        so a listener (the archive, say) sees every song finish exactly where it is learnt.
        """
        self._record_listeners.append(listener)

    def remove_record_listener(self, listener: UpdateCallback) -> None:
        self._record_listeners[:] = [x for x in self._record_listeners if x is not listener]

    def add_resume_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` each time `resume()` is called (either face, any `wait`), once the journal is open.

        A resume is the user's "pick up where I left off": the archive retries what it could not save then.
        """
        self._resume_listeners.append(listener)

    def remove_resume_listener(self, listener: Callable[[], None]) -> None:
        self._resume_listeners[:] = [x for x in self._resume_listeners if x is not listener]

    @functools.cached_property
    def engine_calls(self) -> EngineCalls:
        """This client's songs from the synchronous engines (ElevenLabs, Lyria): see `engine_calls.py`."""
        return EngineCalls(self)

    @property
    def is_embedded_sandbox(self) -> bool:
        """Whether this client talks to the embedded sandbox, known by identity (`Settings.is_embedded_sandbox`)."""
        return self.settings.is_embedded_sandbox

    @property
    def journal(self) -> Journal | None:
        """Where paid attempts and task ids are recorded before a call returns.

        By default (`journal=True`) the durable SQLite journal of the settings (`MUSICGEN_JOURNAL`, else the
        user data directory), opened on first use, whatever the host: a proxy on 127.0.0.1 in front of the
        paid service is a real service. Only the embedded sandbox (its demo key; `Sandbox.client()` passes
        `journal=False`) stays out of it. Pass a `Journal` to share one, or False for none.
        """
        if self._journal_choice is True:
            self._journal_choice = None if self.is_embedded_sandbox else self._open_journal()
        return None if isinstance(self._journal_choice, bool) else self._journal_choice

    @journal.setter
    def journal(self, value: Journal | None) -> None:
        self._journal_choice = value

    def _open_journal(self) -> Journal:
        self._opened_journal = self.wiring.open_journal(self.settings)
        return cast(Journal, self._opened_journal)

    def _close_own_journal(self) -> None:
        if self._opened_journal is not None:
            self._opened_journal.close()
            self._opened_journal = None
            self._journal_choice = None

    def _journal_write(self, what: str, write: Callable[[], None]) -> None:
        """A journal write after the answer came: if the journal fails (locked, disk full), say so, go on."""
        try:
            write()
        except Exception as exc:  # the ids must still reach the caller; the journal's own error says why
            warnings.warn(
                f"The journal could not record {what} ({type(exc).__name__}: {self.redact(str(exc))[:200]}). "
                "Keep the ids shown above; resume() will not know them.",
                JournalWriteWarning,
                stacklevel=4,
            )

    # -- helpers shared by both faces ----------------------------------------------------------------

    def __repr__(self) -> str:
        s = self.settings
        key = "set" if s.has_key else "not set"
        return f"{type(self).__name__}(base_url={s.base_url!r}, v2_base_url={s.v2_base_url!r}, key={key})"

    def _check_settings(self) -> None:
        """Refuse, before anything is sent, hosts that are not http(s), plain http to another machine, and a
        key that cannot travel in a header (the message never shows the key)."""
        s = self.settings
        for name in (
            "timeout",
            "connect_timeout",
            "poll_interval",
            "min_poll_interval",
            "wait_timeout",
            "max_download_mb",
        ):
            value = getattr(s, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
                raise RequestValidationError([FieldProblem(name, f"must be a finite number above 0 (got {value!r})")])
            if name != "max_download_mb" and value > MAX_SECONDS:
                raise RequestValidationError([FieldProblem(name, f"must be at most {MAX_SECONDS:.0e} seconds")])
        if isinstance(s.max_retries, bool) or not isinstance(s.max_retries, int) or not 0 <= s.max_retries <= 20:
            raise RequestValidationError([FieldProblem("max_retries", f"must be 0 to 20 (got {s.max_retries!r})")])
        for name, url in (("base_url", s.base_url), ("v2_base_url", s.v2_base_url)):
            try:  # as httpx will read it: a URL it cannot send to fails here, not after a paid attempt is journalled
                parsed = httpx.URL(url)
                ok = url_scheme(url) in ("http", "https") and bool(parsed.host) and (parsed.port or 1) <= 65535
            except (httpx.InvalidURL, ValueError):
                ok = False
            if not ok:
                raise RequestValidationError([FieldProblem(name, f"must be an http(s) URL (got {url[:80]!r})")])
        key = s.key_value()
        if key and any(not ("!" <= ch <= "~") for ch in key):
            raise RequestValidationError(
                [FieldProblem("api_key", "contains spaces, line breaks or non-ASCII characters; paste the key again")]
            )
        if not key or s.allow_insecure_http:
            return
        for url in (s.base_url, s.v2_base_url):
            if key_in_clear(url):
                raise InsecureTransportError(
                    f"Refusing to send the API key over plain http to {url}; use https, or opt in with "
                    "allow_insecure_http=True (MUSICGEN_ALLOW_INSECURE_HTTP=1)."
                )

    def _timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.settings.timeout, connect=self.settings.connect_timeout)

    def _deadline(self, step: Send) -> float:
        """When this exchange must be over: the HTTP timeout per response, or sooner if a wait says so.

        The read timeout of the request is cut to match, so even a server that holds its answer back
        cannot keep a bounded wait past its end.
        """
        now = time.monotonic()
        deadline = now + self.settings.timeout
        floor = now + min(self.settings.timeout, MIN_EXCHANGE_SECONDS)  # `wait(timeout=0)` still polls once
        if step.deadline is not None and max(step.deadline, floor) < deadline:
            deadline = max(step.deadline, floor)
            left = deadline - now
            step.request.extensions["timeout"] = httpx.Timeout(
                left, connect=min(left, self.settings.connect_timeout)
            ).as_dict()
        return deadline

    def _body_reader(self, response: httpx.Response, deadline: float) -> BodyReader:
        return BodyReader(response, deadline=deadline, limit=MAX_BODY_BYTES)

    def _headers(self) -> dict[str, str]:
        return {"User-Agent": f"ipymusicgen/{__version__} httpx/{httpx.__version__}", "Accept": "application/json"}

    def redact(self, text: str) -> str:
        """Server text with the key (if the server echoed it) masked."""
        return self.responses.redact(text)

    def _scrub(self, value: Any) -> Any:
        return self.responses.scrub(value)

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
        deadline: float | None = None,
    ) -> Flow[Any]:
        """Send with the retry policy; return the unwrapped `data`, or raise the right error.

        With a `deadline` (from `wait(timeout=...)`), no exchange or retry goes past it.
        """
        attempt = 0
        while True:
            request = self._build_request(endpoint, json=json, params=params)
            if endpoint.paid and attempt_id:  # a gateway sends one key upstream at most once
                request.headers["Idempotency-Key"] = attempt_id
            try:
                outcome = yield Send(request, deadline)
            finally:
                request.headers.pop("x-api-key", None)  # errors keep the request: the key must not ride along
            can_retry = attempt < self.settings.max_retries and (deadline is None or time.monotonic() < deadline)
            if isinstance(outcome, Exception):
                not_sent = isinstance(outcome, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
                if can_retry and (not_sent or not endpoint.paid):
                    yield Sleep(backoff_delay(attempt))
                    attempt += 1
                    continue
                raise self.responses.transport_error(endpoint, outcome, request, not_sent, attempt_id)
            try:
                return self.responses.process(endpoint, outcome)
            except APIStatusError as exc:  # HTTP 5xx/429/..., or the same inside a 200 envelope
                # A refused key stays refused (the service may say so with a 500): no point asking again.
                retryable = exc.status_code in RETRYABLE_STATUS and not isinstance(exc, AuthenticationError)
                if endpoint.paid or not can_retry or not retryable:
                    raise
            yield Sleep(backoff_delay(attempt, outcome))
            attempt += 1

    def _paid_flow(
        self,
        endpoint: Endpoint,
        payload: Mapping[str, Any] | None,
        parser: Callable[[Any], T],
        params: Mapping[str, str] | None = None,
    ) -> Flow[tuple[T, str | None]]:
        """A request that costs money: refused without a key, journalled before it is sent, never blindly resent.

        Whatever leaves the outcome in doubt (no answer, a 5xx, an answer that cannot be read, Ctrl-C or a
        cancelled task during the send) is journalled as "unknown", not "rejected": the work may have been
        done and paid for.
        """
        if not self.settings.has_key:
            raise MissingKeyError(
                f"The {endpoint.name} request costs credits and needs an API key; nothing was sent. {KEY_HINT}"
            )
        journal = self.journal
        host = self.settings.v2_base_url if endpoint.v2 else self.settings.base_url
        attempt_id = journal.begin(endpoint.name, host, {**(payload or {}), **(params or {})}) if journal else None
        try:
            data = yield from self._request_flow(endpoint, json=payload, params=params, attempt_id=attempt_id)
            parsed = self.responses.parse(endpoint, parser, data)
        except APIResponseValidationError as exc:
            raise self._note_outcome(attempt_id, exc, unknown=True, hint=True) from None
        except APIStatusError as exc:
            doubtful = is_doubtful(exc.status_code)
            raise self._note_outcome(attempt_id, exc, unknown=doubtful, hint=doubtful) from None
        except CreateOutcomeUnknownError as exc:
            exc.attempt_id = exc.attempt_id or attempt_id
            raise self._note_outcome(attempt_id, exc, unknown=True, hint=False) from None
        except MusicGenError as exc:
            raise self._note_outcome(attempt_id, exc, unknown=False, hint=False) from None
        except GeneratorExit:
            raise
        except BaseException as exc:  # KeyboardInterrupt, CancelledError, anything unforeseen: maybe charged
            note = PAID_STOPPED.format(name=endpoint.name) + f" ({type(exc).__name__})"
            if journal is not None and attempt_id:
                self._journal_write("the interrupted request", lambda: journal.unknown(attempt_id, note))
            raise
        return parsed, attempt_id

    def _note_outcome(self, attempt_id: str | None, exc: MusicGenError, *, unknown: bool, hint: bool) -> MusicGenError:
        """Journal how a paid request ended; a doubtful one also tells the user how to check."""
        if hint and isinstance(exc, APIError):
            exc.message += " " + DOUBT_HINT
            exc.args = (exc.message,)
        journal = self.journal
        if journal is not None and attempt_id:
            note = self.redact(str(exc))
            write = journal.unknown if unknown else journal.rejected
            self._journal_write("how the request ended", lambda: write(attempt_id, note))
        return exc

    # -- endpoint flows --------------------------------------------------------------------------------

    def _generate_flow(self, request: Any, fields: dict[str, Any]) -> Flow[GenerateResult]:
        request = _positional(request, "generate")
        if isinstance(request, EngineRequest):  # a checked engine request (the magic's, a batch row's)
            request, fields = None, {**request.model_dump(exclude_none=True), **fields}
        if fields.get("provider") is not None:  # `provider="elevenlabs"`: a synchronous engine, run in the background
            provider = check_provider(fields.pop("provider"))
            if provider != MUSICFUL:
                return self.engine_calls.start(provider, {**dict(request or {}), **fields})
        model = build_generate_request(request, allow_unknown_models=self.settings.allow_unknown_models, **fields)
        result, attempt_id = yield from self._paid_flow(GENERATE, model.to_payload(), _ids_of_generate)
        journal = self.journal
        if journal is not None and attempt_id:
            self._journal_write(f"the new task ids {result.ids}", lambda: journal.submitted(attempt_id, result.ids))
        return result

    def _submit_v2_flow(self, request: Any, fields: dict[str, Any]) -> Flow[list[V2Song]]:
        request = _positional(request, "submit_v2")
        model: V2Request = build_v2_request(request, allow_unknown_models=self.settings.allow_unknown_models, **fields)
        songs, attempt_id = yield from self._paid_flow(SUBMIT_V2, model.to_payload(), _submitted_songs)
        journal = self.journal
        if journal is not None and attempt_id:
            ids = [s.id for s in songs]
            self._journal_write(f"the new song ids {ids}", lambda: journal.submitted(attempt_id, ids, v2=True))
            self._observe(songs)  # their titles and lyrics: the v2 query answers them blank later
        return songs

    def _lyrics_flow(self, prompt: str) -> Flow[LyricsResult]:
        model = build_lyrics_request(prompt)
        result, attempt_id = yield from self._paid_flow(LYRICS, model.to_payload(), LyricsResult.model_validate)
        self._answered(attempt_id, "the answer of lyrics")
        return result

    def _key_info_flow(self) -> Flow[KeyInfo]:
        data = yield from self._request_flow(KEY_INFO)
        return self.responses.parse(KEY_INFO, KeyInfo.model_validate, data)

    def _observe(self, records: list[Record]) -> None:
        journal = self.journal
        if journal is not None and records:
            self._journal_write("task progress", lambda: journal.observe(records))

    def _tasks_flow(self, ids: Any, deadline: float | None = None) -> Flow[list[TaskRecord]]:
        wanted = v1_ids(ids)
        local = self.engine_calls.records(wanted)  # engine songs are answered here, without a request
        records: list[TaskRecord] = list(local.values())
        for chunk in chunk_ids([i for i in wanted if i not in local]):
            data = yield from self._request_flow(TASKS, params={"ids": ",".join(chunk)}, deadline=deadline)
            records.extend(self.responses.parse(TASKS, task_records, data))
        self._observe(list(records))
        return records

    def _query_v2_flow(self, song_id: str, deadline: float | None = None) -> Flow[V2Song]:
        song_id = check_id(song_id, "song_id")
        data = yield from self._request_flow(QUERY_V2, params={"song_id": song_id}, deadline=deadline)
        songs = self.responses.parse(QUERY_V2, v2_songs, data)
        song = next((s for s in songs if s.id == song_id), songs[0] if songs else None)
        if song is None:
            raise APIResponseValidationError(f"v2 query: no song {song_id!r} in the answer", body=data)
        self._observe([song])
        return song

    def _song_url_flow(self, endpoint: Endpoint, song_id: str, names: tuple[str, ...]) -> Flow[str]:
        song_id = check_id(song_id, "song_id")

        def pick(data: Any) -> str:
            value = first_text(data, names)
            if value is None:
                raise ValueError(f"no {names[0]} in the answer")
            return value

        value, attempt_id = yield from self._paid_flow(endpoint, None, pick, params={"song_id": song_id})
        self._answered(attempt_id, f"the answer of {endpoint.name}")
        return value

    def _answered(self, attempt_id: str | None, what: str) -> None:
        """A paid call that creates no task (an extra, lyrics) was answered: its attempt is done, not pending (a
        pending one of a process that has ended reads as "may have been charged")."""
        journal = self.journal
        if journal is not None and attempt_id:
            self._journal_write(what, lambda: journal.submitted(attempt_id, []))

    # -- downloads -------------------------------------------------------------------------------------

    def _download_target(self, task: Record | str, allow_preview: bool) -> tuple[str, str | None, str]:
        if isinstance(task, str):
            if not task.strip().lower().startswith(("http://", "https://")):
                raise MusicGenError(f"Not an http(s) URL to download: {task[:100]!r}")
            return task.strip(), None, "song"
        if not isinstance(task, TaskRecord | V2Song):
            raise MusicGenError(f"download() takes a finished record or an http(s) URL (got {type(task).__name__}).")
        if task.state is not TaskState.COMPLETE and not (allow_preview and task.state is TaskState.PREVIEW):
            raise MusicGenError(f"Task {task.id} is {task.state.value}, not complete: nothing final to download yet.")
        url = task.audio_url or ""
        if not url.lower().startswith(("http://", "https://")):
            raise MusicGenError(f"Task {task.id} has no http(s) audio URL to download.")
        return url, task.title, task.id

    def _download_limit(self) -> int:
        return int(self.settings.max_download_mb * 1024 * 1024)

    def _save_failed(self, url: str, directory: str | Path, exc: OSError) -> DownloadError:
        where = public_url(url)
        reason = exc.strerror or type(exc).__name__
        return DownloadError(f"Could not save {where} in {str(directory)[:200]!r} ({reason}); no file was left behind.")

    def _downloaded(self, task: Record | str, path: Path) -> Path:
        journal = self.journal
        if journal is not None and not isinstance(task, str):
            self._journal_write("the download", lambda: journal.downloaded(task.id, str(path)))
        return path

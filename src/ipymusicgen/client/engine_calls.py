"""Songs from the synchronous engines (ElevenLabs Music, Lyria): one call answers with the audio itself.

So they fit a journal built for tasks: each song gets a task id of the project's making (`elevenlabs-<hex>`,
with its provider); the attempt is journalled BEFORE anything is sent; the call runs in a background thread, so
`generate()` returns the ids at once like the service's; the audio of the answer is spooled to a private file
and the song's record points at it, so `wait()`, the archive and every follower treat it like any other song.

Money: a call is sent once, never retried (no SDK: ElevenLabs' retries a POST on 429/5xx). An answer lost
after sending (a dropped connection, a timeout, a 5xx, an answer that is not a song) is outcome unknown, "may
have been charged", journalled as such; a definite refusal (401, 403, 400, 422, 429) is not charged and says
so; a connection that never opened sent nothing. The key is scrubbed from every message (the client's rule).

Each call carries an `Idempotency-Key`: its task id, one per journalled attempt (journalled with the exact body, so
it is never sent with another). Engines ignore it; a team gateway keeps the answer under it, so `resume()` can ask
a gateway again for a song whose answer was lost and get the kept one, never a second paid call
(`engine_recovery`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import urllib.parse
import uuid
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import httpx

from .._version import __version__
from ..config import is_loopback, url_scheme
from ..engines import elevenlabs as el
from ..engines import engine
from ..engines import lyria as ly
from ..engines.wire import AnswerError, Charge, EngineAnswer, WireRequest, charge_of_status, scrub
from ..errors import InsecureTransportError, MissingKeyError
from ..lifecycle import at_exit
from ..models.dollar_prices import estimate
from ..models.providers import EngineRequest, build_engine_request
from ..models.schema import GenerateResult, TaskRecord
from ..models.tasks import V1_COMPLETE_STATUS, V1_FAILED_STATUS
from .downloads import AtomicFile, safe_filename
from .responses import MAX_BODY_BYTES, BodyReader
from .transport import trust_store

if TYPE_CHECKING:
    from .core import _Core

ENGINE_ID = re.compile(r"^(elevenlabs|lyria)-[0-9a-f]{32}$")
"""A task id of the project's making for a synchronous engine's song."""
PROCESSING_STATUS = 1
"""A v1 status that reads as processing (neither complete 0, preview 2 nor failed 3)."""
ENGINE_TIMEOUT = 900.0
"""Seconds a synchronous compose may take (a 10-minute ElevenLabs song takes minutes)."""
BUILDERS = MappingProxyType({"elevenlabs": (el.build, el.parse_answer), "lyria": (ly.build, ly.parse_answer)})
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass
class EngineRun:
    """One synchronous song: its request, its record as known now, its thread."""

    task_id: str
    request: EngineRequest
    record: TaskRecord
    attempt_id: str | None
    thread: threading.Thread | None = None


def _sandbox_spool() -> Path:
    """This process's folder for the embedded sandbox's answers: named by the process (no module state keeps it),
    made private on first use, removed at exit. A folder of that name that is not a private directory of this
    user (a link, another owner, open to others) is never used: the answers go to a fresh temporary folder."""
    folder = Path(tempfile.gettempdir()) / f"ipymusicgen-engine-audio-{os.getpid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        return Path(tempfile.mkdtemp(prefix="ipymusicgen-engine-audio-"))
    return folder


def _remove_sandbox_spool() -> None:
    folder = Path(tempfile.gettempdir()) / f"ipymusicgen-engine-audio-{os.getpid()}"
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def spool_dir(client: _Core) -> Path:
    """Where answers' audio is kept: beside the journal; with no journal, in the user data folder (a paid song
    is never in a folder removed behind the user's back), or, for the embedded sandbox, a temporary folder."""
    journal_path = getattr(client.journal, "path", None)
    if journal_path:
        folder = Path(journal_path).parent / "engine-audio"
    elif client.settings.is_embedded_sandbox:
        folder = _sandbox_spool()
        at_exit(_remove_sandbox_spool)  # registered once, however often asked
    else:
        import platformdirs

        folder = Path(platformdirs.user_data_dir("ipymusicgen", appauthor=False)) / "engine-audio"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


class EngineCalls:
    """A client's synchronous-engine songs: started in the background, answered locally to `tasks()`/`wait()`."""

    def __init__(self, client: _Core) -> None:
        self._client = client
        self._runs: dict[str, EngineRun] = {}
        self._lock = threading.Lock()
        self._pool: httpx.Client | None = None
        self.timeout = ENGINE_TIMEOUT

    def _http(self) -> httpx.Client:
        """One connection pool for this client's engine calls (a new one per call costs a TLS context each time);
        it never retries, never follows a redirect, and closes when this object is collected."""
        with self._lock:
            if self._pool is None:
                self._pool = httpx.Client(follow_redirects=False, verify=trust_store())
                weakref.finalize(self, self._pool.close)
            return self._pool

    def __repr__(self) -> str:
        return f"EngineCalls({len(self._runs)} song(s))"

    # -- starting ----------------------------------------------------------------------------------------

    def start(self, provider: str, fields: Mapping[str, Any]) -> GenerateResult:
        """Check (nothing sent on a refusal), journal the attempt, start the call; the id at once."""
        request = build_engine_request(provider=provider, **fields)
        settings = self._client.settings
        rules = engine(provider)
        key = settings.engine_key(provider)
        if not key:
            raise MissingKeyError(
                f"A {provider} song costs money and needs a key: set {rules.env_key} (or pass it in the settings); "
                "nothing was sent."
            )
        base = settings.engine_base_url(provider)
        if url_scheme(base) not in ("http", "https"):
            raise InsecureTransportError(
                f"The {provider} base URL must be http(s) (got {base[:80]!r}); nothing was sent."
            )
        if settings.is_embedded_sandbox and not is_loopback(base):  # it journals nothing: a paid call must not go
            raise InsecureTransportError(
                f"This client plays the embedded sandbox (it journals nothing), but its {provider} base URL is "
                f"{base}; point {rules.env_base_url} at the sandbox or use a client with a key. Nothing was sent."
            )
        if url_scheme(base) == "http" and not is_loopback(base) and not settings.allow_insecure_http:
            raise InsecureTransportError(
                f"Refusing to send the {provider} key over plain http to {base}; use https, or opt in with "
                "allow_insecure_http=True (MUSICGEN_ALLOW_INSECURE_HTTP=1)."
            )
        wire = BUILDERS[provider][0](request)
        price = estimate(request)  # in US dollars, before anything is sent (a bad price table refuses here)
        task_id = f"{provider}-{uuid.uuid4().hex}"
        payload = {
            "provider": provider,
            "model": request.model_name,
            "task_id": task_id,
            "title": request.title,
            "style": request.prompt,
            "seconds": request.seconds,
            "lyrics": request.lyrics,
            "seed": request.seed,
            "instrumental": request.instrumental,
            "estimate_usd": str(price),
            "wire": {  # what `resume()` may send a team gateway again, exactly, under the same key (engine_recovery)
                "request": request.model_dump(mode="json", exclude_none=True),
                "path": wire.url_path,
                "params": dict(wire.params),
                "json": dict(wire.json),
            },
        }
        journal = self._client.journal
        attempt_id = journal.begin(wire.endpoint.name, base, payload) if journal is not None else None  # before sending
        record = TaskRecord(
            id=task_id, status=PROCESSING_STATUS, title=request.title, style=request.prompt or None,
            lyric=request.lyrics, provider=provider, model=request.model_name, estimate_usd=str(price),
        )  # fmt: skip
        run = EngineRun(task_id, request, record, attempt_id)
        with self._lock:
            self._runs[task_id] = run
        run.thread = threading.Thread(
            target=self._run, args=(run, wire, base, key), name=f"ipymusicgen-{provider}-{task_id[-8:]}", daemon=True
        )
        run.thread.start()
        return GenerateResult(ids=[task_id])

    # -- the call, in the background ---------------------------------------------------------------------

    def _run(self, run: EngineRun, wire: WireRequest, base: str, key: str) -> None:
        provider = run.request.provider
        try:
            answer = self._send(run, wire, base, key)
        except _Ended as ended:
            self._fail(run, ended.message, ended.charge, ended.status)
            return
        except Exception as exc:  # anything unforeseen after the send began: the work may have been done
            detail = scrub(f"{type(exc).__name__}: {exc}", key)[:300]
            self._fail(run, f"The {provider} call ended unexpectedly ({detail}).", Charge.UNKNOWN, None)
            return
        self._finish(run, answer)

    def _send(
        self, run: EngineRun, wire: WireRequest, base: str, key: str, extra: Mapping[str, str] | None = None
    ) -> EngineAnswer:
        provider = run.request.provider
        rules = engine(provider)
        headers = {
            "User-Agent": f"ipymusicgen/{__version__} httpx/{httpx.__version__}",
            "Accept": "*/*",
            **rules.headers(key),
            IDEMPOTENCY_HEADER: run.task_id,  # one per journalled attempt: a gateway's repeat gets the kept answer
            **(extra or {}),
        }
        query = "?" + urllib.parse.urlencode(dict(wire.params)) if wire.params else ""
        url = base + wire.url_path + query
        settings = self._client.settings
        limit = max(MAX_BODY_BYTES, int(settings.max_download_mb * 1024 * 1024 * 1.4))  # base64 audio in JSON
        timeout = httpx.Timeout(self.timeout, connect=settings.connect_timeout)
        try:
            http = self._http()
            request = http.build_request(
                wire.endpoint.method, url, json=dict(wire.json), headers=headers, timeout=timeout
            )
            response = http.send(request, stream=True, follow_redirects=False)
            try:
                reader = BodyReader(response, deadline=time.monotonic() + self.timeout, limit=limit)
                for chunk in response.iter_bytes():
                    reader.feed(chunk)
                response = reader.finish()
            finally:
                response.close()
        except NOT_SENT as exc:
            detail = scrub(str(exc), key)[:200] or type(exc).__name__
            raise _Ended(f"Could not reach {provider} at {base} ({detail}); nothing was sent, nothing charged.",
                         Charge.NOT_CHARGED) from None  # fmt: skip
        except httpx.HTTPError as exc:
            detail = scrub(str(exc), key)[:200] or type(exc).__name__
            raise _Ended(
                f"The {wire.endpoint.name} request may have reached {provider} but no full answer came back "
                f"({detail}). It may have been charged; it was NOT sent again. Check your account before trying again.",
                Charge.UNKNOWN,
            ) from None
        except Exception as exc:  # an answer too large or too slow to read (BodyReader): sent, maybe done
            detail = scrub(str(exc), key)[:200] or type(exc).__name__
            raise _Ended(f"The {provider} answer could not be read ({detail}); it may have been charged.",
                         Charge.UNKNOWN) from None  # fmt: skip
        status = response.status_code
        if not 200 <= status < 300:
            charge = charge_of_status(status)
            text = _server_text(rules.error_text, response, key)
            said = f"HTTP {status}: {text}" if text else f"HTTP {status}"
            if charge is Charge.NOT_CHARGED:
                message = f"{provider} refused the song ({said}); not charged."
            else:
                message = f"{provider} answered {said}: the song may have been charged (made); NOT sent again."
            raise _Ended(message, charge, status)
        try:
            return BUILDERS[provider][1](response.headers.get("content-type", ""), response.content)
        except AnswerError as exc:
            note = "not charged" if exc.charge is Charge.NOT_CHARGED else "it may have been charged; NOT sent again"
            raise _Ended(f"The {provider} answer held no song ({scrub(str(exc), key)}); {note}.", exc.charge,
                         status) from None  # fmt: skip

    def _finish(self, run: EngineRun, answer: EngineAnswer) -> None:
        path = self._spool(run.task_id, answer)
        seconds = run.request.length_seconds
        update: dict[str, Any] = {
            "status": V1_COMPLETE_STATUS,
            "audio_url": path.as_uri(),
            "duration": seconds * 1000 if seconds is not None else None,
            "lyric": answer.lyrics or run.request.lyrics,
            "title": answer.title or run.request.title,
            "charge": Charge.CHARGED.value,
        }
        if answer.timestamps:
            update["timestamps"] = [(w.word, w.start_ms, w.end_ms) for w in answer.timestamps]
        record = run.record.model_copy(update=update)
        journal = self._client.journal
        if journal is not None and run.attempt_id:
            self._client._journal_write(f"the {run.request.provider} song {run.task_id}",
                                        lambda: journal.submitted(run.attempt_id or "", [run.task_id]))  # fmt: skip
        self._settle(run, record)

    def _fail(self, run: EngineRun, message: str, charge: Charge, status: int | None) -> None:
        record = run.record.model_copy(
            update={
                "status": V1_FAILED_STATUS,
                "fail_code": status or 0,
                "fail_reason": message,
                "charge": charge.value,
            }
        )
        journal = self._client.journal
        if journal is not None and run.attempt_id:
            attempt = run.attempt_id
            write = journal.rejected if charge is Charge.NOT_CHARGED else journal.unknown
            self._client._journal_write("how the song ended", lambda: write(attempt, message))
        self._settle(run, record)

    def _settle(self, run: EngineRun, record: TaskRecord) -> None:
        with self._lock:
            run.record = record
        self._client._observe([record])
        for listener in list(self._client._record_listeners):
            with contextlib.suppress(Exception):  # a listener's failure is its own; wait() still sees the song
                listener([record])  # the archive follows the song as soon as its audio is here

    def _spool(self, task_id: str, answer: EngineAnswer) -> Path:
        folder = spool_dir(self._client)
        target = folder / f"{task_id}{answer.suffix}"
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".part-", delete=False) as part:
            part.write(answer.audio)
        os.replace(part.name, target)
        return target

    # -- what the waiting side asks ----------------------------------------------------------------------

    def owns(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._runs

    def records(self, ids: Iterable[str]) -> dict[str, TaskRecord]:
        """The records of these ids that are engine songs: this client's from memory, others' from the journal
        (never from the service, which does not know them)."""
        wanted = list(ids)
        with self._lock:
            found = {i: self._runs[i].record for i in wanted if i in self._runs}
        missing = [i for i in wanted if i not in found and ENGINE_ID.match(i)]
        if missing:
            found.update(self._journalled(missing))
        return found

    def _journalled(self, ids: list[str]) -> dict[str, TaskRecord]:
        """Engine songs another client or process made: the journal holds a song once its answer came."""
        history = getattr(self._client.journal, "history", None)
        found: dict[str, TaskRecord] = {}
        for task_id in ids:
            entries = [e for e in (history(text=task_id, limit=5) if history else []) if e.id == task_id]
            provider = task_id.split("-", 1)[0]
            if entries and entries[0].state == "complete":
                entry = entries[0]
                found[task_id] = TaskRecord(
                    id=task_id, status=V1_COMPLETE_STATUS, title=entry.title, style=entry.style,
                    audio_url=entry.audio_url, lyric=entry.lyrics, provider=provider, charge=Charge.CHARGED.value,
                )  # fmt: skip
            else:
                found[task_id] = TaskRecord(
                    id=task_id, status=V1_FAILED_STATUS, fail_code=0, provider=provider, charge=Charge.UNKNOWN.value,
                    fail_reason=f"No answer to this {provider} song is known here (another process sent it, or "
                    "ended before its answer): it may have been charged. resume() lists such calls; it is NOT "
                    "sent again.",
                )  # fmt: skip
        return found

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every running call to end (tests, shutdown); True when none is left running."""
        with self._lock:
            threads = [r.thread for r in self._runs.values() if r.thread is not None]
        for thread in threads:
            thread.join(timeout)
        return not any(t.is_alive() for t in threads)

    def local_file(self, task: Any) -> Path | None:
        """The spooled audio a record or URL points at, if it is one of this machine's engine answers."""
        url = task if isinstance(task, str) else getattr(task, "audio_url", None)
        if not isinstance(url, str) or not url.startswith("file:"):
            return None
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
        try:
            folder = spool_dir(self._client).resolve()
            resolved = path.resolve()
        except OSError:
            return None
        inside = resolved.parent == folder and resolved.name.split("-")[0] in BUILDERS  # only our own answers
        return resolved if inside and resolved.is_file() else None

    def copy(self, task: Any, directory: str | Path) -> Path | None:
        """`download()` of an engine song: its spooled audio copied into `directory` (atomically), else None."""
        source = self.local_file(task)
        if source is None:
            return None
        title = None if isinstance(task, str) else getattr(task, "title", None)  # a str has a .title method
        with AtomicFile(Path(directory)) as target, source.open("rb") as data:
            shutil.copyfileobj(data, _Writer(target))
            return target.commit(safe_filename(title, source.suffix, source.stem))


class _Writer:
    def __init__(self, target: AtomicFile) -> None:
        self.target = target

    def write(self, chunk: bytes) -> None:
        self.target.write(chunk)


class _Ended(Exception):
    def __init__(self, message: str, charge: Charge, status: int | None = None) -> None:
        self.message = message
        self.charge = charge
        self.status = status
        super().__init__(message)


def _server_text(error_text: Any, response: httpx.Response, key: str) -> str:
    import json

    try:
        body: Any = json.loads(response.content) if response.content.strip() else None
    except (ValueError, RecursionError):
        body = response.content[:300].decode("utf-8", "replace")
    try:
        text = error_text(body) if body is not None else ""
    except Exception:  # a hostile body's shape costs only its message
        text = ""
    return scrub(str(text), key)[:300]

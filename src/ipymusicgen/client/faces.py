"""`MusicClient` (sync) and `AsyncMusicClient` over httpx: one core (`core.py`), two faces.

The faces differ only in how they send and sleep: the sync face drives flows with `httpx.Client` and
`time.sleep`, the async face with `httpx.AsyncClient` and `asyncio.sleep`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import httpx
from pydantic import BaseModel

from ..models.schema import (
    GenerateResult,
    KeyInfo,
    LyricsResult,
    TaskRecord,
    V2Song,
)
from ..models.tasks import TaskSet
from .core import _MP4_NAMES, _VIBE_NAMES, _WAV_NAMES, IDS_QUERY_BUDGET, T, _Core, chunk_ids
from .downloads import (
    AtomicFile,
    SizeLimit,
    safe_filename,
    send_song_request,
    send_song_request_async,
    suffix_for,
)
from .flows import Blocking, Flow, Journal, Record, Send, Sleep, TaskJournal, UpdateCallback
from .responses import (
    DOUBTFUL_STATUS,
    MP4,
    VIBE,
    WAV,
    Endpoint,
)
from .retry import RETRYABLE_STATUS, backoff_delay
from .transport import bounded, bounded_transport, trust_store
from .waiting import Resumed, archive_outcome, archive_time_left, is_transient

if TYPE_CHECKING:
    from ..batch import Batch  # a type only: the batch engine is the workspace's, passed in through `wiring`

__all__ = [
    "DOUBTFUL_STATUS",
    "IDS_QUERY_BUDGET",
    "RETRYABLE_STATUS",
    "AsyncMusicClient",
    "Endpoint",
    "Journal",
    "MusicClient",
    "Record",
    "Resumed",
    "TaskJournal",
    "UpdateCallback",
    "backoff_delay",
    "chunk_ids",
    "is_transient",
]


class MusicClient(_Core):
    """Synchronous client. Needs no event loop; safe to use from any thread.

    >>> client = MusicClient()            # key and hosts from MUSICGEN_* env vars
    >>> ids = client.generate(action="auto", style="lo-fi rain").ids
    >>> songs = client.wait(ids)
    """

    def __init__(self, api_key: str | None = None, *, http_client: httpx.Client | None = None, **kwargs: Any) -> None:
        super().__init__(api_key, **kwargs)
        self._http = http_client or httpx.Client(timeout=self._timeout(), transport=bounded_transport())
        self.sleep: Callable[[float], object] = time.sleep
        """How the client waits between retries and polls (a test gives it a fake clock)."""

    def _exchange(self, step: Send) -> httpx.Response:
        """Send without following redirects (even if the http client would) and read the body within bounds.

        `bounded()` cuts every socket read to the deadline (headers included) on the client's own transport.
        """
        deadline = self._deadline(step)
        with bounded(deadline - time.monotonic()):
            response = self._http.send(step.request, stream=True, follow_redirects=False)
            try:
                reader = self._body_reader(response, deadline)
                for chunk in response.iter_bytes():
                    reader.feed(chunk)
                return reader.finish()
            finally:
                response.close()

    def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Blocking):
                    try:
                        done = step.call()
                    except BaseException as exc:
                        step = flow.throw(exc)
                        continue
                    step = flow.send(done)
                    continue
                try:
                    if isinstance(step, Sleep):
                        self.sleep(step.seconds)
                        outcome: Any = None
                    else:
                        outcome = self._exchange(step)
                except httpx.RequestError as exc:
                    outcome = exc
                except BaseException as exc:  # Ctrl-C, an oversized answer: the flow decides (a paid one journals)
                    step = flow.throw(exc)
                    continue
                step = flow.send(outcome)
        except StopIteration as stop:
            return stop.value

    def generate(self, request: BaseModel | Mapping[str, Any] | None = None, /, **fields: Any) -> GenerateResult:
        """Start a v1 generation (any action), fields by keyword; returns the new task ids at once. Costs credits."""
        return self._run(self._generate_flow(request, fields))

    def submit_v2(self, request: BaseModel | Mapping[str, Any] | None = None, /, **fields: Any) -> list[V2Song]:
        """Start a v2 generation, fields by keyword; returns the new songs (still running). Costs credits."""
        return self._run(self._submit_v2_flow(request, fields))

    def query_v2(self, song_id: str) -> V2Song:
        return self._run(self._query_v2_flow(song_id))

    def lyrics(self, prompt: str) -> LyricsResult:
        return self._run(self._lyrics_flow(prompt))

    def key_info(self) -> KeyInfo:
        return self._run(self._key_info_flow())

    def tasks(self, ids: str | Iterable[str] | GenerateResult) -> list[TaskRecord]:
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
        ids: Any = (),
        *,
        v2_ids: Iterable[str] = (),
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
        raise_on_failure: bool = False,
        archived: bool = False,
    ) -> list[Record]:
        """Poll until every task is complete or failed (one batched query per interval).

        `ids` may be what `generate()` or `submit_v2()` returned, records, or task ids; v1 and v2 are routed.
        `archived=True` also waits, within the same `timeout`, until each complete song is in the archive (or
        its archive failed, as the library then says), so `ipymusicgen.waveform(id)` and `analyze(id)` find it.
        """
        started = time.monotonic()
        records = self._run(self._wait_flow(ids, v2_ids, timeout, interval, on_update, raise_on_failure))
        if archived:
            left = archive_time_left(self, timeout, started)
            archive_outcome(self.wiring.wait_archived(self, records, left), timeout)
        return records

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

    def batch(self, requests: Any, /, **options: Any) -> Batch:
        """Many songs from a list or DataFrame: `name`, `concurrency`, `budget`, `wait`, `stall_timeout`,
        `retry_unknown`, `on_update`. Returns a `Batch`; see `ipymusicgen.batch.run_batch`."""
        return self.wiring.run_batch(self, requests, options)

    def download(self, task: Record | str, directory: str | Path = ".", *, allow_preview: bool = False) -> Path:
        """Stream a finished song (or a URL) to `directory`, named from its title, written atomically."""
        if (copied := self.engine_calls.copy(task, directory)) is not None:  # an engine's answer, spooled here
            return self._downloaded(task, copied)
        url, title, fallback = self._download_target(task, allow_preview)
        limit = SizeLimit(self._download_limit(), url, grace=self.settings.timeout)
        try:
            with bounded(self.settings.timeout):  # the status line and headers: within the HTTP timeout
                request = self._http.build_request("GET", url, timeout=self._timeout())
                response = send_song_request(self._http, request)  # redirects by the one rule (downloads.py)
            try:
                if not response.is_success:
                    raise self.responses.download_status_error(url, response)
                limit.check_declared(response.headers)
                with AtomicFile(Path(directory)) as target:
                    for chunk in response.iter_bytes():
                        target.write(limit.take(chunk))
                    name = safe_filename(title, suffix_for(url, response.headers.get("content-type")), fallback)
                    return self._downloaded(task, target.commit(name))
            finally:
                response.close()
        except httpx.RequestError as exc:
            raise self.responses.download_failed(url, exc) from exc
        except OSError as exc:
            raise self._save_failed(url, directory, exc) from exc

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


async def _within(awaitable: Any, seconds: float, request: httpx.Request) -> Any:
    """The whole exchange (headers and body) bounded in time: asyncio can cancel what a socket timeout cannot."""
    import asyncio

    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise httpx.ReadTimeout("the answer did not finish in time", request=request) from None


class AsyncMusicClient(_Core):
    """Asynchronous client for `await` (works with IPython's top-level await)."""

    def __init__(
        self, api_key: str | None = None, *, http_client: httpx.AsyncClient | None = None, **kwargs: Any
    ) -> None:
        super().__init__(api_key, **kwargs)
        self._http = http_client or httpx.AsyncClient(timeout=self._timeout(), verify=trust_store())
        self.sleep: Callable[[float], Awaitable[object]] = _async_sleep
        """How the client waits between retries and polls (a test gives it a fake clock)."""

    async def _read(self, request: httpx.Request, deadline: float) -> httpx.Response:
        response = await self._http.send(request, stream=True, follow_redirects=False)
        try:
            reader = self._body_reader(response, deadline)
            async for chunk in response.aiter_bytes():
                reader.feed(chunk)
            return reader.finish()
        finally:
            await response.aclose()

    async def _exchange(self, step: Send) -> httpx.Response:
        deadline = self._deadline(step)
        bound = max(deadline - time.monotonic(), 0.0) + (self.settings.connect_timeout if step.deadline is None else 0)
        return cast(httpx.Response, await _within(self._read(step.request, deadline), bound, step.request))

    async def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Blocking):
                    import asyncio  # here: importing the package loads no asyncio (test_package)

                    try:
                        done = await asyncio.to_thread(step.call)
                    except BaseException as exc:
                        step = flow.throw(exc)
                        continue
                    step = flow.send(done)
                    continue
                try:
                    if isinstance(step, Sleep):
                        await self.sleep(step.seconds)
                        outcome: Any = None
                    else:
                        outcome = await self._exchange(step)
                except httpx.RequestError as exc:
                    outcome = exc
                except BaseException as exc:  # CancelledError, an oversized answer: the flow decides
                    step = flow.throw(exc)
                    continue
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

    async def tasks(self, ids: str | Iterable[str] | GenerateResult) -> list[TaskRecord]:
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
        ids: Any = (),
        *,
        v2_ids: Iterable[str] = (),
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
        raise_on_failure: bool = False,
        archived: bool = False,
    ) -> list[Record]:
        started = time.monotonic()
        records = await self._run(self._wait_flow(ids, v2_ids, timeout, interval, on_update, raise_on_failure))
        if archived:  # the archive's worker is a thread: waited for off the event loop
            import asyncio  # here: importing the package leaves asyncio for later

            left = archive_time_left(self, timeout, started)
            found = await asyncio.to_thread(self.wiring.wait_archived, self, records, left)
            archive_outcome(found, timeout)
        return records

    async def resume(
        self,
        *,
        wait: bool = False,
        timeout: float | None = None,
        interval: float | None = None,
        on_update: UpdateCallback | None = None,
    ) -> Resumed:
        return await self._run(self._resume_flow(wait, timeout, interval, on_update))

    async def batch(self, requests: Any, /, **options: Any) -> Batch:
        """`MusicClient.batch` on this client; with `wait=False`, `await batch` later."""
        return await self.wiring.run_batch_async(self, requests, options)

    async def download(self, task: Record | str, directory: str | Path = ".", *, allow_preview: bool = False) -> Path:
        if (copied := self.engine_calls.copy(task, directory)) is not None:  # an engine's answer, spooled here
            return self._downloaded(task, copied)
        url, title, fallback = self._download_target(task, allow_preview)
        limit = SizeLimit(self._download_limit(), url, grace=self.settings.timeout)
        try:
            request = self._http.build_request("GET", url, timeout=self._timeout())
            sent = send_song_request_async(self._http, request)  # redirects by the one rule (downloads.py)
            response = await _within(sent, self.settings.timeout + self.settings.connect_timeout, request)
            try:
                if not response.is_success:
                    raise self.responses.download_status_error(url, response)
                limit.check_declared(response.headers)
                with AtomicFile(Path(directory)) as target:
                    async for chunk in response.aiter_bytes():
                        target.write(limit.take(chunk))
                    name = safe_filename(title, suffix_for(url, response.headers.get("content-type")), fallback)
                    return self._downloaded(task, target.commit(name))
            finally:
                await response.aclose()
        except httpx.RequestError as exc:
            raise self.responses.download_failed(url, exc) from exc
        except OSError as exc:
            raise self._save_failed(url, directory, exc) from exc

    async def aclose(self) -> None:
        await self._http.aclose()
        self._close_own_journal()

    async def __aenter__(self) -> AsyncMusicClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

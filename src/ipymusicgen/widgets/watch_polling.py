"""The watcher's polling part: one batched query per round in a daemon thread, backoff, waiting.

The thread only sends messages to the browser (never prints or displays), so nothing it does can land
in the wrong cell. It stops when every task is finished, on `stop()`/`close()`, and backs off
(exponentially, capped, at least as long as a Retry-After asks) while the service errors.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..client.faces import MusicClient
from ..client.retry import MAX_POLL_BACKOFF, poll_backoff, retry_after
from ..client.waiting import wait_timeout_error
from ..errors import MusicGenError
from ..models.tasks import TaskSet
from .song_data import Record

if TYPE_CHECKING:
    from ..batch.drivers import Batch
    from .card import TaskCard

MAX_BACKOFF = MAX_POLL_BACKOFF
backoff = poll_backoff  # the one retry policy's polling backoff (client/retry.py)


class PollingPart:
    """Polls the watcher's own tasks, waits for them, and follows the batches that feed it."""

    _client: MusicClient
    interval: float
    _tasks: TaskSet
    _own: TaskSet
    _cards: dict[str, TaskCard]
    _feeders: list[Batch]
    batch_line_shown: bool
    _fed: threading.Condition
    _lock: threading.RLock
    _poll_lock: threading.Lock
    _thread: threading.Thread | None
    _stop_event: threading.Event
    _closed: bool
    _failures: int
    _last_error: str | None
    _retry_in: float | None
    _server_wait: float | None
    _done_callbacks: list[Callable[[], Any]]
    batch_line: str
    done: bool
    records: list[Record]
    add: Callable[..., list[str]]
    _apply: Callable[[list[Record]], None]
    _publish: Callable[[Iterable[str]], None]

    @property
    def running(self) -> bool:
        """True while the polling thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def last_error(self) -> str | None:
        """The error of the last polling round, or None if it went well."""
        return self._last_error

    def poll_once(self) -> list[Record]:
        """One polling round of this watcher's own tasks (one batched v1 query + one per v2 song); the records
        that changed. Tasks fed in by a batch are not queried.

        A service error is shown in the header and returned as [] (see `last_error`).
        """
        with self._poll_lock:
            try:
                polled = self._client.poll(self._own)
            except MusicGenError as exc:
                self._server_wait = retry_after(exc)
                self._show_poll_error(str(exc))
                return []
            self._server_wait = None
            self._last_error = None
            self._retry_in = None
            changed = self._tasks.update(polled)
            self._apply(changed)
            return changed

    def start(self) -> None:
        """Start background polling (no-op if it runs, if all tasks are done, or after close())."""
        with self._lock:
            self._start_locked()

    def stop(self, *, join: float | None = None) -> None:
        """Stop background polling; the cards stay as they are. `start()` resumes.

        Waits for the thread to end (at most `join` seconds; by default as long as one request may take).
        """
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop_event.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(5.0, self._client.settings.timeout + 5) if join is None else join)

    def wait(self, timeout: float | None = None) -> list[Record]:
        """Block until every task is finished, with the client's own wait (same backoff, timeout and errors).

        The background thread pauses meanwhile (one poller at a time) and resumes after a timeout.
        `timeout=None` means the client's `wait_timeout` setting.
        """
        was_running = self.running
        self.stop()
        timeout = self._client.settings.wait_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        v1, v2 = self._own.unfinished()
        try:
            if v1 or v2:
                self._client.wait(v1, v2_ids=v2, timeout=timeout, interval=self.interval, on_update=self._updated)
                with self._poll_lock:
                    self._last_error = None
                    self._retry_in = None
                    self._publish([])
            self._wait_fed(deadline, timeout)
            if self.done:
                self._tell_done()
        finally:
            if was_running and not self.done:
                self.start()
        return self.records

    def _updated(self, records: list[Record]) -> None:
        """Records from the client's wait: keep the ones that changed here, and draw them."""
        with self._poll_lock:
            self._own.update(records)  # so the thread, restarted, does not poll them again
            self._apply(self._tasks.update(records))

    def _batch_moved(self, batch: Batch) -> None:
        """A followed batch changed: cards for newly submitted rows (fed, not polled), the header's line."""
        for row in batch.rows:
            if row.ids and any(task_id not in self._cards for task_id in row.ids):
                self.add(row.ids, v2=row.v2, call=f"row {row.number}", polled=False, request=row.request)
        if self.batch_line_shown:
            self.batch_line = batch.progress_line()
        with self._fed:
            self._fed.notify_all()

    def _wait_fed(self, deadline: float, timeout: float) -> None:
        """Wait for the fed tasks: until every batch feeding them has ended (its last round drawn), or, fed by
        `show` alone, until they are finished."""

        def settled() -> bool:
            with self._lock:
                feeders = list(self._feeders)
            return all(b.done for b in feeders) if feeders else self._tasks.all_finished

        with self._fed:
            while not settled():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise wait_timeout_error(self._tasks, timeout)
                self._fed.wait(min(remaining, 1.0))  # woken by show() or the batch; the 1 s only bounds a missed one

    def _start_locked(self) -> None:
        if self._closed or self.running or self._own.all_finished:
            return
        self._stop_event = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop_event,), name="ipymusicgen-watcher", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        """The polling loop; it only ever sends messages to the browser."""
        failures = 0
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # a bug must not kill polling silently: show it, keep going
                self._show_poll_error(f"{type(exc).__name__}: {exc}")
            failures = 0 if self._last_error is None else failures + 1
            self._failures = failures
            with self._lock:
                finished = self._own.all_finished
                if (finished or stop.is_set()) and self._thread is threading.current_thread():
                    self._thread = None
            if finished or stop.is_set():
                if finished:
                    self._tell_done()
                return
            delay = max(backoff(self.interval, failures), self._server_wait or 0.0) if failures else self.interval
            if failures:
                self._show_poll_error(self._last_error, retry_in=delay)
            stop.wait(delay)

    def when_done(self, callback: Callable[[], Any]) -> None:
        """Call `callback()` once every song it polls has finished (a display then shows the final words)."""
        self._done_callbacks.append(callback)

    def _tell_done(self) -> None:
        """Once, from whichever ends first: the polling thread, or a `wait()` that polled in its place."""
        with self._lock:
            callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            with contextlib.suppress(Exception):  # a closed display must not stop polling's end
                callback()

    def _show_poll_error(self, message: str | None, *, retry_in: float | None = None) -> None:
        self._last_error = message
        self._retry_in = retry_in
        self._publish([])

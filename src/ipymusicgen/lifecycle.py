"""One shutdown path: every part that holds something open at exit registers here, not with `atexit`.

`at_exit(callback)` is called by the layer that owns the thing (the journal files' connections, the sandbox's
temp folder, the session's watchers and workspace), when it first holds something, never when it is imported;
one `atexit` handler, installed by the first registration, runs them in reverse order of registration (the
latest first, as `atexit` does), each on its own, so one failing never keeps the others from closing. An object
that must be closed if its owner never did (a journal holding unwritten task ids) is held weakly with
`close_at_exit`, and closed before the callbacks run.

Background workers register with `add_worker`; the archiver and the analyst are both a `QueueWorker` (one
daemon thread fed by a queue, started by the first item, ended when idle, by `stop()` or by `close()`), which
registers itself. At exit the workers are all told to stop first, then joined within one bound
(`EXIT_JOIN_SECONDS`), and only then is anything closed: a worker inside a native library (an MP3 decoder,
librosa) while the interpreter finalizes can abort the process ("terminate called without an active exception",
exit code 134). This module is the only one in the package that calls `atexit`.
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

EXIT_JOIN_SECONDS = 30.0
"""How long the exit waits, in all, for workers to finish the one item each has in hand."""

_callbacks: list[Callable[[], None]] = []
_lock = threading.Lock()
_exiting = threading.Event()
"""Set when the exit begins (`shutdown`)."""
_hooked: list[bool] = []
"""Whether `shutdown` is registered with `atexit` yet (by the first registration here, not by an import)."""


class Closable(Protocol):
    def close(self) -> None: ...


_closables: weakref.WeakSet[Closable] = weakref.WeakSet()  # type: ignore[type-var]


def _hook() -> None:
    """Install the one `atexit` handler (under `_lock`), once."""
    if not _hooked:
        _hooked.append(True)
        atexit.register(shutdown)


class Worker(Protocol):
    """A background thread's owner: `stop()` takes no more work (at once), `join_worker` waits for the thread."""

    def stop(self) -> None: ...

    def join_worker(self, timeout: float) -> bool: ...


_workers: weakref.WeakSet[Worker] = weakref.WeakSet()  # type: ignore[type-var]


def at_exit(callback: Callable[[], None]) -> Callable[[], None]:
    """Run `callback()` when the process ends; usable as a decorator. Registering twice runs it once."""
    with _lock:
        _hook()
        if callback not in _callbacks:
            _callbacks.append(callback)
    return callback


def close_at_exit(closable: Closable) -> None:
    """Close `closable` at exit if it is still alive then (held weakly: closing it twice must be harmless)."""
    with _lock:
        _hook()
        _closables.add(closable)


def add_worker(worker: Worker) -> None:
    """Stop and join `worker` at exit, before any callback runs (held weakly: a collected worker has no thread)."""
    with _lock:
        _hook()
        _workers.add(worker)


def join_thread(thread: threading.Thread | None, timeout: float) -> bool:
    """A worker's `join_worker`: wait (at most `timeout` s) for `thread` to end; True when it has, or when there
    is none, or when it is the caller's own thread (a worker stopping itself cannot wait for itself)."""
    if thread is None or thread is threading.current_thread():
        return True
    thread.join(timeout)
    return not thread.is_alive()


def stop_workers(timeout: float = EXIT_JOIN_SECONDS, workers: Iterable[Worker] | None = None) -> bool:
    """Tell every worker (or only `workers`) to stop, then wait for them all within `timeout` seconds; True when
    all have ended.

    All are told first, so they wind down together: the bound is for the whole, not for each.
    """
    if workers is None:
        with _lock:
            workers = list(_workers)
    workers = list(workers)
    for worker in workers:
        with contextlib.suppress(Exception):
            worker.stop()
    deadline = time.monotonic() + timeout
    ended = True
    for worker in workers:
        try:
            ended = worker.join_worker(max(0.0, deadline - time.monotonic())) and ended
        except Exception:
            ended = False
    return ended


def shutdown() -> None:
    """Stop and join the workers, close what is still open, then run every exit callback, latest first (at
    exit; tests call it too)."""
    _exiting.set()  # what closes from here on waits for no worker: they were all joined, within the bound
    with contextlib.suppress(Exception):
        stop_workers()
    with _lock:
        closables = list(_closables)
        callbacks = list(reversed(_callbacks))
    for closable in closables:
        with contextlib.suppress(Exception):
            closable.close()
    for callback in callbacks:
        with contextlib.suppress(Exception):  # at exit there is no one left to tell
            callback()


CLOSE_JOIN_SECONDS = 10.0
"""How long `QueueWorker.close()` waits for the item in hand (a download, a measure) before letting the thread go."""


class QueueWorker:
    """One daemon thread fed by a queue, shared by the archiver and the analyst: the first item starts it, it ends
    after `idle_seconds` with nothing to do (the next item starts it again), and `stop()` ends it for good (the item
    in hand is finished, the rest are left). Items run in order, one at a time; a `threading.Event` in the queue is
    a fence, set when the worker reaches it. Stopped, joined and closed at exit if its owner did not close it.

    A subclass says what an item does (`_handle`), what a failure leaves behind (`_failed`) and what the thread
    lets go of when it ends (`_ended`, on the worker's thread) or when the worker is closed (`_release`).
    """

    thread_name = "ipymusicgen-worker"
    idle_seconds = 2.0
    """The thread exits (closing what it opened) after this long with nothing to do."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        add_worker(self)
        close_at_exit(self)

    @property
    def stopped(self) -> bool:
        """True once `stop()` or `close()` was called: nothing more is taken."""
        return self._stopping.is_set()

    def _put(self, *items: Any) -> bool:
        """Queue `items` in order and make sure the thread runs; False (nothing queued) once stopped."""
        with self._lock:
            if self._stopping.is_set():
                return False
            for item in items:
                self._queue.put(item)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
                self._thread.start()
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is done; True when it is (False at the deadline or once stopped)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if self._stopping.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(0.02)
        return True

    def stop(self) -> None:
        """Take no more work (at once): the item in hand is finished, the rest stay undone."""
        self._stopping.set()
        self._queue.put(None)  # wakes an idle thread at once

    def join_worker(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) for the thread to end; True when it has (or none runs)."""
        with self._lock:
            thread = self._thread
        return join_thread(thread, timeout)

    def close(self) -> None:
        """Stop, wait (bounded) for the item in hand, and let go of what the worker holds. Closing twice is harmless."""
        self.stop()
        self.join_worker(0.0 if _exiting.is_set() else CLOSE_JOIN_SECONDS)  # at exit: joined within the bound already
        self._release()

    def _run(self) -> None:
        try:
            while True:
                try:
                    item = self._queue.get(timeout=self.idle_seconds)
                except queue.Empty:
                    with self._lock:  # exit only when nothing arrived meanwhile
                        if self._queue.empty():
                            self._thread = None
                            return
                    continue
                try:
                    if isinstance(item, threading.Event):
                        item.set()
                        continue
                    if self._stopping.is_set():
                        return
                    self._handle(item)
                except Exception as exc:  # the worker outlives any one item (a locked journal, say)
                    self._failed(exc)
                finally:
                    self._queue.task_done()
        finally:
            self._ended()

    def _handle(self, item: Any) -> None:
        raise NotImplementedError

    def _failed(self, exc: Exception) -> None:
        """An item raised: say so where the owner looks (the default forgets it)."""

    def _ended(self) -> None:
        """The thread is ending (idle, stopped): close what it opened."""

    def _release(self) -> None:
        """The worker is closed: let go of what it holds (after its thread ended, or was let go)."""

"""One shutdown path: every part that holds something open at exit registers here, not with `atexit`.

`at_exit(callback)` is called by the layer that owns the thing (the journal files' connections, the sandbox's
temp folder, the session's watchers and workspace), when it first holds something, never when it is imported;
one `atexit` handler, installed by the first registration, runs them in reverse order of registration (the
latest first, as `atexit` does), each on its own, so one failing never keeps the others from closing. An object
that must be closed if its owner never did (a journal holding unwritten task ids) is held weakly with
`close_at_exit`, and closed before the callbacks run.

Background workers (the archiver's and the analyst's threads) register with `add_worker`. At exit they are
all told to stop first, then joined within one bound (`EXIT_JOIN_SECONDS`), and only then do the callbacks
run: a worker inside a native library (an MP3 decoder, librosa) while the interpreter finalizes can abort
the process ("terminate called without an active exception", exit code 134).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

EXIT_JOIN_SECONDS = 30.0
"""How long the exit waits, in all, for workers to finish the one item each has in hand."""

_callbacks: list[Callable[[], None]] = []
_lock = threading.Lock()
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


def stop_workers(timeout: float = EXIT_JOIN_SECONDS) -> bool:
    """Tell every worker to stop, then wait for them all within `timeout` seconds; True when all have ended.

    All are told first, so they wind down together: the bound is for the whole, not for each.
    """
    with _lock:
        workers = list(_workers)
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

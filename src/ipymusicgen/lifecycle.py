"""One shutdown path: every part that holds something open at exit registers here, not with `atexit`.

`at_exit(callback)` is called by the layer that owns the thing (the journal's connections, archivers,
libraries, the sandbox's temp folder, the session's watchers and client); one `atexit` handler runs
them in reverse order of registration (the latest first, as `atexit` does), each on its own, so one
failing never keeps the others from closing.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable

_callbacks: list[Callable[[], None]] = []
_lock = threading.Lock()


def at_exit(callback: Callable[[], None]) -> Callable[[], None]:
    """Run `callback()` when the process ends; usable as a decorator. Registering twice runs it once."""
    with _lock:
        if callback not in _callbacks:
            _callbacks.append(callback)
    return callback


def shutdown() -> None:
    """Run every exit callback, latest first (at exit; tests call it to see a clean end)."""
    with _lock:
        callbacks = list(reversed(_callbacks))
    for callback in callbacks:
        with contextlib.suppress(Exception):  # at exit there is no one left to tell
            callback()


atexit.register(shutdown)

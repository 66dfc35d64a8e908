"""The agent server's end, as a host ends it: stdin closed, then SIGTERM a couple of seconds later.

Paid answers whose ids wait in memory (the journal was locked when they came) must not die with the process.
So when stdin closes, and again on SIGTERM or SIGINT, the journal is tried once, briefly (a write waiting on
another's lock is interrupted, and its ids join the ones in memory), then what is still unwritten is spilled
beside the journal at once (`Journal.close`), where the next open takes it in. SIGTERM then ends the server
as SIGINT does: the serving is cancelled and the ordinary shutdown runs.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..storage.errors import StorageClosedError, StorageError

TRY_FOR_S = 1.0
"""How long the journal is tried at close before the ids are spilled."""


def keep_unsaved(journal: Any, within: float = TRY_FOR_S) -> bool:
    """Write what waits in memory if the journal takes it at once, else spill it; True once nothing waits.

    A writer waiting on another's lock is interrupted (`Journal.interrupt`): its ids join the
    ones waiting in memory instead of holding the journal for its whole busy timeout.
    """
    if journal is None:
        return True
    lock = journal._lock
    deadline = time.monotonic() + within
    while not lock.acquire(timeout=0.05):
        with contextlib.suppress(StorageError):  # closed already: nothing is waiting on it
            journal.interrupt()
        if time.monotonic() > deadline:
            return False
    try:
        try:
            with journal._quick():
                journal.close()
        except StorageClosedError:  # closed already: what arrived since is spilled by this close
            journal.close()
        return not journal.backlog_ids
    finally:
        lock.release()


class Ending:
    """Keeps one server's unsaved ids at its end: on stdin's close, on SIGTERM/SIGINT, and at the last."""

    def __init__(self, journal: Any) -> None:
        self.journal = journal
        self._lock = threading.Lock()

    def keep(self) -> None:
        with self._lock, contextlib.suppress(Exception):  # at the end there is no one left to tell but stderr
            keep_unsaved(self.journal)

    def stdin_closed(self) -> None:
        """The host closed the wire: keep the ids now, off the event loop (a tool may still be running)."""
        threading.Thread(target=self.keep, name="ipymusicgen-mcp-ending", daemon=True).start()

    async def serve(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run `body` until it ends or SIGTERM/SIGINT comes: then keep the ids, and cancel it (the same for
        both signals: the ordinary shutdown runs after)."""
        async with anyio.create_task_group() as group:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for _ in signals:
                        await anyio.to_thread.run_sync(self.keep)
                        group.cancel_scope.cancel()
                        return

            group.start_soon(on_signal)
            await body()
            group.cancel_scope.cancel()

    def finish(self) -> None:
        self.keep()

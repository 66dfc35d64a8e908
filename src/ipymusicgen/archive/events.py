"""One workspace's archive news: who hears that a song was kept (or failed to be), and the telling.

Each `WorkspaceArchive` holds one `ArchiveEvents`; its archivers announce here and its views (a watcher's cards,
the library view) subscribe here, so a song made in one workspace is never announced to another's views.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

ArchiveListener = Callable[[str, "Path | None", "list[list[float]] | None", "str | None"], None]
"""Called with (task id, the kept file or None, its peaks or None, why it failed or a note, or None)."""


class ArchiveEvents:
    """The listeners of one workspace's archive, held weakly (a view need not unsubscribe: a collected one is
    dropped), told on the archiver's thread."""

    def __init__(self) -> None:
        self._listeners: list[weakref.ref[Any]] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ArchiveEvents(listeners={len(self._alive())})"

    def subscribe(self, listener: ArchiveListener) -> None:
        """Call `listener(task_id, path, peaks, error)` after each song is archived (or fails to be). A bound
        method is held as long as its object lives."""
        ref = weakref.WeakMethod(listener) if hasattr(listener, "__self__") else weakref.ref(listener)
        with self._lock:
            self._listeners.append(ref)  # type: ignore[arg-type]

    def unsubscribe(self, listener: ArchiveListener) -> None:
        """Hear no more (a closed view); a listener never subscribed is ignored."""
        with self._lock:
            self._listeners[:] = [ref for ref in self._listeners if ref() not in (None, listener)]

    @property
    def listening(self) -> bool:
        """Whether any view listens (when none does, an archiver skips re-announcing songs it kept already)."""
        return bool(self._alive())

    def announce(self, task_id: str, path: Path | None, peaks: list[list[float]] | None, error: str | None) -> None:
        """Tell every listener; one that raises (a closed or foreign view) never stops the archive or the others."""
        for listener in self._alive():
            with contextlib.suppress(Exception):
                listener(task_id, path, peaks, error)

    def _alive(self) -> list[ArchiveListener]:
        with self._lock:
            self._listeners[:] = [ref for ref in self._listeners if ref() is not None]
            return [listener for ref in self._listeners if (listener := ref()) is not None]

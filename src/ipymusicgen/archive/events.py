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
        self._listeners: list[tuple[weakref.ref[Any], Path | None]] = []
        """Each listener, held weakly, with the journal file it hears alone (None: every song)."""
        self._lock = threading.RLock()
        """Reentrant: a collection can run inside it (any allocation may start one), and a view collected then closes
        itself and unsubscribes on the same thread; with a plain lock that archiver's thread waited for itself."""

    def __repr__(self) -> str:
        return f"ArchiveEvents(listeners={len(self._alive())})"

    def subscribe(self, listener: ArchiveListener, *, journal: str | Path | None = None) -> None:
        """Call `listener(task_id, path, peaks, error)` after each song is archived (or fails to be); with `journal`,
        only for songs of that journal file (a library view: another file's song is not on its pages, and a view
        left open on a slow or locked file must not hold up every archiver of the workspace). A bound method is
        held as long as its object lives."""
        ref = weakref.WeakMethod(listener) if hasattr(listener, "__self__") else weakref.ref(listener)
        only = _file(journal)
        with self._lock:
            self._listeners = [*self._listeners, (ref, only)]  # type: ignore[list-item]

    def unsubscribe(self, listener: ArchiveListener) -> None:
        """Hear no more (a closed view); a listener never subscribed is ignored."""
        with self._lock:
            self._listeners = [(ref, only) for ref, only in self._listeners if ref() not in (None, listener)]

    @property
    def listening(self) -> bool:
        """Whether any view listens (when none does, an archiver skips re-announcing songs it kept already)."""
        return bool(self._alive())

    def announce(
        self,
        task_id: str,
        path: Path | None,
        peaks: list[list[float]] | None,
        error: str | None,
        *,
        journal: str | Path | None = None,
    ) -> None:
        """Tell every listener (those of another journal file than `journal`, when given, are skipped); one that
        raises (a closed or foreign view) never stops the archive or the others."""
        origin = _file(journal)
        for listener in self._alive(origin):
            with contextlib.suppress(Exception):
                listener(task_id, path, peaks, error)

    def _alive(self, origin: Path | None = None) -> list[ArchiveListener]:
        with self._lock:  # a new list each time: one this thread re-enters to change is never mid-iteration
            self._listeners = alive = [(ref, only) for ref, only in self._listeners if ref() is not None]
            return [
                listener
                for ref, only in alive
                if (listener := ref()) is not None and (origin is None or only is None or only == origin)
            ]


def _file(journal: str | Path | None) -> Path | None:
    if journal is None:
        return None
    try:
        return Path(journal).resolve()
    except (OSError, RuntimeError, ValueError):
        return Path(journal)

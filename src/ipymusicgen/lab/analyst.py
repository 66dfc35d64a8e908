"""Archived songs measured in the background: one worker thread per journal file, one song at a time.

The archiver tells its followers each file it keeps (`Archiver.followers`); the wiring (`workspace/`) makes its
`Analysts` one of them, and they measure when the analysis extra is installed. A workspace holds its own `Analysts`
and closes them with itself; each analyst measures into its file's `Database` (the wiring's: the workspace's own for
its file), never a store opened by path. A song's measures land in the library (`bpm`, `musical_key`, `lufs`, ...);
a failure is kept as its `analysis_error`. The measuring itself happens in the shared worker process
(`analysis_worker`): a crash in librosa costs one song's measures, never the kernel. `MUSICGEN_ANALYZE=off` turns it
off.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..lifecycle import QueueWorker
from .analysis import available
from .analysis_worker import measure as analyze_file  # in the worker process (tests replace this name)
from .song_analysis import analyse_song

if TYPE_CHECKING:
    from ..storage.database import Database

ENV_ANALYZE = "MUSICGEN_ANALYZE"
OFF = frozenset({"0", "off", "false", "no"})


def enabled() -> bool:
    """On when the extra is installed, unless `MUSICGEN_ANALYZE` says off."""
    return os.environ.get(ENV_ANALYZE, "on").strip().lower() not in OFF and available()


class Analyst(QueueWorker):
    """Measures the songs of one journal's library, in order, on a worker thread started by the first song.
    `database_at`: the owner's (the wiring's) `Database` of a file, asked for this analyst's file by the worker's first
    song and let go when its thread ends (the owner closes it)."""

    thread_name = "ipymusicgen-analysis"

    def __init__(self, journal_path: Path, database_at: Callable[[Path], Database]) -> None:
        super().__init__()
        self.journal_path = journal_path
        self.errors: dict[str, str] = {}
        self._database_at = database_at
        self._database: Database | None = None

    def __repr__(self) -> str:
        return f"Analyst({str(self.journal_path)!r})"

    def submit(self, task_id: str, path: Path) -> None:
        """Measure this song (in the background); once stopped, the song stays unmeasured (`analyze()` measures it
        on demand)."""
        self._put((task_id, path))

    def _handle(self, item: tuple[str, Path]) -> None:
        task_id, path = item
        if self._database is None:
            self._database = self._database_at(self.journal_path)
        store = self._database.library
        try:  # in the worker process: a crash there spares the kernel; kept whole, so analyze() reads it back
            analyse_song(store, task_id, path, measure=lambda found: analyze_file(found))
        except Exception as exc:  # kept as the song's analysis error; the next song still runs
            self.errors[task_id] = f"{type(exc).__name__}: {exc}"
            store.analysis_failed(task_id, self.errors[task_id])
            store.forget_measures(task_id)

    def _failed(self, exc: Exception) -> None:
        self.errors["*"] = f"{type(exc).__name__}: {exc}"  # a locked journal: this song stays unmeasured

    def _ended(self) -> None:
        self._database = None  # its owner's: let go, never closed here


class Analysts:
    """One owner's analysts (a workspace's, or the default wiring's): one per journal file its clients archive
    into, made on the first song, measuring into the owner's `Database` of the file (`database_at`).
    `after_archive` is the archiver's follower; `close()` stops them all."""

    def __init__(self, database_at: Callable[[Path], Database]) -> None:
        self._database_at = database_at
        self._by_path: dict[Path, Analyst] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"Analysts({sorted(str(p) for p in self._by_path)!r}, closed={self._closed})"

    def of(self, journal_path: str | Path) -> Analyst:
        """The analyst of this journal file (made on first need)."""
        key = Path(journal_path).resolve()
        with self._lock:
            if key not in self._by_path:
                self._by_path[key] = analyst = Analyst(key, self._database_at)
                if self._closed:
                    analyst.stop()
            return self._by_path[key]

    def after_archive(self, journal_path: Path | None, task_id: str, path: Path) -> None:
        """An archiver's follower: measure the song it just kept (in the background), if analysis is on and these
        analysts are not closed."""
        if journal_path is not None and not self._closed and enabled():
            self.of(journal_path).submit(task_id, path)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every song submitted so far is measured (tests, scripts); True if it got there in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            analysts = list(self._by_path.values())
        return all(a.join(None if deadline is None else max(0.0, deadline - time.monotonic())) for a in analysts)

    def close(self) -> None:
        """Stop every analyst (each finishes the song in hand, bounded); songs still queued stay unmeasured."""
        with self._lock:
            self._closed = True
            analysts = list(self._by_path.values())
        for analyst in analysts:
            analyst.stop()
        for analyst in analysts:
            analyst.close()

"""Archived songs measured in the background: one daemon thread per journal, one song at a time.

The archiver tells its followers each file it keeps (`Archiver.followers`); the wiring (`workspace/`) makes this
module one of them when the analysis extra is installed. A song's measures land in the library (`bpm`,
`musical_key`, `lufs`, ...); a failure is kept as its `analysis_error`. The measuring itself happens in the
shared worker process (`analysis_worker`): a crash in librosa costs one song's measures, never the kernel.
`MUSICGEN_ANALYZE=off` turns it off.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

from ..lifecycle import add_worker, join_thread
from ..storage.library import LibraryStore
from .analysis import available
from .analysis_worker import measure as analyze_file  # in the worker process (tests replace this name)

ENV_ANALYZE = "MUSICGEN_ANALYZE"
OFF = frozenset({"0", "off", "false", "no"})


def enabled() -> bool:
    """On when the extra is installed, unless `MUSICGEN_ANALYZE` says off."""
    return os.environ.get(ENV_ANALYZE, "on").strip().lower() not in OFF and available()


class Analyst:
    """Measures the songs of one journal's library, in order, on a daemon thread started on first use."""

    def __init__(self, journal_path: Path) -> None:
        self.journal_path = journal_path
        self._queue: queue.Queue[tuple[str, Path] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.errors: dict[str, str] = {}
        add_worker(self)

    def submit(self, task_id: str, path: Path) -> None:
        with self._lock:
            if self._stopping.is_set():
                return  # at exit: the song stays unmeasured (analyze() measures it on demand)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="ipymusicgen-analysis", daemon=True)
                self._thread.start()
        self._queue.put((task_id, path))

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every submitted song is measured (tests, scripts); True if it got there in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._queue.unfinished_tasks and not self._stopping.is_set():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return not self._queue.unfinished_tasks

    def stop(self) -> None:
        """Measure nothing more (the song in hand is finished); songs still queued stay unmeasured."""
        self._stopping.set()
        self._queue.put(None)

    def join_worker(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) for the thread to end; True when it has (or never started)."""
        with self._lock:
            thread = self._thread
        return join_thread(thread, timeout)

    def _work(self) -> None:
        store: LibraryStore | None = None
        try:
            while True:
                item = self._queue.get()
                try:
                    if item is None or self._stopping.is_set():
                        return
                    task_id, path = item
                    if store is None:
                        store = LibraryStore(self.journal_path)
                    try:
                        measures = analyze_file(path)  # in the worker process: a crash there spares the kernel
                    except Exception as exc:  # kept as the song's analysis error; the next song still runs
                        self.errors[task_id] = f"{type(exc).__name__}: {exc}"
                        store.analysis_failed(task_id, self.errors[task_id])
                    else:
                        store.analysed(task_id, measures.as_dict())
                except Exception as exc:  # a locked journal: this song stays unmeasured, the thread lives on
                    self.errors["*"] = f"{type(exc).__name__}: {exc}"
                finally:
                    self._queue.task_done()
        finally:
            if store is not None:
                store.close()


_analysts: dict[Path, Analyst] = {}
_analysts_lock = threading.Lock()


def analyst_for(journal_path: str | Path) -> Analyst:
    key = Path(journal_path).resolve()
    with _analysts_lock:
        if key not in _analysts:
            _analysts[key] = Analyst(key)
        return _analysts[key]


def analyse_after_archive(journal_path: Path | None, task_id: str, path: Path) -> None:
    """An archiver's follower: measure the song it just kept (in the background), if analysis is on."""
    if journal_path is not None and enabled():
        analyst_for(journal_path).submit(task_id, path)

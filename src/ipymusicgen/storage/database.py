"""`Database`: one journal file, every statement over it, by concern.

The one object the layers above hold instead of a file path and four store classes. It owns no connection of
its own: every concern uses the file's one connection in this process (`shared_connection.acquire`), so a
`Database`, a `Library` and the client's journal over the same file share it and its lock.

Concerns (each a query object with named methods; no SQL leaves `storage/`):

- `db.journal`: paid attempts and the tasks they made (`journal.Journal`), the workspace's clients' journal;
- `db.library`: songs, search, favourites, notes, archive, measures, stars and votes, spend
  (`library.LibraryStore`), what a `Library` given this database reads;
- `db.batches`: batch rows and runs (`batches.BatchStore`), the one store every batch over the file uses;
- `db.extras`: paid extras of a song (`extras.ExtrasStore`).

Each concern is opened on first use and closed by `close()`: the `Database` is their one owner (there is no
registry of stores by path). The journal is an SQLite file; no other engine implements these concerns.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StorageError

if TYPE_CHECKING:
    from .batches import BatchStore
    from .extras import ExtrasStore
    from .journal import Journal
    from .library import LibraryStore

__all__ = ["Database", "StorageError"]


def _home(path: Path) -> Path:
    """`~/songs.sqlite` in the home folder; `~songs.sqlite` (no slash: another user's home to `expanduser`) as named."""
    return path.expanduser() if path.parts and path.parts[0] == "~" else path


class Database:
    """One journal file's concerns, each opened when first used, all over the file's one connection."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout: float | None = None) -> None:
        from .journal import default_journal_path

        self.path = _home(Path(path)).absolute() if path else default_journal_path()
        """Made absolute when named: its concerns open when first used, and a `%cd` between two must not name
        a second file."""
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._library: LibraryStore | None = None
        self._extras: ExtrasStore | None = None
        self._batches: BatchStore | None = None

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r})"

    @property
    def journal(self) -> Journal:
        """Paid attempts and their tasks (the client's journal)."""
        with self._lock:
            if self._journal is None:
                from .journal import Journal

                self._journal = Journal(self.path, busy_timeout=self.busy_timeout)
            return self._journal

    @property
    def library(self) -> LibraryStore:
        """Songs as the library knows them: search, choices, archive, measures, ratings, spend."""
        with self._lock:
            if self._library is None:
                from .library import LibraryStore

                self._library = LibraryStore(self.path)
            return self._library

    @property
    def batches(self) -> BatchStore:
        """Batch rows and runs: this database's one store, given to every batch its workspace runs."""
        with self._lock:
            if self._batches is None:
                from .batches import BatchStore

                self._batches = BatchStore(self.path)
            return self._batches

    @property
    def extras(self) -> ExtrasStore:
        """Paid extras of a song (WAV, MP4, a singer voice)."""
        with self._lock:
            if self._extras is None:
                from .extras import ExtrasStore

                self._extras = ExtrasStore(self.path)
            return self._extras

    def close(self) -> None:
        """Close the concerns this object opened (the file's connection closes with its last user)."""
        with self._lock:
            opened = [self._journal, self._library, self._extras, self._batches]
            self._journal = self._library = self._extras = self._batches = None
        for concern in opened:
            if concern is not None:
                concern.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""One connection per journal file per process, shared by every store over that file.

The journal, the library, the batch rows and the paid extras each used to open the file on their own, and
`library()` opened it again on every call. Here a process-wide registry keyed by the file (its resolved path
and identity on disk) hands every user the same `Shared` connection and its one lock; the connection closes
when its last user releases it, or at exit (registered when the first file is opened, not at import). A file
replaced on disk (moved aside, restored) is a new file and gets its own connection. One of the three modules
allowed state of their own (with `lifecycle` and the session): the connections are the process's.

A user that names itself (`acquire(path, owner=store)`) and is garbage-collected without `release(store)` (a
`Workspace` dropped unclosed) still gives its use back: its finalizer only queues the release (a finalizer runs
inside the collection, on whatever thread, maybe one holding the registry's lock), and the next `acquire` or
`open_connections` does it, so the file's connection closes with its last user, collected or not."""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections import deque
from contextlib import suppress
from pathlib import Path

from ..lifecycle import at_exit
from .journal_file import _create_if_missing, busy_timeout_or_default, open_db

Key = tuple[Path, int, int]
_registry: dict[Key, Shared] = {}
_registry_lock = threading.Lock()
_holders: weakref.WeakKeyDictionary[object, weakref.finalize] = weakref.WeakKeyDictionary()
"""The finalizer of each named user still holding a file (given back by its `release(owner)`)."""
_collected: deque[Shared] = deque()
"""Uses whose owner was collected unreleased, given back outside the collection (`_release_collected`)."""


class Shared:
    """A journal file's one connection, its lock (every transaction and read over it takes it) and its users."""

    def __init__(self, key: Key, db: sqlite3.Connection, busy_timeout: float) -> None:
        self.key = key
        self.path = key[0]
        self.db = db
        self.lock = threading.RLock()
        self.users = 0
        self.closed = threading.Event()
        """Set when the last user's close is done: until then the file stays this entry's, and an `acquire` of it
        waits (the close checkpoints the WAL into the file, and a new open that read the file's header meanwhile
        took the half-written file for a damaged one)."""
        self._timeout_ms = max(0, int(busy_timeout * 1000))

    def __repr__(self) -> str:
        return f"Shared({str(self.path)!r}, users={self.users})"

    def use_timeout(self, seconds: float) -> None:
        """Make the connection wait `seconds` for another process's lock (each user keeps its own wait)."""
        wanted = max(0, int(seconds * 1000))
        if wanted != self._timeout_ms:
            with self.lock:
                self.db.execute(f"PRAGMA busy_timeout={wanted}")
                self._timeout_ms = wanted

    def reopen(self, busy_timeout: float) -> None:
        """Open the file again (a connection made on a read-only file stays read-only); the old one is closed.
        Raises as `open_db` does; the old connection is kept then."""
        with self.lock:
            fresh = open_db(self.path, busy_timeout=busy_timeout)
            old, self.db = self.db, fresh
            self._timeout_ms = max(0, int(busy_timeout * 1000))
            with suppress(sqlite3.Error):
                old.close()

    def release(self, owner: object | None = None) -> None:
        """One user is done (`owner`, if it named itself to `acquire`: once, later calls do nothing); the last one
        closes the connection."""
        if owner is not None:
            with _registry_lock:
                finalizer = _holders.pop(owner, None)
            if finalizer is None or finalizer.detach() is None:
                return  # given back already
        self._release()

    def _release(self) -> None:
        with _registry_lock:
            self.users -= 1
            if self.users > 0:
                return
        try:  # still the file's entry while it closes: a new user waits for the close (see `closed`)
            with self.lock, suppress(sqlite3.Error):
                self.db.close()
        finally:
            with _registry_lock:
                if _registry.get(self.key) is self:
                    del _registry[self.key]
            self.closed.set()


class SharedStore:
    """A store over a journal file's `Shared` connection: `db` while open, `close()` gives its use back.
    The subclass sets `_shared` (from `acquire`) and `lock` (the connection's) when it opens."""

    _shared: Shared | None
    lock: threading.RLock

    @property
    def db(self) -> sqlite3.Connection:
        """The file's one connection in this process, shared with the journal and the other stores."""
        if self._shared is None:  # this store was closed, whoever else still uses the file
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return self._shared.db

    def close(self) -> None:
        """This store is done with the file (the connection closes with its last user)."""
        with self.lock:
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.release(self)


def _key(path: Path) -> Key:
    found = os.stat(path)
    return (path.resolve(), found.st_dev, found.st_ino)


def acquire(path: str | Path, *, busy_timeout: float | None = None, owner: object | None = None) -> Shared:
    """The file's shared connection (opened, checked and made private by `open_db` the first time); the caller
    `release()`s it when done, or `release(owner)` when it named an `owner` (an object that, collected without
    that, gives its use back later). Raises as `open_db` does, the file untouched."""
    _release_collected()
    seconds = busy_timeout_or_default(busy_timeout)
    path = Path(path)
    _create_if_missing(path)
    stuck = None
    while True:
        shared, closing = _take(path, seconds, owner, stuck)
        if shared is not None:
            return shared
        # its last user's close is still writing the file: wait for it (bounded: past that, open beside it, as before)
        stuck = None if closing.closed.wait(max(seconds, 1.0)) else closing


def _take(
    path: Path, seconds: float, owner: object | None, stuck: Shared | None
) -> tuple[Shared, None] | tuple[None, Shared]:
    """One use of the file's shared connection (opened here if the file has none); or, taking none, the entry whose
    close is under way, to wait for (unless it is `stuck`, waited for in vain: a new connection then replaces it)."""
    with _registry_lock:
        key = _key(path)
        shared = _registry.get(key)
        if shared is not None and shared.users <= 0:
            # a close this thread holds up (it holds the connection's lock) would be waited for in vain
            held_here = shared.lock._is_owned()  # type: ignore[attr-defined]
            if not shared.closed.is_set() and shared is not stuck and not held_here:
                return None, shared
            shared = None  # closed (its entry not yet gone), or stuck: a new connection takes its place
        if shared is None:
            shared = Shared(key, open_db(path, busy_timeout=seconds), seconds)
            _registry[key] = shared
            at_exit(_close_all)  # registered by the first file opened, not by the import (once: at_exit says so)
        shared.users += 1
        if owner is not None:
            finalizer = weakref.finalize(owner, _collected.append, shared)  # a deque's append takes no lock
            finalizer.atexit = False  # at exit `_close_all` closes every file
            _holders[owner] = finalizer
    return shared, None


def _release_collected() -> None:
    """Give back the uses of owners collected without releasing (queued by their finalizers)."""
    while True:
        try:
            shared = _collected.popleft()
        except IndexError:
            return
        shared._release()


def open_connections() -> list[Shared]:
    """The journal files this process holds open (one entry per file; uses of collected owners given back first)."""
    _release_collected()
    with _registry_lock:
        return list(_registry.values())


def _close_all() -> None:
    with _registry_lock:
        opened = list(_registry.values())
        _registry.clear()
    for shared in opened:
        with shared.lock, suppress(sqlite3.Error):
            shared.db.close()

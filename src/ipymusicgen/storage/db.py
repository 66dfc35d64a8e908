"""The one way to open the journal's SQLite file, and the one way to write to it.

Every user of the file (the journal, the batch and library stores) opens it here: private to the user
(0600; its folder 0700 where we create it), checked for a schema from a newer version before anything
is changed, then WAL so two kernels can share it, a busy timeout so a writer waits its turn, and
autocommit so each user says where its transactions begin.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from .migrations import refuse_newer

DEFAULT_BUSY_TIMEOUT = 10.0
"""Seconds a write waits for another kernel's transaction before the journal counts as locked."""
PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700
SIDE_FILES = ("-wal", "-shm", "-journal")


def make_private(path: Path) -> None:
    """Create the file if missing, readable by its owner only: it holds prompts, lyrics and payloads."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_FOLDER)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILES)):
        with contextlib.suppress(OSError):  # not ours, or gone: leave it
            if candidate.exists() and stat.S_IMODE(candidate.stat().st_mode) & 0o077:
                os.chmod(candidate, PRIVATE_FILE)


def busy_timeout_or_default(busy_timeout: float | None) -> float:
    """Seconds a writer waits for another's lock: the given one, else `DEFAULT_BUSY_TIMEOUT` (read when asked,
    so a test can shorten every wait at once)."""
    return DEFAULT_BUSY_TIMEOUT if busy_timeout is None else busy_timeout


def open_db(path: str | Path, *, busy_timeout: float | None = None) -> sqlite3.Connection:
    """A connection to the journal's file, set up the one way every user of the file needs.

    Raises `JournalVersionError` (the file untouched) when a newer version wrote it.
    """
    busy_timeout = busy_timeout_or_default(busy_timeout)
    path = Path(path)
    make_private(path)
    db = sqlite3.connect(path, timeout=busy_timeout, check_same_thread=False, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout={max(0, int(busy_timeout * 1000))}")
    try:
        refuse_newer(db, path)
    except BaseException:
        db.close()
        raise
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.OperationalError:  # a read-only or busy file: still readable, writes report themselves
        pass
    make_private(path)  # the -wal and -shm files WAL just made
    return db


@contextmanager
def write_transaction(db: sqlite3.Connection, lock: threading.Lock | threading.RLock) -> Iterator[sqlite3.Connection]:
    """One IMMEDIATE transaction under the connection's lock; all of it is kept, or none of it."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")  # may fail too (disk full): then nothing of it is kept
        except BaseException:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise

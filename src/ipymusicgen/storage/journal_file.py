"""The one way to open the journal's SQLite file, and the one way to write to it.

Every user of the file (the journal, the batch and library stores) opens it here. Nothing is changed before
the file is known to be a journal: its application id (or, for files written before the id, its schema), its
schema version (a newer one is refused untouched) and its pages (a damaged file is never written to) are
checked first. Only then is it made private to the user (group and other bits removed, none ever added; its
folder 0700 where we create it), put in WAL so two kernels can share it, given a busy timeout so a writer
waits its turn, and autocommit so each user says where its transactions begin.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..errors import JournalUnavailableError
from .migrations import APPLICATION_ID, refuse_newer

DEFAULT_BUSY_TIMEOUT = 10.0
"""Seconds a write waits for another kernel's transaction before the journal counts as locked."""
PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700
SIDE_FILES = ("-wal", "-shm", "-journal")
SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
OUR_ATTEMPT_COLUMNS = frozenset({"id", "endpoint", "host", "payload", "outcome"})
"""What the first schema step made: a file without the application id is ours if its `attempts` table has these."""


class NotAJournalError(JournalUnavailableError):
    """The file is not an ipymusicgen journal (another program's database, a text file); it is left untouched."""


class JournalDamagedError(JournalUnavailableError):
    """The journal file is damaged; nothing is written to it."""


class JournalBusyError(JournalUnavailableError):
    """Another program is in the middle of writing the journal file (a checkpoint); nothing was read or written."""


def damaged(path: str | Path, detail: str) -> JournalDamagedError:
    """The one line every entry point says of a damaged journal: the file, the damage, the remedy."""
    detail = " ".join(str(detail).split())[:160] or "damaged pages"
    return JournalDamagedError(
        f"The journal {path} is damaged ({detail}); nothing was written to it. Move it aside or restore a backup "
        "(a fresh journal is then made in its place), or salvage what it holds with "
        f"`sqlite3 {shlex.quote(str(path))} .recover | sqlite3 recovered.sqlite3`."
    )


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (not locked, full or read-only)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in DAMAGE_CODES


@contextmanager
def damage_named(path: str | Path | None) -> Iterator[None]:
    """Say a damaged file's one line (`damaged`) where a SQLite error says it is damaged; other errors pass."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if path is not None and is_damage(exc):
            raise damaged(path, str(exc)) from None
        raise


def _not_ours(path: Path, why: str) -> NotAJournalError:
    return NotAJournalError(
        f"{path} is not an ipymusicgen journal ({why}); it was left untouched. Point MUSICGEN_JOURNAL (or "
        "journal=) at another file."
    )


def recognise(path: Path) -> None:
    """Raise unless `path` is empty or an ipymusicgen journal this version can use; reads only, changes nothing.

    The header says most (the SQLite magic, the application id, the schema version) without SQLite opening
    the file; a file without the id (written before it existed) is read immutably to look for our schema.
    """
    if not stat.S_ISREG(path.stat().st_mode):  # a folder, a FIFO (reading it would wait forever), a device
        raise _not_ours(path, "not a regular file")
    with path.open("rb") as file:
        header = file.read(HEADER_SIZE)
    if not header:
        return  # empty: ours to fill (created here, or by a process that ended before writing)
    if not header.startswith(SQLITE_MAGIC):
        raise _not_ours(path, "not an SQLite database")
    if len(header) < HEADER_SIZE:
        raise damaged(path, "the file ends inside its header")
    application_id = int.from_bytes(header[68:72], "big", signed=True)
    if application_id != APPLICATION_ID and (application_id != 0 or not _has_our_schema(path)):
        raise _not_ours(path, "another program's SQLite database")
    refuse_newer(int.from_bytes(header[60:64], "big", signed=True), path)


CHECKPOINT_WAIT = 2.0
"""Seconds a file caught mid-checkpoint by another connection is read again before it is said to be busy."""


def _has_our_schema(path: Path) -> bool:
    """A file with no application id is ours if it holds the journal's tables, or no table at all (as a new
    journal whose first step did not finish); read immutably, so nothing (not even a side file) is made.

    While another connection holds the file in WAL mode, a checkpoint under way leaves it half written (its newest
    first page, not yet the rest), and read alone it looks damaged: it is read again (a checkpoint takes moments),
    then said to be busy, never damaged. Reading through the WAL instead would make side files of a file that may
    be another program's."""
    deadline = time.monotonic() + CHECKPOINT_WAIT
    while True:
        try:
            return _schema_is_ours(path)
        except JournalDamagedError as exc:
            if not _wal_in_use(path):
                raise
            if time.monotonic() >= deadline:
                raise JournalBusyError(
                    f"The journal {path} is being written by another program right now (its WAL is being copied "
                    "into it); nothing was read or written. Try again in a moment."
                ) from exc
        _pause(0.05)


def _pause(seconds: float) -> None:
    time.sleep(seconds)


def _wal_in_use(path: Path) -> bool:
    """Another connection holds the file in WAL mode: its -wal is there and not empty, its -shm too."""
    try:
        return os.stat(f"{path}-wal").st_size > 0 and os.path.exists(f"{path}-shm")
    except OSError:
        return False


def _schema_is_ours(path: Path) -> bool:
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables:
                return int(db.execute("PRAGMA user_version").fetchone()[0]) == 0
            columns = {r[1] for r in db.execute("PRAGMA table_info(attempts)")}
        finally:
            db.close()
    except sqlite3.Error as exc:
        if is_damage(exc):
            raise damaged(path, str(exc)) from None
        raise
    return columns >= OUR_ATTEMPT_COLUMNS


def check_pages(db: sqlite3.Connection, path: Path) -> None:
    """Raise `JournalDamagedError` if the file's pages are damaged: checked before the first write."""
    try:
        found = [str(r[0]) for r in db.execute("PRAGMA quick_check(1)")]
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise damaged(path, str(exc)) from None
        raise
    if found != ["ok"]:
        raise damaged(path, found[0] if found else "quick_check said nothing")


def make_private(path: Path) -> None:
    """Remove group and other bits (never add any) from a file known to be a journal, and its side files."""
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILES)):
        with contextlib.suppress(OSError):  # not ours to change (another owner, immutable), or gone: leave it
            mode = stat.S_IMODE(candidate.stat().st_mode)
            if mode & 0o077:
                os.chmod(candidate, mode & ~0o077)


def _create_if_missing(path: Path) -> None:
    """A new journal file, private from its first byte (its folder too, if made here)."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_FOLDER)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))


def busy_timeout_or_default(busy_timeout: float | None) -> float:
    """Seconds a writer waits for another's lock: the given one, else `DEFAULT_BUSY_TIMEOUT` (read when asked,
    so a test can shorten every wait at once)."""
    return DEFAULT_BUSY_TIMEOUT if busy_timeout is None else busy_timeout


def _connect(target: str | Path, busy_timeout: float, path: Path | None = None) -> sqlite3.Connection:
    """A connection to `target` (the path, or a URI for `path`), checked before anything is written to it."""
    path = path or Path(target)
    uri = isinstance(target, str) and target.startswith("file:")
    db = sqlite3.connect(target, timeout=busy_timeout, check_same_thread=False, isolation_level=None, uri=uri)
    from .songs import add_functions  # the song queries' SQL functions load with the first connection, not at import

    try:
        db.row_factory = sqlite3.Row
        add_functions(db)
        db.execute(f"PRAGMA busy_timeout={max(0, int(busy_timeout * 1000))}")
        refuse_newer(db, path)
        check_pages(db, path)
    except BaseException:
        db.close()
        raise
    return db


def open_db(path: str | Path, *, busy_timeout: float | None = None) -> sqlite3.Connection:
    """A connection to the journal's file, set up the one way every user of the file needs.

    Raises, the file untouched: `NotAJournalError` (another program's file), `JournalVersionError` (a newer
    version wrote it), `JournalDamagedError` (damaged pages).
    """
    busy_timeout = busy_timeout_or_default(busy_timeout)
    path = Path(path)
    _create_if_missing(path)
    recognise(path)
    try:
        db = _connect(path, busy_timeout)
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_CANTOPEN:
            raise
        # A WAL journal where its -shm file cannot be made (a read-only folder or medium): read the file as it
        # is, without side files or locks; every write then reports "readonly" and nothing is sent.
        db = _connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", busy_timeout, path)
    make_private(path)
    try:
        if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
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

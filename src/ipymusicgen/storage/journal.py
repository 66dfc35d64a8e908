"""A durable record of every paid request and every task id it created, so no paid song is lost.

SQLite in WAL mode with a busy timeout, so two kernels can share one journal. An attempt row is written *before*
sending, the task ids once the answer arrives, task state as polling learns it; never the key (it is a header).

Two things keep paid work in sight when something goes wrong:

- Each attempt records the process that sent it (host, pid, process start time). A `pending` attempt
  whose process has died (SIGKILL, kernel restart, crash) is reported as outcome-unknown; one of a live
  process in another kernel is left alone.
- A write that fails once the request is sent (locked past the busy timeout, disk full, read-only file) never
  raises: it waits in an in-memory backlog, a `JournalWriteWarning` names the ids not journalled yet, and the
  backlog is written on the next use and at close. Only `begin()` raises: then nothing was sent or paid.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import stat
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import service_address
from ..errors import JournalUnavailableError, JournalWriteWarning, storage_reason
from ..lifecycle import close_at_exit
from .journal_file import PRIVATE_FILE, busy_timeout_or_default, damaged, is_damage, write_transaction
from .migrations import migrate
from .owner import Owner

if TYPE_CHECKING:
    from ..models.schema import TaskRecord, V2Song
    from .shared_connection import Shared

FINISHED_STATES = ("complete", "failed")
QUICK_BUSY_MS = 100
"""How long a read waits to write on the side (the backlog, dead senders' attempts) before leaving it for later."""
DIED_NOTE = "the process that sent it ({owner}) ended before the answer was journalled; it may have been charged"
LEGACY_NOTE = "left pending by an earlier version that did not record its process; it may have been charged"


def default_journal_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("ipymusicgen", appauthor=False)) / "journal.sqlite3"


# -- what the journal returns -------------------------------------------------------------------------


@dataclass(frozen=True)
class JournalEntry:
    """One task as the journal knows it."""

    id: str
    version: int
    host: str
    state: str
    title: str | None
    style: str | None
    audio_url: str | None
    cover_url: str | None
    song_id: str | None
    fail_reason: str | None
    downloaded_path: str | None
    created_at: float
    updated_at: float
    attempt_id: str | None
    lyrics: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    def words(self) -> TaskRecord | V2Song:
        """Only what was said of the task (title, style, lyrics): no state, no URLs."""
        from ..models.schema import TaskRecord, V2Song

        if self.version == 2:
            return V2Song(song_id=self.id, title=self.title, tags=self.style, lyric=self.lyrics)
        return TaskRecord(id=self.id, title=self.title, style=self.style, lyric=self.lyrics)

    def as_record(self) -> TaskRecord | V2Song:
        """A record with what the journal knows (no status): seeds a wait after a restart, so the title and
        style of the request outlive answers that leave them empty (the v2 query)."""
        from ..models.schema import TaskRecord, V2Song

        if self.version == 2:
            return V2Song(
                song_id=self.id,
                title=self.title,
                tags=self.style,
                audio=self.audio_url,
                image=self.cover_url,
                lyric=self.lyrics,
            )
        return TaskRecord(
            id=self.id,
            title=self.title,
            style=self.style,
            audio_url=self.audio_url,
            cover_url=self.cover_url,
            song_id=self.song_id,
            lyric=self.lyrics,
        )


@dataclass(frozen=True)
class Attempt:
    """One paid request, whatever became of it (pending, submitted, unknown, rejected)."""

    id: str
    endpoint: str
    host: str
    payload: dict[str, Any]
    created_at: float
    outcome: str
    note: str | None
    owner: Owner | None = None
    """The process that sent it (None for attempts journalled before owners were recorded)."""

    @property
    def title(self) -> str | None:
        """The request's title, if it had one."""
        return _text(self.payload.get("title"))

    @property
    def style(self) -> str | None:
        """The request's style (v1) or prompt (v2 and lyrics)."""
        return _text(self.payload.get("style")) or _text(self.payload.get("prompt"))

    def describe(self) -> str:
        """One line for a person: endpoint, title and style, local time, outcome and a short note."""
        what = []
        if self.title:
            what.append(repr(_short(self.title, 40)))
        if self.style:
            what.append(f"({_short(self.style, 50)})")
        song = _text(self.payload.get("song_id")) or _text(self.payload.get("continue_song_id"))
        if song and not what:
            what.append(f"song {_short(song, 40)}")
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.created_at))
        line = f"{self.endpoint} {' '.join(what) or '(no title)'} at {when}: {self.outcome}"
        if self.note:
            line += f", {_short(self.note.splitlines()[0] if self.note.strip() else self.note, 90)}"
        return line


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _attempt(row: sqlite3.Row) -> Attempt:
    keys = row.keys()
    owner = None
    if "owner_host" in keys and row["owner_host"] is not None and row["owner_pid"] is not None:
        owner = Owner(row["owner_host"], int(row["owner_pid"]), row["owner_started"])
    return Attempt(
        row["id"],
        row["endpoint"],
        row["host"],
        json.loads(row["payload"]),
        row["created_at"],
        row["outcome"],
        row["note"],
        owner,
    )


# -- writes that could not be made yet ----------------------------------------------------------------


@dataclass
class _Unwritten:
    """One write kept in memory until the journal takes it; `ids` are the task ids it carries."""

    apply: Callable[[sqlite3.Connection], None]
    ids: list[str] = field(default_factory=list)
    tasks: list[JournalEntry] = field(default_factory=list)
    saved: dict[str, Any] | None = None
    """What a spill file keeps of it if the process must end before the journal takes it."""


def _apply_saved(db: sqlite3.Connection, saved: Mapping[str, Any]) -> None:
    """Apply one saved write: the task ids of a paid answer, or the outcome of a paid request."""
    if saved["kind"] == "submitted":
        db.execute("UPDATE attempts SET outcome = 'submitted', note = NULL WHERE id = ?", (saved["attempt_id"],))
        db.executemany(
            "INSERT OR IGNORE INTO tasks (id, attempt_id, version, host, title, style, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [tuple(row) for row in saved["rows"]],
        )
    elif saved["kind"] == "outcome":
        db.execute(
            "UPDATE attempts SET outcome = ?, note = ? WHERE id = ? AND outcome IN ('pending', 'unknown')",
            (saved["outcome"], saved["note"], saved["attempt_id"]),
        )


class Journal:
    """Thread-safe, process-safe journal of paid requests and their tasks."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout: float | None = None) -> None:
        self.path = Path(path) if path else default_journal_path()
        self.busy_timeout = busy_timeout = busy_timeout_or_default(busy_timeout)
        self._waits = busy_timeout
        """Seconds the next statement waits for another process's lock: `busy_timeout`, briefer inside `_quick`."""
        self._backlog: list[_Unwritten] = []
        self._warned_episode = False
        self._owner = Owner.current()
        from .shared_connection import acquire  # the connection machinery loads when a journal opens

        try:
            self._shared: Shared | None = acquire(self.path, busy_timeout=busy_timeout, owner=self)
        except (OSError, sqlite3.Error) as exc:
            raise JournalUnavailableError(f"The journal {self.path} cannot be opened ({exc}).") from None
        self._connection = self._shared
        self.file = self._shared.path
        """The file opened, resolved when it was (`path` stays as given, and a relative one would name another file
        once the process changed folder: a notebook's `%cd`)."""
        self._lock = self._shared.lock
        try:
            self._connection.use_timeout(busy_timeout)
            self._ready = self._prepare()
            if self._ready:
                self._take_spills()
        except BaseException:  # refused (a newer version's file): this journal gives up its share at once
            self._shared, shared = None, self._shared
            shared.release(self)
            raise
        close_at_exit(self)  # still holding unwritten ids at exit, it writes them or spills them beside the file

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r})"

    @property
    def _db(self) -> sqlite3.Connection:
        """The file's one connection in this process (`connection.acquire`), shared with the other stores."""
        if self._shared is None:  # this journal was closed, whoever else still uses the file
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return self._shared.db

    def _prepare(self) -> bool:
        """Bring the file's schema up to date (`migrations.migrate`); False if it cannot be written now.

        A read-only journal still opens: it can be read, `begin()` refuses, answers wait in memory. A journal
        written by a newer version is refused (`JournalVersionError`) before anything is changed.
        """
        try:
            with self._lock:
                migrate(self._db, self.path)
        except sqlite3.Error:
            return False
        return True

    def _reopen(self) -> None:
        """A connection opened on a read-only file stays read-only: open it again once the file may be writable."""
        try:
            self._connection.reopen(self.busy_timeout)
        except (sqlite3.Error, OSError, JournalUnavailableError):  # replaced, damaged: the ids wait in memory
            return
        self._ready = self._prepare()

    def interrupt(self) -> None:
        """Stop a statement waiting on another's lock, from any thread (at shutdown: its ids join the backlog)."""
        self._db.interrupt()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:  # the file's connection is shared: its wait and its transaction, under its one lock
            self._connection.use_timeout(self._waits)
            with write_transaction(self._db, self._lock) as db:
                yield db

    # -- the backlog -----------------------------------------------------------------------------------

    @property
    def backlog_ids(self) -> list[str]:
        """Task ids that arrived but are not written to the file yet (kept in memory, retried)."""
        with self._lock:
            return [i for item in self._backlog for i in item.ids]

    def flush(self) -> bool:
        """Write what is waiting in memory; True once nothing is left waiting."""
        with self._lock:
            if not self._backlog:
                return True
            reopened = False
            while self._backlog:
                item = self._backlog[0]
                try:
                    with self._write() as db:
                        item.apply(db)
                except sqlite3.Error as exc:
                    if reopened or "readonly" not in str(exc):
                        return False
                    self._reopen()  # a connection opened on a read-only file stays read-only
                    reopened = True
                    continue
                self._backlog.pop(0)
            self._warned_episode = False
            return True

    def _record(self, item: _Unwritten, what: str) -> None:
        """Write now if the file takes it, else keep it (in order) and say which ids are not journalled."""
        with self._lock:
            if self.flush():
                try:
                    with self._write() as db:
                        item.apply(db)
                    return
                except (sqlite3.Error, ValueError) as exc:
                    reason = storage_reason(exc)
            else:
                reason = "earlier writes are still waiting"
            self._backlog.append(item)
            if not item.ids and self._warned_episode:
                return
            self._warned_episode = True
        ids = f"task ids {_id_list(item.ids)} are NOT journalled yet" if item.ids else f"{what} is not journalled yet"
        warnings.warn(
            f"The journal {self.path} could not be written ({reason}): {ids}. They are kept in memory and "
            "written on the next journal use; keep this kernel running or note them down.",
            JournalWriteWarning,
            stacklevel=4,
        )

    # -- what the client reports ---------------------------------------------------------------------

    def begin(self, endpoint: str, host: str, payload: Mapping[str, Any]) -> str:
        """Record a paid request before it is sent; `JournalUnavailableError` (send nothing) if it cannot."""
        attempt_id = uuid.uuid4().hex
        owner = self._owner
        with self._lock:
            self.flush()
            if not self._ready:  # tables or columns could not be made at open (locked, read-only): try again
                self._ready = self._prepare()
            try:
                with self._write() as db:
                    db.execute(
                        "INSERT INTO attempts (id, endpoint, host, payload, created_at, owner_host, owner_pid,"
                        " owner_started) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            attempt_id,
                            endpoint,
                            host,
                            json.dumps(dict(payload), default=str),
                            time.time(),
                            owner.host,
                            owner.pid,
                            owner.started,
                        ),
                    )
            except (sqlite3.Error, ValueError) as exc:
                if is_damage(exc):
                    raise damaged(self.path, str(exc)) from None
                raise JournalUnavailableError.cannot_record(self.path, exc) from None
        return attempt_id

    def submitted(self, attempt_id: str, ids: list[str], *, v2: bool = False) -> None:
        """The task ids a paid request created; never raises (see `JournalWriteWarning`)."""
        now = time.time()
        host, payload = self._attempt_origin(attempt_id)
        title = _text(payload.get("title"))
        style = _text(payload.get("style")) or _text(payload.get("prompt"))
        version = 2 if v2 else 1
        saved = {
            "kind": "submitted",
            "attempt_id": attempt_id,
            "rows": [(i, attempt_id, version, host, title, style, now, now) for i in ids],
        }
        entries = [
            JournalEntry(i, version, host, "processing", title, style, *(None,) * 5, now, now, attempt_id) for i in ids
        ]
        self._record(_Unwritten(lambda db: _apply_saved(db, saved), list(ids), entries, saved), "the answer")

    def _attempt_origin(self, attempt_id: str) -> tuple[str, dict[str, Any]]:
        try:
            with self._lock:
                row = self._db.execute("SELECT host, payload FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
        except (sqlite3.Error, ValueError):
            row = None
        return (row["host"], json.loads(row["payload"])) if row else ("", {})

    def unknown(self, attempt_id: str, note: str) -> None:
        self._set_outcome(attempt_id, "unknown", note)

    def rejected(self, attempt_id: str, note: str) -> None:
        self._set_outcome(attempt_id, "rejected", note)

    def _set_outcome(self, attempt_id: str, outcome: str, note: str) -> None:
        def apply(db: sqlite3.Connection) -> None:
            db.execute("UPDATE attempts SET outcome = ?, note = ? WHERE id = ?", (outcome, note[:2000], attempt_id))

        saved = {"kind": "outcome", "attempt_id": attempt_id, "outcome": outcome, "note": note[:2000]}
        self._record(_Unwritten(apply, saved=saved), f"the {outcome} outcome of a paid request")

    def observe(self, records: Iterable[TaskRecord | V2Song]) -> None:
        """Task state as polling learns it; an empty field never erases what an earlier answer said."""
        rows = [
            (
                r.state.value,
                r.title,
                r.style,
                r.audio_url,
                r.cover_url,
                getattr(r, "song_id", None),
                r.lyrics,
                r.fail_reason,
                time.time(),
                r.id,
            )
            for r in records
        ]
        rows = self._changing(rows)
        if not rows:
            return

        def apply(db: sqlite3.Connection) -> None:
            db.executemany(
                "UPDATE tasks SET state = ?, title = COALESCE(NULLIF(?, ''), title),"
                " style = COALESCE(NULLIF(?, ''), style), audio_url = COALESCE(NULLIF(?, ''), audio_url),"
                " cover_url = COALESCE(NULLIF(?, ''), cover_url), song_id = COALESCE(NULLIF(?, ''), song_id),"
                " lyrics = COALESCE(NULLIF(?, ''), lyrics), fail_reason = NULLIF(?, ''), updated_at = ? WHERE id = ?",
                rows,
            )

        self._record(_Unwritten(apply), "task state")

    def _changing(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The rows of `observe` that would change what the file holds: a poll that learns nothing new writes
        nothing (no transaction, no lock taken from another kernel). With writes still waiting in memory, all of
        them, in order, since the file does not say yet what they will change."""
        with self._lock:
            if self._backlog:
                return rows
            held: dict[str, tuple[Any, ...]] = {}
            ids = [row[-1] for row in rows]
            try:
                for start in range(0, len(ids), 500):
                    chunk = ids[start : start + 500]
                    for found in self._db.execute(
                        "SELECT id, state, title, style, audio_url, cover_url, song_id, lyrics, fail_reason FROM tasks"
                        f" WHERE id IN ({','.join('?' * len(chunk))})",
                        chunk,
                    ):
                        held[found[0]] = tuple(found[1:])
            except sqlite3.Error:
                return rows  # the write says what is wrong, or waits in memory
        return [row for row in rows if row[-1] in held and _observed(row, held[row[-1]]) != held[row[-1]]]

    def downloaded(self, task_id: str, path: str) -> None:
        def apply(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE tasks SET downloaded_path = ?, updated_at = ? WHERE id = ?", (path, time.time(), task_id)
            )

        self._record(_Unwritten(apply), f"the download of {task_id}")

    # -- what users ask ------------------------------------------------------------------------------

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            if self._backlog:
                with self._quick():
                    self.flush()
            try:
                self._connection.use_timeout(self._waits)
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                if is_damage(exc):
                    raise damaged(self.path, str(exc)) from None
                reason = storage_reason(exc)
                raise JournalUnavailableError(f"The journal {self.path} cannot be read ({reason}).") from None

    @contextmanager
    def _quick(self) -> Iterator[None]:
        """Writes a read makes on the side (the backlog, settling) try once and never wait out a lock."""
        with self._lock:
            before, self._waits = self._waits, QUICK_BUSY_MS / 1000
            try:
                yield
            finally:
                self._waits = before

    def _entries(self, where: str, params: tuple[Any, ...], limit: int | None = None) -> list[JournalEntry]:
        sql = f"SELECT * FROM tasks WHERE {where} ORDER BY created_at DESC, id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        rows = self._read(sql, params)
        return [JournalEntry(**{k: row[k] for k in row.keys()}) for row in rows]  # noqa: SIM118

    def known(self, ids: Iterable[str]) -> list[TaskRecord | V2Song]:
        """The words the journal knows of these tasks (title, style, lyrics), as records with no state: they seed
        a wait so a v2 title the query answers blank survives, while the state always comes from the service."""
        wanted = list(dict.fromkeys(ids))[:1000]
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        return [entry.words() for entry in self._entries(f"id IN ({marks})", tuple(wanted))]

    def unfinished(self, host: str | None = None) -> list[JournalEntry]:
        """Tasks not yet known to be complete or failed: the ones to resume after a restart.

        Tasks still waiting in memory (the file could not take them yet) are included.
        """
        found = self._entries("state NOT IN ('complete', 'failed')", ())
        known = {e.id for e in found}
        with self._lock:
            waiting = [e for item in self._backlog for e in item.tasks]
        found += [e for e in waiting if e.id not in known]
        if host is None:
            return found
        on_service = service_filter([host])
        return [e for e in found if on_service(e.host)]

    def history(
        self, *, state: str | None = None, since: float | None = None, text: str | None = None, limit: int = 50
    ) -> list[JournalEntry]:
        """Recent tasks, newest first, filtered by state, start time and a text in title/style/id."""
        clauses, params = ["1=1"], []
        if state:
            clauses.append("state = ?")
            params.append(state)
        if since is not None:
            clauses.append("created_at >= ?")
            params.append(since)
        if text:
            clauses.append("(title LIKE ? OR style LIKE ? OR id LIKE ?)")
            params.extend([f"%{text}%"] * 3)
        return self._entries(" AND ".join(clauses), tuple(params), limit)

    def attempts(self, outcome: str | None = None, *, hosts: Iterable[str] | None = None) -> list[Attempt]:
        """Paid requests, oldest first. A `pending` one whose process died is reported (and marked) `unknown`.

        `hosts`: only those sent to one of these base URLs, however each was spelled (case, default port, slash).
        """
        sql, params = "SELECT * FROM attempts", ()
        if outcome in ("pending", "unknown"):
            sql += " WHERE outcome IN ('pending', 'unknown')"  # a pending one may turn out unknown
        elif outcome is not None:
            sql, params = sql + " WHERE outcome = ?", (outcome,)
        rows = self._read(sql + " ORDER BY created_at", params)
        found = self._settle([_attempt(row) for row in rows])
        on_service = None if hosts is None else service_filter(str(h) for h in hosts)
        return [
            a for a in found if (outcome is None or a.outcome == outcome) and (on_service is None or on_service(a.host))
        ]

    def _settle(self, attempts: list[Attempt]) -> list[Attempt]:
        """A pending attempt whose sender is gone can never be answered: its outcome is unknown.

        Marked in the file too when it is free at once (a read never waits out another kernel's lock).
        """
        settled, notes = [], []
        for attempt in attempts:
            if attempt.outcome == "pending" and (attempt.owner is None or not attempt.owner.is_alive()):
                note = LEGACY_NOTE if attempt.owner is None else DIED_NOTE.format(owner=attempt.owner)
                attempt = dataclasses.replace(attempt, outcome="unknown", note=note)
                notes.append((note, attempt.id))
            settled.append(attempt)
        if notes:
            with self._quick(), suppress(sqlite3.Error), self._write() as db:  # else marked on a later read
                db.executemany(
                    "UPDATE attempts SET outcome = 'unknown', note = ? WHERE id = ? AND outcome = 'pending'", notes
                )
        return settled

    def close(self) -> None:
        """Write what waits in memory, then close.

        If the file still cannot take it, the task ids and outcomes are spilled to a file beside the journal
        (taken in when the journal next opens); a warning names the ids either way.
        """
        with self._lock:
            if not self.flush():
                ids = self.backlog_ids
                spill = self._spill()
                what = f"task ids {_id_list(ids, 1000)}" if ids else f"{len(self._backlog)} update(s)"
                if spill is not None:
                    message = (
                        f"The journal {self.path} could still not be written at close: {what} were saved to "
                        f"{spill} instead, and are written into the journal the next time it is opened."
                    )
                else:
                    message = (
                        f"The journal {self.path} could still not be written at close: {what} were NOT journalled. "
                        "Note them down: resume() cannot find them later."
                    )
                warnings.warn(message, JournalWriteWarning, stacklevel=2)
                self._backlog.clear()
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.release(self)

    def _spill(self) -> Path | None:
        """Save what must not be lost (ids, outcomes) beside the journal; None if that fails too."""
        saved = [item.saved for item in self._backlog if item.saved is not None]
        if not saved:
            return None
        target = self.path.with_name(f"{self.path.name}.unsaved-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        partial = target.with_suffix(".part")
        try:  # private from its first byte, as the journal is: it holds ids, titles and prompts
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(json.dumps(saved))
            partial.replace(target)
        except OSError:
            with suppress(OSError):
                partial.unlink(missing_ok=True)
            return None
        return target

    def _take_spills(self) -> None:
        """Write what an earlier process could not (its spill files), then remove them.

        Only regular files of this user are taken: in a shared folder anyone could leave one named like a spill.
        """
        prefix = f"{self.path.name}.unsaved-"
        for spill in sorted(p for p in self.path.parent.iterdir() if p.name.startswith(prefix) and p.suffix == ".json"):
            try:
                found = spill.lstat()
                if not stat.S_ISREG(found.st_mode) or (hasattr(os, "getuid") and found.st_uid != os.getuid()):
                    continue
                saved = json.loads(spill.read_text())
                with self._write() as db:
                    for entry in saved:
                        _apply_saved(db, entry)
                spill.unlink()
            except (OSError, ValueError, KeyError, TypeError, sqlite3.Error):
                continue  # kept for a later open

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _observed(row: tuple[Any, ...], held: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a task's fields (as `held`) become after `observe`'s UPDATE of `row`: the same rule as its SQL (an
    empty field keeps what was there; an empty fail reason clears it)."""
    state, *kept, fail = row[:8]
    return (
        state,
        *(new if new not in (None, "") else old for new, old in zip(kept, held[1:7], strict=True)),
        fail or None,
    )


def same_service(one: str, other: str) -> bool:
    """Whether two base URLs name one service, however spelled (`config.service_address`)."""
    return service_address(one) == service_address(other)


def service_filter(wanted: Iterable[str]) -> Callable[[str], bool]:
    """Whether a journalled host names one of the `wanted` services, however spelled (as `same_service`). Each
    distinct spelling is parsed once: a journal holds thousands of rows over a few hosts (figure 6's resume)."""
    addresses = {service_address(url) for url in wanted}
    seen: dict[str, bool] = {}

    def on_service(host: str) -> bool:
        found = seen.get(host)
        if found is None:
            found = seen[host] = service_address(host) in addresses
        return found

    return on_service


def _id_list(ids: list[str], limit: int = 20) -> str:
    shown = ", ".join(ids[:limit])
    return shown if len(ids) <= limit else f"{shown} and {len(ids) - limit} more"

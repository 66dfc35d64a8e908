"""A durable record of every paid request and every task id it created, so no paid song is lost.

SQLite in WAL mode with a busy timeout, so two kernels can share one journal. The client writes an
attempt row *before* sending, the task ids as soon as the answer arrives, and task state as polling
learns it. Nothing secret is stored: the key travels in a header, never in a payload.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import TaskRecord, V2Song

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    host TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL,
    outcome TEXT NOT NULL DEFAULT 'pending',
    note TEXT
);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    attempt_id TEXT,
    version INTEGER NOT NULL DEFAULT 1,
    host TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'processing',
    title TEXT,
    style TEXT,
    audio_url TEXT,
    cover_url TEXT,
    song_id TEXT,
    fail_reason TEXT,
    downloaded_path TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state);
CREATE INDEX IF NOT EXISTS tasks_created ON tasks(created_at);
"""
FINISHED_STATES = ("complete", "failed")


def open_db(path: str | Path) -> sqlite3.Connection:
    """A connection to the journal's SQLite file, set up the one way every user of the file needs.

    WAL so two kernels can share it, a busy timeout so a writer waits its turn, autocommit so each
    user says where its transactions begin. The batch and library stores open their tables with this.
    """
    db = sqlite3.connect(path, timeout=10, check_same_thread=False, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=10000")
    return db


def default_journal_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("ipymusicgen", appauthor=False)) / "journal.sqlite3"


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

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


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


class Journal:
    """Thread-safe, process-safe journal of paid requests and their tasks."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_journal_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = open_db(self.path)
        self._db.executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r})"

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- what the client reports ---------------------------------------------------------------------

    def begin(self, endpoint: str, host: str, payload: Mapping[str, Any]) -> str:
        attempt_id = uuid.uuid4().hex
        with self._write() as db:
            db.execute(
                "INSERT INTO attempts (id, endpoint, host, payload, created_at) VALUES (?, ?, ?, ?, ?)",
                (attempt_id, endpoint, host, json.dumps(dict(payload), default=str), time.time()),
            )
        return attempt_id

    def submitted(self, attempt_id: str, ids: list[str], *, v2: bool = False) -> None:
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT host, payload FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
            host = row["host"] if row else ""
            payload = json.loads(row["payload"]) if row else {}
            db.execute("UPDATE attempts SET outcome = 'submitted' WHERE id = ?", (attempt_id,))
            db.executemany(
                "INSERT OR IGNORE INTO tasks (id, attempt_id, version, host, title, style, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        i,
                        attempt_id,
                        2 if v2 else 1,
                        host,
                        payload.get("title") or None,
                        payload.get("style") or payload.get("prompt"),
                        now,
                        now,
                    )
                    for i in ids
                ],
            )

    def unknown(self, attempt_id: str, note: str) -> None:
        self._set_outcome(attempt_id, "unknown", note)

    def rejected(self, attempt_id: str, note: str) -> None:
        self._set_outcome(attempt_id, "rejected", note)

    def _set_outcome(self, attempt_id: str, outcome: str, note: str) -> None:
        with self._write() as db:
            db.execute("UPDATE attempts SET outcome = ?, note = ? WHERE id = ?", (outcome, note[:2000], attempt_id))

    def observe(self, records: Iterable[TaskRecord | V2Song]) -> None:
        rows = [
            (
                r.state.value,
                r.title,
                r.style,
                r.audio_url,
                r.cover_url,
                getattr(r, "song_id", None),
                r.fail_reason,
                time.time(),
                r.id,
            )
            for r in records
        ]
        if not rows:
            return
        with self._write() as db:
            db.executemany(
                "UPDATE tasks SET state = ?, title = COALESCE(?, title), style = COALESCE(?, style),"
                " audio_url = COALESCE(?, audio_url), cover_url = COALESCE(?, cover_url),"
                " song_id = COALESCE(?, song_id), fail_reason = ?, updated_at = ? WHERE id = ?",
                rows,
            )

    def downloaded(self, task_id: str, path: str) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE tasks SET downloaded_path = ?, updated_at = ? WHERE id = ?", (path, time.time(), task_id)
            )

    # -- what users ask ------------------------------------------------------------------------------

    def _entries(self, where: str, params: tuple[Any, ...], limit: int | None = None) -> list[JournalEntry]:
        sql = f"SELECT * FROM tasks WHERE {where} ORDER BY created_at DESC, id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [JournalEntry(**{k: row[k] for k in row.keys()}) for row in rows]  # noqa: SIM118

    def unfinished(self, host: str | None = None) -> list[JournalEntry]:
        """Tasks not yet known to be complete or failed: the ones to resume after a restart."""
        where = "state NOT IN ('complete', 'failed')"
        if host is None:
            return self._entries(where, ())
        return self._entries(where + " AND host = ?", (host,))

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

    def attempts(self, outcome: str | None = None) -> list[Attempt]:
        sql, params = "SELECT * FROM attempts", ()
        if outcome:
            sql, params = sql + " WHERE outcome = ?", (outcome,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at", params).fetchall()
        return [
            Attempt(
                r["id"], r["endpoint"], r["host"], json.loads(r["payload"]), r["created_at"], r["outcome"], r["note"]
            )
            for r in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

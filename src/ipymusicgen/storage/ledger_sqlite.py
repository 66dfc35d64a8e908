"""The ledger on a SQLite file: the embedded default, one machine (processes share it through file locks)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any, ClassVar

from .ledger import GatewayLedger, fill_singers, fill_totals

BUSY_TIMEOUT_MS = 30_000


class SqliteLedger(GatewayLedger):
    """Every writing transaction is `BEGIN IMMEDIATE`: one writer at a time across processes, so a reservation's
    read of what is spent and its insert cannot interleave with another's. Reads run beside it (WAL)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)  # it holds token hashes: 0600 like the journal
            os.close(fd)
        super().__init__(str(self.path))

    def _connect(self) -> Any:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.create_function("ledger_now", 0, time.time)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # as the journal: safe against a killed process, fewer fsyncs
        return _AutoCommit(conn)

    def _begin(self, cur: Any, write: bool) -> None:
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def _lock_for_reserve(self, cur: Any, user: str) -> None:
        """`BEGIN IMMEDIATE` already holds the database's write lock."""

    types: ClassVar[dict[str, str]] = {"real": "REAL", "blob": "BLOB", "int": "INTEGER", "text": "TEXT"}
    now_sql = "ledger_now()"
    """The ledger's clock: the machine's (every process sharing a SQLite file runs on it), in seconds, to the
    microsecond (SQLite's own `julianday('now')` counts milliseconds: a call and a reading would tie)."""

    def columns_of(self, cur: Any, table: str) -> set[str]:
        return {col[1] for col in cur.all(f"PRAGMA table_info({table})")}

    def _schema_lock(self, cur: Any) -> None:
        """`BEGIN IMMEDIATE` already holds the database's write lock."""

    def base_schema(self, cur: Any) -> None:
        """The tables as they stood before the ledger had versions (migration step 1)."""
        cur.run(
            "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE, "
            "budget INTEGER, revoked INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, "
            "spent INTEGER NOT NULL DEFAULT 0)"
        )
        cur.run(
            "CREATE TABLE IF NOT EXISTS team (id INTEGER PRIMARY KEY, budget INTEGER, spent INTEGER NOT NULL DEFAULT 0)"
        )
        cur.run("INSERT OR IGNORE INTO team (id, budget) VALUES (1, NULL)")
        cur.run(
            "CREATE TABLE IF NOT EXISTS calls (id INTEGER PRIMARY KEY AUTOINCREMENT, user_name TEXT NOT NULL, "
            "idem_key TEXT, endpoint TEXT NOT NULL, model TEXT, estimated INTEGER NOT NULL, measured INTEGER, "
            "state TEXT NOT NULL, status_code INTEGER, body BLOB, created_at REAL NOT NULL, day TEXT NOT NULL, "
            "fingerprint TEXT, UNIQUE (user_name, idem_key))"
        )
        if not any(col[1] == "fingerprint" for col in cur.all("PRAGMA table_info(calls)")):
            cur.run("ALTER TABLE calls ADD COLUMN fingerprint TEXT")  # a ledger made before requests had one
        cur.run("CREATE TABLE IF NOT EXISTS tasks (task_id TEXT PRIMARY KEY, user_name TEXT NOT NULL)")
        cur.run("CREATE TABLE IF NOT EXISTS songs (song_id TEXT PRIMARY KEY, user_name TEXT NOT NULL)")
        cur.run("CREATE INDEX IF NOT EXISTS tasks_user ON tasks (user_name)")  # a user's tasks, not every task
        cur.run(  # the meter's calls in flight (a few), not every call, read while it holds the team row
            "CREATE INDEX IF NOT EXISTS calls_in_flight ON calls (created_at) WHERE state IN ('pending', 'unknown')"
        )
        cur.run("CREATE TABLE IF NOT EXISTS meter (id INTEGER PRIMARY KEY, counts INTEGER, last_call INTEGER)")
        cur.run("INSERT OR IGNORE INTO meter (id) VALUES (1)")
        added = [t for t in ("users", "team") if not any(c[1] == "spent" for c in cur.all(f"PRAGMA table_info({t})"))]
        for table in added:  # a ledger made before the running totals: added and filled in this one transaction
            cur.run(f"ALTER TABLE {table} ADD COLUMN spent INTEGER NOT NULL DEFAULT 0")
        if added:
            fill_totals(cur)
        if not cur.one(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'singers'"
        ):  # a ledger made before: the singers its vibe calls made, from their answers
            cur.run("CREATE TABLE singers (singer_id TEXT PRIMARY KEY, user_name TEXT NOT NULL)")
            fill_singers(cur)


class _AutoCommit:
    """sqlite3 in autocommit mode with explicit BEGIN: commit/rollback are statements."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def cursor(self) -> sqlite3.Cursor:
        return self._conn.cursor()

    def commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

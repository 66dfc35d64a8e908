"""Where a batch's rows live between runs: the journal's SQLite file (its own tables), or memory.

A row is written "sending" (with its owner process) *before* its create goes out and gets its ids
right after, so a re-run — in the same kernel, a new one, or after kill -9 — knows which rows were
never sent (send them), which were submitted (watch them) and which may have been sent (list them,
never resend them). Claiming a row is one IMMEDIATE transaction, so two kernels cannot both send it.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..errors import JournalWriteWarning
from .journal_file import busy_timeout_or_default, damage_named, write_transaction
from .migrations import migrate
from .owner import Owner
from .shared_connection import Shared, acquire

T = TypeVar("T")
NEVER_SENT = ("pending", "rejected", "skipped")
"""Stored states of a row whose create certainly did not happen: safe to send."""
HANDED = "handed"
"""A row handed to a team gateway that has not sent it yet: the gateway may still send it, so no run here does (a
run through that gateway attaches to it); once the gateway sends it, its state here follows the gateway's."""
GATEWAY_OWNER = "gateway"
"""The owner (`owner_start`) of a row handed to a gateway: its create is the gateway's, never this machine's."""


def _owner(pid: int | None, start: str | None) -> Owner:
    """The process that claimed a row (rows are claimed on this machine: the journal file is local)."""
    return Owner(socket.gethostname(), pid or 0, start)


@dataclass
class StoredRow:
    index: int
    request_hash: str
    state: str
    ids: list[str]
    attempts: int
    owner_pid: int | None
    owner_start: str | None
    error: str | None
    cost: int | None
    stalled: bool = False
    """Failed by the batch engine because none of its songs changed state in time: a re-run follows it again."""

    @property
    def owner_alive(self) -> bool:
        return bool(self.owner_pid) and _owner(self.owner_pid, self.owner_start).is_alive()

    @property
    def mine(self) -> bool:
        return _owner(self.owner_pid, self.owner_start) == Owner.current()


def _damage_named(method: Callable[..., T]) -> Callable[..., T]:
    """A read, or a write made before anything is sent, says a damaged file's one line (`db.damaged`)."""

    @functools.wraps(method)
    def named(self: BatchStore, *args: Any, **kwargs: Any) -> T:
        with damage_named(self.path):
            return method(self, *args, **kwargs)

    return named


class BatchStore:
    """The batch tables, in the journal's file (`path`) or in memory (`path=None`, this process only)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._shared: Shared | None = None
        self._memory: sqlite3.Connection | None = None
        if self.path is None:
            self._memory = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            self._memory.row_factory = sqlite3.Row
            self._lock = threading.RLock()
        else:
            self._shared = acquire(self.path, owner=self)
            self._lock = self._shared.lock
        try:
            self._ready = self._prepare()
        except BaseException:
            self.close()
            raise
        self._deferred: list[tuple[str, tuple[Any, ...]]] = []
        """Row states the file refused (locked by another kernel, disk full): written before the next write."""

    def __repr__(self) -> str:
        return f"BatchStore({str(self.path) if self.path else 'in memory'!r})"

    @property
    def _db(self) -> sqlite3.Connection:
        """The journal file's one connection in this process (shared with the other stores), or memory's."""
        if self._memory is not None:
            return self._memory
        if self._shared is None:  # this store was closed, whoever else still uses the file
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return self._shared.db

    @_db.setter
    def _db(self, db: sqlite3.Connection) -> None:
        if self._shared is not None:
            self._shared.db = db
        else:
            self._memory = db

    def _prepare(self) -> bool:
        """Bring the schema up to date; False if the file cannot be written now (read-only, locked): it still
        opens to read, as the journal does, and the next write tries again (and says why it cannot)."""
        try:
            with self._lock:
                migrate(self._db, self.path or "memory")
        except sqlite3.OperationalError:
            return False
        return True

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:  # the file's connection is shared: its wait and its transaction, under its one lock
            if not self._ready:
                migrate(self._db, self.path or "memory")  # raises what keeps the file from being written
                self._ready = True
            if self._shared is not None:
                self._shared.use_timeout(busy_timeout_or_default(None))
            with write_transaction(self._db, self._lock) as db:
                yield db

    def _record(self, statements: list[tuple[str, tuple[Any, ...]]]) -> bool:
        """Write `statements` after any deferred ones, in one transaction; if the file refuses (locked past the
        busy timeout, full, read-only), keep them for the next write rather than fail the batch: the row's
        ids are in memory (and in the client's journal backlog), and a lost state write must not stop it."""
        earlier = list(self._deferred)
        try:
            with self._write() as db:
                for sql, params in [*earlier, *statements]:
                    db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            self._deferred.extend(statements)
            warnings.warn(
                f"Batch rows could not be written to {self.path} ({exc}); kept in memory, written at the next "
                "write.", JournalWriteWarning, stacklevel=3)  # fmt: skip
            return False
        del self._deferred[: len(earlier)]
        return True

    def flush(self) -> bool:
        """Write the deferred row states now; True when none are left."""
        return self._record([]) if self._deferred else True

    @_damage_named
    def open_batch(self, name: str, rows: list[tuple[str, str, bool]]) -> dict[int, StoredRow]:
        """Record rows (hash, request JSON, v2) not yet known; return every row's stored state.

        A row whose hash differs from the one stored under the same name and index raises ValueError, unless
        nothing of that name was ever sent (no row claimed: a run refused before sending, over budget or with a
        bad row): a run that sent nothing leaves no claim on its name, and the new rows replace its rows.
        """
        now = time.time()
        with self._write() as db:
            sent = db.execute("SELECT COUNT(*) FROM batch_rows WHERE batch = ? AND attempts > 0", (name,)).fetchone()
            if not sent[0]:
                db.execute("DELETE FROM batch_rows WHERE batch = ?", (name,))
                db.execute("DELETE FROM batches WHERE name = ?", (name,))
                db.execute("DELETE FROM batch_runs WHERE batch = ? AND calls = 0", (name,))  # measured nothing
            db.execute("INSERT OR IGNORE INTO batches (name, created_at) VALUES (?, ?)", (name, now))
            known = {
                r["row_index"]: r["request_hash"]
                for r in db.execute("SELECT row_index, request_hash FROM batch_rows WHERE batch = ?", (name,))
            }
            for index, (digest, _, _) in enumerate(rows):
                if index in known and known[index] != digest:
                    raise ValueError(index)
            db.executemany(
                "INSERT OR IGNORE INTO batch_rows (batch, row_index, request_hash, request, v2, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(name, i, digest, text, int(v2), now) for i, (digest, text, v2) in enumerate(rows)],
            )
        return self.rows(name)

    @_damage_named
    def rows(self, name: str) -> dict[int, StoredRow]:
        with self._lock:
            found = self._db.execute("SELECT * FROM batch_rows WHERE batch = ? ORDER BY row_index", (name,)).fetchall()
        # a sqlite3.Row's `in` looks at its values: its column names are its keys() (no stalled column: a read-only
        # file from before step 12)
        stalled_kept = bool(found) and "stalled" in found[0].keys()  # noqa: SIM118
        return {
            r["row_index"]: StoredRow(
                r["row_index"],
                r["request_hash"],
                r["state"],
                json.loads(r["ids"]),
                r["attempts"],
                r["owner_pid"],
                r["owner_start"],
                r["error"],
                r["cost"],
                bool(r["stalled"]) if stalled_kept else False,
            )
            for r in found
        }

    @_damage_named
    def claim(self, name: str, index: int, cost: int, *, allow_unknown: bool = False) -> bool:
        """Mark a never-sent row "sending" by this process, before its create; False if it is not ours to send."""
        allowed = NEVER_SENT + (("unknown", "sending") if allow_unknown else ())
        marks = ",".join("?" * len(allowed))
        with self._write() as db:
            cursor = db.execute(
                f"UPDATE batch_rows SET state = 'sending', attempts = attempts + 1, owner_pid = ?, owner_start = ?,"
                f" error = NULL, stalled = 0, cost = ?, updated_at = ?"
                f" WHERE batch = ? AND row_index = ? AND state IN ({marks})",
                (os.getpid(), Owner.current().started, cost, time.time(), name, index, *allowed),
            )
            return cursor.rowcount == 1

    @_damage_named
    def hand_over(self, name: str, costs: dict[int, int]) -> list[int]:
        """Mark rows never sent (index -> estimated credits) as handed to a gateway, before the hand-off goes out;
        the indices marked (a row already handed, or sent from here, is left as it is)."""
        marks = ",".join("?" * len(NEVER_SENT))
        marked = []
        with self._write() as db:
            for index, cost in costs.items():
                cursor = db.execute(
                    f"UPDATE batch_rows SET state = ?, attempts = attempts + 1, owner_pid = NULL, owner_start = ?,"
                    f" error = NULL, stalled = 0, cost = ?, updated_at = ? WHERE batch = ? AND row_index = ?"
                    f" AND state IN ({marks})",
                    (HANDED, GATEWAY_OWNER, cost, time.time(), name, index, *NEVER_SENT),
                )
                if cursor.rowcount == 1:
                    marked.append(index)
        return marked

    def set_state(
        self,
        name: str,
        index: int,
        state: str,
        *,
        ids: list[str] | None = None,
        error: str | None = None,
        stalled: bool = False,
    ) -> None:
        """Record a row's state (`stalled`: failed because none of its songs moved in time; any other write
        clears it)."""
        if ids is None:
            statement = (
                "UPDATE batch_rows SET state = ?, error = ?, stalled = ?, updated_at = ?"
                " WHERE batch = ? AND row_index = ?",
                (state, error, int(stalled), time.time(), name, index),
            )
        else:
            statement = (
                "UPDATE batch_rows SET state = ?, ids = ?, error = ?, stalled = ?, updated_at = ?"
                " WHERE batch = ? AND row_index = ?",
                (state, json.dumps(ids), error, int(stalled), time.time(), name, index),
            )
        self._record([statement])

    def start_run(self, name: str, host: str | None, counts_before: int | None) -> int | None:
        """A run of the batch begins (the key's counts just read); its id, or None if the file refused it."""
        try:
            with self._write() as db:
                cursor = db.execute(
                    "INSERT INTO batch_runs (batch, host, started_at, counts_before) VALUES (?, ?, ?, ?)",
                    (name, host, time.time(), counts_before),
                )
                return int(cursor.lastrowid or 0) or None
        except sqlite3.OperationalError:  # a locked file costs the measurement, never the batch
            return None

    def finish_run(self, run_id: int | None, counts_after: int | None, calls: int) -> None:
        if run_id is None:
            return
        self._record(
            [
                (
                    "UPDATE batch_runs SET finished_at = ?, counts_after = ?, calls = ? WHERE id = ?",
                    (time.time(), counts_after, calls, run_id),
                )
            ]
        )

    @_damage_named
    def counts(self, name: str) -> tuple[int | None, int | None, int]:
        """(counts left before the batch's first measured run, after its last, rows whose create went out)."""
        with self._lock:
            row = self._db.execute(
                "SELECT (SELECT counts_before FROM batch_runs WHERE batch = ?1 AND counts_before IS NOT NULL"
                " ORDER BY started_at, id LIMIT 1), (SELECT counts_after FROM batch_runs WHERE batch = ?1 AND"
                " counts_after IS NOT NULL ORDER BY started_at DESC, id DESC LIMIT 1)",
                (name,),
            ).fetchone()
            marks = ",".join("?" * len(NEVER_SENT))
            calls = self._db.execute(
                f"SELECT COUNT(*) FROM batch_rows WHERE batch = ? AND state NOT IN ({marks})", (name, *NEVER_SENT)
            ).fetchone()[0]
        return row[0], row[1], calls

    @_damage_named
    def names(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT name FROM batches ORDER BY created_at")]

    def close(self) -> None:
        with self._lock:
            if self._memory is not None:
                self._memory.close()
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.release(self)

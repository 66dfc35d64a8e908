"""Paid extras of a song (WAV, MP4, a singer voice), one row per (song, kind) in the journal's file.

A request for an extra is claimed here before it is sent (state `sending`, with the process that sends it),
in one IMMEDIATE transaction: a second press, another kernel on the same journal or the agent server finds
the row and reuses what it holds instead of paying again. States:

- `sending`: claimed, the request is on its way (a dead sender's claim reads as `unknown`);
- `made`: the service answered; `value` is the URL (or singer id), `path` the archived file once kept;
- `unknown`: the request may have reached the service and been charged; never sent again on its own;
- `rejected`: the service refused it (nothing charged): the next press may ask again.

A row is keyed by the song's task id, whatever name the caller typed: `songs_named` finds the journal's songs a
name names (its task id or the service's `song_id`, exactly, else ignoring ASCII case), and `get`/`claim` take
every name of the song, so a row kept under another name (before names were resolved) is found too.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .journal_file import damage_named, write_transaction
from .migrations import migrate
from .owner import Owner
from .shared_connection import Shared, SharedStore, acquire

STATES = ("sending", "made", "unknown", "rejected")
_RANK = MappingProxyType({"made": 0, "sending": 1, "unknown": 2, "rejected": 3})
"""Which row of a song's several names speaks for it: what was made first, a refusal last."""


@dataclass(frozen=True)
class Extra:
    """One paid extra as the journal holds it."""

    song: str
    kind: str
    state: str
    value: str | None
    path: str | None
    note: str | None
    owner: Owner | None
    created_at: float
    updated_at: float

    @property
    def mine(self) -> bool:
        """Whether this process claimed it."""
        me = Owner.current()
        return self.owner is not None and (self.owner.host, self.owner.pid) == (me.host, me.pid)


def _extra(row: sqlite3.Row) -> Extra:
    owner = None
    if row["owner_host"] is not None and row["owner_pid"] is not None:
        owner = Owner(row["owner_host"], int(row["owner_pid"]), row["owner_started"])
    extra = Extra(
        row["song"], row["kind"], row["state"], row["value"], row["path"], row["note"], owner,
        row["created_at"], row["updated_at"],
    )  # fmt: skip
    if extra.state == "sending" and (owner is None or not owner.is_alive()):
        note = f"the process that sent it ({owner or 'unknown'}) ended before the answer was kept; it may be charged"
        return Extra(extra.song, extra.kind, "unknown", extra.value, extra.path, note, owner, extra.created_at,
                     extra.updated_at)  # fmt: skip
    return extra


def _best(rows: list[Extra], first: str) -> Extra | None:
    """The row that speaks for the song: by state, then the one keyed by its task id."""
    return min(rows, key=lambda e: (_RANK.get(e.state, 9), e.song != first), default=None)


def _rows(db: sqlite3.Connection, names: tuple[str, ...], kind: str) -> list[Extra]:
    """The rows of `kind` kept under any of `names`, ignoring ASCII case."""
    names = tuple(dict.fromkeys(names))
    marks = ", ".join("?" * len(names))
    sql = f"SELECT * FROM paid_extras WHERE kind = ? AND song COLLATE NOCASE IN ({marks})"
    return [_extra(row) for row in db.execute(sql, (kind, *names)).fetchall()]


class ExtrasStore(SharedStore):
    """Reads and writes of `paid_extras`; one connection, shared by threads behind a lock."""

    def __init__(self, journal_path: str | Path) -> None:
        self.path = Path(journal_path)
        self._shared: Shared | None = acquire(self.path, owner=self)
        self.lock = self._shared.lock
        try:
            with self.lock, damage_named(self.path):
                migrate(self.db, self.path)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ExtrasStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def songs_named(self, name: str) -> list[tuple[str, str | None]]:
        """(task id, service song id) of the journal's songs `name` names: by task id, else by song id, else either
        ignoring ASCII case (what a caller may type of an id). Several: the name is ambiguous; none: unknown."""
        queries = (
            "SELECT id, song_id FROM tasks WHERE id = ?",
            "SELECT id, song_id FROM tasks WHERE song_id = ? ORDER BY id",
            "SELECT id, song_id FROM tasks WHERE id = ?1 COLLATE NOCASE OR song_id = ?1 COLLATE NOCASE ORDER BY id",
        )
        with self.lock, damage_named(self.path):
            for sql in queries:
                rows = self.db.execute(sql, (name,)).fetchall()
                if rows:
                    return [(row["id"], row["song_id"] or None) for row in rows]
        return []

    def remember_names(self, task_id: str, song_id: str) -> None:
        """Keep a song's two names, learned from the service, where `songs_named` finds them: only for a file of
        extras alone (a client without a journal), whose tasks table no library shows."""
        now = time.time()
        with damage_named(self.path), write_transaction(self.db, self.lock) as db:
            db.execute(
                "INSERT OR IGNORE INTO tasks (id, host, state, song_id, created_at, updated_at) "
                "VALUES (?, '', 'learned', ?, ?, ?)",
                (task_id, song_id, now, now),
            )

    def get(self, song: str, kind: str, names: tuple[str, ...] = ()) -> Extra | None:
        """The row that speaks for (song, kind), also looking under the song's other `names` (any ASCII case)."""
        with self.lock, damage_named(self.path):
            return _best(_rows(self.db, (song, *names), kind), song)

    def claim(
        self, song: str, kind: str, *, force: bool = False, names: tuple[str, ...] = ()
    ) -> tuple[bool, Extra | None]:
        """Claim (song, kind) for sending: (True, None) when this caller may send, else (False, what is held).

        `song` is the song's task id (the row's key); `names` its other names, whose rows count as its own. Free to
        claim: no row, a `rejected` one, or (only with `force`, the user's explicit "send anyway") an `unknown` one
        or a `made` one whose file was never kept. Read and written in one IMMEDIATE transaction, so two kernels
        cannot both claim."""
        me = Owner.current()
        now = time.time()
        with damage_named(self.path), write_transaction(self.db, self.lock) as db:
            held = _best(_rows(db, (song, *names), kind), song)
            again = force and (
                held is not None and (held.state == "unknown" or (held.state == "made" and not held.path))
            )
            if held is not None and not (held.state == "rejected" or again):
                return False, held
            db.execute(
                "INSERT INTO paid_extras (song, kind, state, owner_host, owner_pid, owner_started, created_at,"
                " updated_at) VALUES (?, ?, 'sending', ?, ?, ?, ?, ?) ON CONFLICT (song, kind) DO UPDATE SET"
                " state = 'sending', value = NULL, path = NULL, note = NULL, owner_host = excluded.owner_host,"
                " owner_pid = excluded.owner_pid, owner_started = excluded.owner_started,"
                " updated_at = excluded.updated_at",
                (song, kind, me.host, me.pid, me.started, now, now),
            )
        return True, None

    def _set(self, song: str, kind: str, **fields: Any) -> None:
        names = ", ".join(f"{name} = ?" for name in fields)
        with damage_named(self.path), write_transaction(self.db, self.lock) as db:
            db.execute(
                f"UPDATE paid_extras SET {names}, updated_at = ? WHERE song = ? AND kind = ?",
                (*fields.values(), time.time(), song, kind),
            )

    def made(self, song: str, kind: str, value: str) -> None:
        """The service's answer: a URL (or a singer id)."""
        self._set(song, kind, state="made", value=value, note=None)

    def kept(self, song: str, kind: str, path: Path) -> None:
        """The extra's file, archived beside the song."""
        self._set(song, kind, path=str(path))

    def ended(self, song: str, kind: str, state: str, note: str) -> None:
        """How a request that brought no answer ended: `unknown` (may be charged) or `rejected` (refused)."""
        if state not in ("unknown", "rejected"):
            raise ValueError(f"state: unknown or rejected (got {state!r})")
        self._set(song, kind, state=state, note=note[:2000])

    def of_song(self, song: str) -> list[Extra]:
        with self.lock, damage_named(self.path):
            rows = self.db.execute("SELECT * FROM paid_extras WHERE song = ? ORDER BY kind", (song,)).fetchall()
        return [_extra(row) for row in rows]

    def made_kinds(self, songs: list[str]) -> dict[str, list[str]]:
        """The extras held as made, per song (a page of cards at once): what a card offers as reused."""
        return {song: [e.kind for e in self.of_song(song) if e.state == "made"] for song in songs}

"""The library's tables in the journal's SQLite file: what the journal does not keep about a song.

Lyrics, prompt, model and action for full-text search (FTS5), favourites, notes, the kept take, the
parent song of an extend/concat (lineage), and the archive: path, size, peaks, the last failure.
One row per task id in `library_songs`; `library_fts` mirrors its searchable text. Rows are written as
records arrive (the client's record listener) and filled in for older journal rows by `sync()`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import service_address
from ..errors import MusicGenError
from ..models.costs import model_of
from .journal_file import busy_timeout_or_default, damage_named, write_transaction
from .migrations import LATEST, migrate, version_of
from .shared_connection import Shared, SharedStore, acquire
from .song_measures import SongMeasures
from .songs import Row, SongQueries

TEXT_LIMIT = 50_000
PEAK_SCALE = 127
"""Peaks are stored as int8 pairs (400 points = 800 bytes a song), plenty for a drawing."""


class LibraryWriteError(MusicGenError):
    """A choice (favourite, note, keep) could not be written: the journal file is locked, full or read-only."""


def prompt_of(payload: dict[str, Any]) -> str | None:
    parts = [str(payload[k]) for k in ("prompt", "gpt_description_prompt", "description") if payload.get(k)]
    return " ".join(parts) or None


def pack_peaks(peaks: Any) -> bytes:
    import numpy as np

    values = np.clip(np.asarray(peaks, dtype=np.float32), -1.0, 1.0)
    return (np.round(values * PEAK_SCALE)).astype(np.int8).tobytes()


def unpack_peaks(blob: bytes | None) -> list[list[float]]:
    if not blob:
        return []
    import numpy as np

    values = np.frombuffer(blob, dtype=np.int8).astype(np.float32) / PEAK_SCALE
    return values.reshape(-1, 2).round(3).tolist()


class LibraryStore(SharedStore, SongQueries, SongMeasures):
    """Reads and writes of the library tables; one connection, shared by threads behind a lock."""

    def __init__(self, journal_path: str | Path) -> None:
        self.path = Path(journal_path)
        try:
            self._shared: Shared | None = acquire(self.path, owner=self)
        except sqlite3.OperationalError as exc:  # first open while another kernel holds the file
            raise LibraryWriteError(
                f"The library's tables cannot be made in {self.path} now ({exc}). Try again in a moment."
            ) from None
        self.lock = self._shared.lock
        self._waits: float | None = None
        """Seconds this store's writes wait for another process's lock (None: the journal's default)."""
        try:
            self._ready = self._prepare()
        except BaseException:
            self.close()
            raise

    def _prepare(self) -> bool:
        """Bring the schema up to date; False if the file cannot be written now (read-only, or another kernel
        holds it): a journal of this version still opens to read, as the journal does, and the next write tries
        again. An older one cannot be read (the library's queries need the tables the upgrade makes): one line
        says why and what to do, the file unchanged."""
        try:
            with self.lock:
                migrate(self.db, self.path)
        except sqlite3.OperationalError as exc:
            if version_of(self.db) >= LATEST:
                return False
            self.close()
            what = (
                "Try again in a moment"
                if "locked" in str(exc) or "busy" in str(exc)
                else "Make it writable, or copy it somewhere writable and point MUSICGEN_JOURNAL at the copy"
            )
            raise LibraryWriteError(
                f"The library cannot read {self.path}: it was written by an older version of ipymusicgen and must "
                f"be upgraded first, which cannot be done now ({exc}); the file was left unchanged. {what}."
            ) from None
        return True

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with damage_named(self.path):
            if self._shared is None:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            with self.lock:  # the file's connection is shared: its wait and its transaction, under its one lock
                self._shared.use_timeout(busy_timeout_or_default(self._waits))
                if not self._ready:
                    migrate(self.db, self.path)  # raises what keeps the file from being written
                    self._ready = True
                with write_transaction(self.db, self.lock) as db:
                    yield db

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        with self.lock, damage_named(self.path):
            cursor = self.db.cursor()
            cursor.row_factory = None  # tuples zipped with the names: a third of dict(sqlite3.Row)'s cost (figure 11)
            cursor.execute(sql, tuple(params))
            names = [column[0] for column in cursor.description or ()]
            found = cursor.fetchall()
        if len(set(names)) == len(names):
            return [dict(zip(names, row, strict=True)) for row in found]
        first = [i for i, name in enumerate(names) if names.index(name) == i]  # as a sqlite3.Row lookup: the first
        return [{names[i]: row[i] for i in first} for row in found]

    # -- indexing ------------------------------------------------------------------------------------

    def index_records(self, records: Iterable[Any]) -> None:
        """Index records as they arrive: lyrics and duration from the record, the rest from the journal."""
        rows = [
            (r.id, _bounded(getattr(r, "lyrics", None)), getattr(r, "duration_seconds", None), r.title, r.style)
            for r in records
        ]
        rows = [row for row in rows if self._would_change(*row)]  # a poll that tells nothing new writes nothing
        if not rows:
            return
        with self.write() as db:
            for task_id, lyrics, duration, title, style in rows:
                self._ensure_row(db, task_id)
                db.execute(
                    "UPDATE library_songs SET lyrics = COALESCE(NULLIF(?, ''), lyrics),"  # '' never erases
                    " duration_s = COALESCE(?, duration_s) WHERE id = ?",
                    (lyrics, duration, task_id),
                )
                self._reindex(db, task_id, title, style)

    def _would_change(
        self, task_id: str, lyrics: str | None, duration: float | None, title: str | None, style: str | None
    ) -> bool:
        """Whether indexing this record changes its library row or search text (the rules of `index_records`)."""
        try:
            found = self._rows(
                "SELECT l.lyrics, l.duration_s, l.prompt, t.title AS t_title, t.style AS t_style, f.rowid AS f_rowid,"
                " f.title AS f_title, f.style AS f_style, f.lyrics AS f_lyrics, f.prompt AS f_prompt"
                " FROM library_songs l JOIN tasks t ON t.id = l.id LEFT JOIN library_fts f ON f.rowid = t.rowid"
                " WHERE l.id = ?",
                (task_id,),
            )
        except sqlite3.OperationalError:  # not indexed yet (tables still to be made): the write says what is wrong
            return True
        if not found:
            return True
        row = found[0]
        kept_lyrics = lyrics if lyrics else row["lyrics"]
        if kept_lyrics != row["lyrics"] or (duration is not None and duration != row["duration_s"]):
            return True
        searched = (title or row["t_title"], style or row["t_style"], kept_lyrics, row["prompt"])
        return row["f_rowid"] is None or searched != (row["f_title"], row["f_style"], row["f_lyrics"], row["f_prompt"])

    def sync(self) -> int:
        """Give every journalled task not yet in the library its row and search text; returns how many."""
        with self.lock:
            missing = [
                r["id"]
                for r in self.db.execute(
                    "SELECT t.id FROM tasks t LEFT JOIN library_songs l ON l.id = t.id WHERE l.id IS NULL"
                ).fetchall()
            ]
        for start in range(0, len(missing), 500):
            with self.write() as db:
                for task_id in missing[start : start + 500]:
                    self._ensure_row(db, task_id)
                    self._reindex(db, task_id, None, None)
        return len(missing)

    def _ensure_row(self, db: sqlite3.Connection, task_id: str) -> None:
        if db.execute("SELECT 1 FROM library_songs WHERE id = ?", (task_id,)).fetchone():
            return
        found = db.execute(
            "SELECT a.payload FROM tasks t JOIN attempts a ON a.id = t.attempt_id WHERE t.id = ?", (task_id,)
        ).fetchone()
        payload = _payload(found["payload"]) if found else {}
        parent = payload.get("continue_song_id") or None
        if parent:
            owner = db.execute("SELECT id FROM tasks WHERE id = ? OR song_id = ? LIMIT 1", (parent, parent)).fetchone()
            parent = owner["id"] if owner else str(parent)
        db.execute(
            "INSERT INTO library_songs (id, lyrics, prompt, model, action, batch, parent_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                task_id,
                _bounded(payload.get("lyrics")),
                _bounded(prompt_of(payload)),
                model_of(payload),
                payload.get("action") or ("v2" if "model" in payload else None),
                payload.get("batch") or _batch_of(db, task_id),
                parent,
            ),
        )

    def _reindex(self, db: sqlite3.Connection, task_id: str, title: str | None, style: str | None) -> None:
        row = db.execute(
            "SELECT t.title, t.style, l.lyrics, l.prompt FROM library_songs l LEFT JOIN tasks t ON t.id = l.id"
            " WHERE l.id = ?",
            (task_id,),
        ).fetchone()
        order = db.execute("SELECT rowid FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if order is None:
            return
        # the search row shares the task's rowid (journal order = newest last), so a search pages newest
        # first straight from the full-text index and stops at the page: no sort over every match
        db.execute("DELETE FROM library_fts WHERE rowid = ?", (order[0],))
        db.execute(
            "INSERT INTO library_fts (rowid, id, title, style, lyrics, prompt) VALUES (?, ?, ?, ?, ?, ?)",
            (order[0], task_id, title or row["title"], style or row["style"], row["lyrics"], row["prompt"]),
        )

    # -- user choices --------------------------------------------------------------------------------

    def set_field(self, task_id: str, column: str, value: Any) -> None:
        if column not in {"favourite", "kept", "note"}:
            raise ValueError(column)
        try:
            with self.write() as db:
                if not db.execute("SELECT 1 FROM tasks WHERE id = ?", (task_id,)).fetchone():
                    raise KeyError(task_id)
                self._ensure_row(db, task_id)
                db.execute(f"UPDATE library_songs SET {column} = ? WHERE id = ?", (value, task_id))
        except sqlite3.OperationalError as exc:  # another kernel holding the file, a full disk: say so, plainly
            raise LibraryWriteError(
                f"The {column} of {task_id} was not saved: the journal {self.path} cannot be written now ({exc}). "
                "Try again in a moment."
            ) from None

    def rate(self, task_id: str, stars: int | None) -> None:
        """A song's stars (None removes them)."""
        try:
            with self.write() as db:
                if not db.execute("SELECT 1 FROM tasks WHERE id = ?", (task_id,)).fetchone():
                    raise KeyError(task_id)
                if stars is None:
                    db.execute("DELETE FROM ratings WHERE id = ?", (task_id,))
                else:
                    db.execute(
                        "INSERT INTO ratings (id, stars, rated_at) VALUES (?, ?, ?) ON CONFLICT(id) DO UPDATE"
                        " SET stars = excluded.stars, rated_at = excluded.rated_at",
                        (task_id, stars, time.time()),
                    )
        except sqlite3.OperationalError as exc:
            raise LibraryWriteError(
                f"The rating of {task_id} was not saved: the journal {self.path} cannot be written now ({exc})."
            ) from None

    @contextmanager
    def _waiting(self, seconds: float | None) -> Iterator[None]:
        """Writes within wait `seconds` (not the journal's full wait) for another kernel's lock."""
        if seconds is None:
            yield
            return
        with self.lock:
            before, self._waits = self._waits, seconds
            try:
                yield
            finally:
                self._waits = before

    def vote(self, winner: str, loser: str, *, blind: bool, wait: float | None = None, outcome: str = "win") -> None:
        """One pairwise vote: `winner` was preferred to `loser` (outcome "win"), or the two songs tied or were both
        bad ("tie", "both_bad"); `wait`: seconds to wait for another kernel's write (a button's vote waits
        briefly), else the journal's own wait."""
        if outcome not in ("win", "tie", "both_bad"):
            raise ValueError(f"a stored vote's outcome is win, tie or both_bad (got {outcome!r})")
        try:
            with self._waiting(wait), self.write() as db:
                for task_id in (winner, loser):
                    if not db.execute("SELECT 1 FROM tasks WHERE id = ?", (task_id,)).fetchone():
                        raise KeyError(task_id)
                db.execute(
                    "INSERT INTO comparisons (winner, loser, blind, voted_at, outcome) VALUES (?, ?, ?, ?, ?)",
                    (winner, loser, 1 if blind else 0, time.time(), outcome),
                )
        except sqlite3.OperationalError as exc:
            raise LibraryWriteError(
                f"The vote was not saved: the journal {self.path} cannot be written now ({exc})."
            ) from None

    # -- the archive ---------------------------------------------------------------------------------

    def archived(
        self,
        task_id: str,
        path: Path,
        size: int,
        peaks: Any,
        *,
        cover: Path | None = None,
        wav: Path | None = None,
        note: str | None = None,
    ) -> None:
        """A song kept on disk; `note` says why it has no waveform (kept as its archive note, never retried)."""
        with self.write() as db:
            self._ensure_row(db, task_id)
            db.execute(
                "UPDATE library_songs SET archive_path = ?, archive_size = ?, peaks = ?, cover_path = COALESCE(?,"
                " cover_path), wav_path = COALESCE(?, wav_path), archive_error = ?, archived_at = ?,"
                " archive_tries = archive_tries + 1 WHERE id = ?",
                (
                    str(path),
                    size,
                    pack_peaks(peaks) if peaks is not None else None,
                    str(cover) if cover else None,
                    str(wav) if wav else None,
                    note[:2000] if note else None,
                    time.time(),
                    task_id,
                ),
            )

    def archive_failed(self, task_id: str, error: str) -> None:
        with self.write() as db:
            self._ensure_row(db, task_id)
            db.execute(
                "UPDATE library_songs SET archive_error = ?, archive_tries = archive_tries + 1 WHERE id = ?",
                (error[:2000], task_id),
            )

    def wav_archived(self, task_id: str, path: Path) -> None:
        with self.write() as db:
            self._ensure_row(db, task_id)
            db.execute("UPDATE library_songs SET wav_path = ? WHERE id = ?", (str(path), task_id))

    ANALYSIS_COLUMNS = ("bpm", "musical_key", "lufs", "true_peak_db", "silence_start_s", "silence_end_s")

    def analysed(self, task_id: str, measures: dict[str, Any]) -> None:
        """A song's measures (`lab.analysis.Analysis`: bpm, key, lufs, ...), kept as filterable columns."""
        values = {
            column: measures.get("key" if column == "musical_key" else column) for column in self.ANALYSIS_COLUMNS
        }
        with self.write() as db:
            self._ensure_row(db, task_id)
            assignments = ", ".join(f"{column} = ?" for column in values)
            db.execute(
                f"UPDATE library_songs SET {assignments}, analysed_at = ?, analysis_error = NULL WHERE id = ?",
                (*values.values(), time.time(), task_id),
            )

    def analysis_failed(self, task_id: str, error: str) -> None:
        """The song could not be measured: its error is kept and its old measures cleared (never stale)."""
        with self.write() as db:
            self._ensure_row(db, task_id)
            cleared = ", ".join(f"{column} = NULL" for column in self.ANALYSIS_COLUMNS)
            db.execute(
                f"UPDATE library_songs SET {cleared}, analysis_error = ?, analysed_at = ? WHERE id = ?",
                (error[:2000], time.time(), task_id),
            )

    def to_archive(self, hosts: Iterable[str] | None = None) -> list[str]:
        """Complete songs not archived yet (never tried, or failed before): the retry list."""
        sql = (
            "SELECT t.id FROM tasks t LEFT JOIN library_songs l ON l.id = t.id WHERE t.state = 'complete'"
            " AND t.audio_url IS NOT NULL AND (l.archive_path IS NULL)"
        )
        wanted = {service_address(h) for h in hosts or ()}
        found = self._rows(sql.replace("SELECT t.id", "SELECT t.id, t.host") + " ORDER BY t.created_at")
        return [r["id"] for r in found if not wanted or service_address(r["host"]) in wanted]  # however spelled


def _batch_of(db: sqlite3.Connection, task_id: str) -> str | None:
    """The batch (batch engine's `batch_rows`, when that table exists) whose row created this task."""
    try:
        row = db.execute(
            "SELECT b.batch FROM batch_rows b, json_each(b.ids) j WHERE j.value = ? LIMIT 1", (task_id,)
        ).fetchone()
    except sqlite3.OperationalError:  # no batch table in this journal
        return None
    return row["batch"] if row else None


def _payload(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _bounded(text: Any) -> str | None:
    return str(text)[:TEXT_LIMIT] if text else None

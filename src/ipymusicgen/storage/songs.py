"""The library's reads over the journal's file: songs, search, takes, lineage, votes and spend, as named queries.

Every statement the library, the archive and the agent desk need lives here (`LibraryStore` has these methods),
so the layers above write no SQL. Rows come back as plain dicts keyed by column name. Two rules have their one
home here: what a song's lyrics are (`SONG_LYRICS`) and which model a request used (`request_model`, the
`models.costs.model_of` rule registered as an SQL function on the connection).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypedDict, cast

from ..models.costs import model_of
from ..models.providers import MUSICFUL, SYNCHRONOUS

Row = dict[str, Any]


class SongRow(TypedDict):
    """One song as the library reads it: its task, its library row, its stars and its take."""

    id: str
    attempt_id: str | None
    state: str
    title: str | None
    style: str | None
    created_at: float
    audio_url: str | None
    cover_url: str | None
    song_id: str | None
    fail_reason: str | None
    lyrics: str | None
    prompt: str | None
    model: str | None
    action: str | None
    batch: str | None
    duration_s: float | None
    parent_id: str | None
    favourite: int | None
    kept: int | None
    note: str | None
    archive_path: str | None
    archive_size: int | None
    wav_path: str | None
    cover_path: str | None
    archive_error: str | None
    peaks: bytes | None
    stars: int | None
    bpm: float | None
    musical_key: str | None
    lufs: float | None
    true_peak_db: float | None
    silence_start_s: float | None
    silence_end_s: float | None
    analysis_error: str | None
    asked_seconds: float | None
    take: int


class ArchiveSourceRow(TypedDict):
    """What the archive writes of a song, with the request (JSON) that made it."""

    id: str
    title: str | None
    style: str | None
    audio_url: str | None
    cover_url: str | None
    created_at: float
    lyrics: str | None
    model: str | None
    action: str | None
    archive_path: str | None
    version: int
    archive_tries: int | None
    duration_s: float | None
    payload: str | None


class VoteRow(TypedDict):
    winner: str
    loser: str
    blind: int
    voted_at: float
    outcome: str
    winner_title: str | None
    loser_title: str | None


class NodeRow(TypedDict):
    title: str | None
    state: str
    action: str | None


class SpendRow(TypedDict):
    """Paid calls of one group (`k`: a day, model or batch) on one model (`m`)."""

    k: str
    m: str | None
    p: str
    calls: int
    songs: int | None
    first: float


class RunRow(TypedDict):
    """One batch run as spend measures it."""

    batch: str
    started_at: float
    finished_at: float | None
    counts_before: int | None
    counts_after: int | None
    calls: int
    day: str
    paid_in_window: int
    models: str | None


PAID_OUTCOMES = ("submitted", "unknown")
"""Attempts that may have cost credits (rejected ones did not; pending ones are being sent)."""
SONG_LYRICS = "COALESCE(l.lyrics, t.lyrics)"
"""A song's lyrics: what the library kept (the request's, or a record's), else what the service answered."""
ORDERS = ("newest", "rating")
PROVIDER = (
    "CASE "
    + " ".join(f"WHEN substr(t.id, 1, {len(p) + 1}) = '{p}-' THEN '{p}'" for p in SYNCHRONOUS)
    + f" ELSE '{MUSICFUL}' END"
)
"""A song's provider, as SQL: an engine's song has a task id of the project's making that starts with its
provider (`client/engine_calls.py`); every other song is the service's."""
GROUP_COLUMNS = MappingProxyType({
    "provider": PROVIDER, "model": "l.model", "style": "t.style", "batch": "l.batch", "song": "t.id",
})  # fmt: skip
SPEND_KEYS = MappingProxyType(
    {
        "day": "date(a.created_at, 'unixepoch', 'localtime')",
        "model": "COALESCE(request_model(a.payload), '(default)')",
        "batch": "COALESCE((SELECT l.batch FROM tasks t JOIN library_songs l ON l.id = t.id"
        " WHERE t.attempt_id = a.id LIMIT 1), '(none)')",
    }
)

_SELECT = f"""
SELECT t.id, t.attempt_id, t.state, t.title, t.style, t.created_at, t.audio_url, t.cover_url, t.song_id,
       t.fail_reason, {SONG_LYRICS} AS lyrics, l.prompt, l.model, l.action, l.batch, l.duration_s, l.parent_id,
       l.favourite, l.kept, l.note, l.archive_path, l.archive_size, l.wav_path, l.cover_path, l.archive_error,
       l.peaks, (SELECT r.stars FROM ratings r WHERE r.id = t.id) AS stars, l.bpm, l.musical_key, l.lufs,
       l.true_peak_db, l.silence_start_s, l.silence_end_s, l.analysis_error,
       (SELECT request_seconds(a.payload) FROM attempts a WHERE a.id = t.attempt_id) AS asked_seconds,
       (SELECT COUNT(*) FROM tasks t2 WHERE t2.attempt_id = t.attempt_id AND t2.rowid < t.rowid) + 1 AS take
FROM tasks t LEFT JOIN library_songs l ON l.id = t.id
"""
_SELECT_TEXT = _SELECT.replace(
    "FROM tasks t LEFT JOIN", "FROM library_fts JOIN tasks t ON t.rowid = library_fts.rowid LEFT JOIN"
)


def request_model(payload: str | None) -> str | None:
    """The model a journalled request (its JSON) used: `models.costs.model_of`, as SQL calls it."""
    try:
        value = json.loads(payload or "{}")
    except ValueError:
        return None
    return model_of(value) if isinstance(value, dict) else None


LONGEST_ASKED_S = 86_400.0
"""A length asked beyond a day is no length any engine takes (a damaged or forged journal row): none."""


def request_seconds(payload: str | None) -> float | None:
    """The length in seconds a journalled request asked for (an engine call's `seconds`, `--seconds 90`), or None
    when it named none or what it holds is no length (a string, a flag, NaN, zero, negative, beyond a day)."""
    try:
        value = json.loads(payload or "{}")
    except ValueError:
        return None
    seconds = value.get("seconds") if isinstance(value, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    return float(seconds) if 0 < seconds <= LONGEST_ASKED_S else None  # NaN fails both comparisons


def add_functions(db: sqlite3.Connection) -> None:
    """The Python rules SQL statements call (`request_model`, `request_seconds`), on a connection."""
    db.create_function("request_model", 1, request_model, deterministic=True)
    db.create_function("request_seconds", 1, request_seconds, deterministic=True)


@dataclass(frozen=True)
class SongFilter:
    """Which songs a library query keeps; the values are checked and normalised by the caller."""

    match: str | None = None
    """A full-text query (FTS5 syntax); `nothing` when the user's text has no word to search."""
    nothing: bool = False
    state: str | None = None
    favourite: bool | None = None
    since: float | None = None
    model: str | None = None
    batch: str | None = None
    bpm: tuple[float | None, float | None] | None = None
    key: str | None = None
    lufs: tuple[float | None, float | None] | None = None

    def where(self) -> tuple[str, list[Any]]:
        clauses, params = ["1=1"], []
        for column, bounds in (("l.bpm", self.bpm), ("l.lufs", self.lufs)):
            for op, end in zip((">=", "<="), bounds or (None, None), strict=True):
                if end is not None:
                    clauses.append(f"{column} {op} ?")
                    params.append(end)
        if self.key:
            clauses.append("LOWER(l.musical_key) = LOWER(?)")
            params.append(self.key)
        if self.nothing:
            clauses.append("0")
        if self.match:
            clauses.append("library_fts MATCH ?")
            params.append(self.match)
        for clause, value in (("t.state = ?", self.state), ("l.model = ?", self.model), ("l.batch = ?", self.batch)):
            if value:
                clauses.append(clause)
                params.append(value)
        if self.favourite is not None:
            clauses.append("COALESCE(l.favourite, 0) = ?")
            params.append(1 if self.favourite else 0)
        if self.since is not None:
            clauses.append("t.created_at >= ?")
            params.append(self.since)
        return " AND ".join(clauses), params

    @property
    def text(self) -> bool:
        return self.match is not None

    @property
    def needs_library(self) -> bool:
        return (
            self.favourite is not None
            or bool(self.model or self.batch or self.key)
            or self.bpm is not None
            or self.lufs is not None
        )


class SongQueries:
    """The library's named reads; mixed into `LibraryStore`, which gives `_rows`."""

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        raise NotImplementedError

    def _typed(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        """Rows a method's own return type names (a TypedDict of the statement's columns)."""
        return self._rows(sql, params)

    def song_count(self) -> int:
        return int(self._rows("SELECT COUNT(*) AS n FROM tasks")[0]["n"])

    def songs(self, where: SongFilter, *, order: str = "newest", limit: int, offset: int) -> list[SongRow]:
        """A page of songs newest first (journal order), or best rated first."""
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")
        clauses, params = where.where()
        rowid = "library_fts.rowid" if where.text else "t.rowid"
        by = f"{rowid} DESC" if order == "newest" else f"COALESCE(stars, 0) DESC, {rowid} DESC"
        select = _SELECT_TEXT if where.text else _SELECT  # newest first straight from the full-text index
        rows = self._rows(f"{select} WHERE {clauses} ORDER BY {by} LIMIT ? OFFSET ?", [*params, limit, offset])
        return cast(list[SongRow], rows)

    def count(self, where: SongFilter) -> int:
        clauses, params = where.where()
        if where.text and clauses == "1=1 AND library_fts MATCH ?":  # text alone: the index counts by itself
            return int(self._rows("SELECT COUNT(*) AS n FROM library_fts WHERE library_fts MATCH ?", params)[0]["n"])
        joins = "library_fts JOIN tasks t ON t.rowid = library_fts.rowid" if where.text else "tasks t"
        if where.needs_library:
            joins += " LEFT JOIN library_songs l ON l.id = t.id"
        return int(self._rows(f"SELECT COUNT(*) AS n FROM {joins} WHERE {clauses}", params)[0]["n"])

    def song(self, task_id: str) -> SongRow | None:
        rows = self._rows(f"{_SELECT} WHERE t.id = ?", (task_id,))
        return cast(SongRow, rows[0]) if rows else None

    def takes(self, task_id: str) -> list[SongRow]:
        """Every song the same paid call made, in take order."""
        return self._typed(
            f"{_SELECT} WHERE t.attempt_id = (SELECT attempt_id FROM tasks WHERE id = ?) ORDER BY t.rowid", (task_id,)
        )

    def failed_archives(self) -> list[SongRow]:
        rows = self._rows(f"{_SELECT} WHERE l.archive_error IS NOT NULL AND l.archive_path IS NULL")
        return cast(list[SongRow], rows)

    def archive_path(self, task_id: str) -> str | None:
        rows = self._rows("SELECT archive_path FROM library_songs WHERE id = ?", (task_id,))
        return rows[0]["archive_path"] if rows else None

    def stored_peaks(self, task_id: str) -> tuple[bytes | None, str | None] | None:
        """An archived song's packed peaks and its archive note, or None when the library has no row."""
        rows = self._rows("SELECT peaks, archive_error FROM library_songs WHERE id = ?", (task_id,))
        return (rows[0]["peaks"], rows[0]["archive_error"]) if rows else None

    def service_song_id(self, task_id: str) -> str | None:
        """The `song_id` the service gave a task (what its extras take), if the journal knows one."""
        rows = self._rows("SELECT song_id FROM tasks WHERE id = ?", (task_id,))
        return rows[0]["song_id"] if rows and rows[0]["song_id"] else None

    def archive_source(self, task_id: str) -> ArchiveSourceRow | None:
        """What the archive writes of a song (its tags, file name, sidecar), with the request that made it."""
        rows = self._rows(
            f"SELECT t.id, t.title, t.style, t.audio_url, t.cover_url, t.created_at, {SONG_LYRICS} AS lyrics,"
            " l.model, l.action, l.archive_path, t.version, l.archive_tries, l.duration_s, a.payload"
            " FROM tasks t LEFT JOIN library_songs l ON l.id = t.id"
            " LEFT JOIN attempts a ON a.id = t.attempt_id WHERE t.id = ?",
            (task_id,),
        )
        return cast(ArchiveSourceRow, rows[0]) if rows else None

    def models(self) -> list[str]:
        rows = self._rows("SELECT DISTINCT model FROM library_songs WHERE model IS NOT NULL ORDER BY model")
        return [r["model"] for r in rows]

    def batch_names(self) -> list[str]:
        rows = self._rows("SELECT DISTINCT batch FROM library_songs WHERE batch IS NOT NULL ORDER BY batch")
        return [r["batch"] for r in rows]

    def comparisons(self, *, blind: bool | None = None) -> list[VoteRow]:
        """Every vote, oldest first, with both songs' titles."""
        sql = (
            "SELECT c.winner, c.loser, c.blind, c.voted_at, c.outcome, w.title AS winner_title,"
            " l.title AS loser_title"
            " FROM comparisons c LEFT JOIN tasks w ON w.id = c.winner LEFT JOIN tasks l ON l.id = c.loser"
        )
        params: list[Any] = []
        if blind is not None:
            sql += " WHERE c.blind = ?"
            params.append(1 if blind else 0)
        return cast(list[VoteRow], self._rows(sql + " ORDER BY c.voted_at, c.id", params))

    def groups(self, ids: Sequence[str], by: str) -> dict[str, str | None]:
        """Each song's model, style, batch or id (what a leaderboard ranks)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._rows(
            f"SELECT t.id, {GROUP_COLUMNS[by]} AS g FROM tasks t LEFT JOIN library_songs l ON l.id = t.id"
            f" WHERE t.id IN ({marks})",
            ids,
        )
        return {r["id"]: r["g"] for r in rows}

    def song_prices(self, ids: Sequence[str]) -> dict[str, tuple[str | None, int]]:
        """Each song's paid call, as the price table reads it: the model the request named, and how many songs the
        call made (its price is shared among them). Songs of no journalled call are left out."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._rows(
            "SELECT t.id, request_model(a.payload) AS m,"
            " (SELECT COUNT(*) FROM tasks o WHERE o.attempt_id = t.attempt_id) AS takes"
            f" FROM tasks t JOIN attempts a ON a.id = t.attempt_id WHERE t.id IN ({marks})",
            ids,
        )
        return {r["id"]: (r["m"], int(r["takes"] or 1)) for r in rows}

    def song_dollars(self, ids: Sequence[str]) -> dict[str, tuple[str | None, int]]:
        """Each engine song's paid call as journalled: its dollar price as written (checked by the reader) and how
        many songs the call made. Songs of no journalled call are left out."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._rows(
            "SELECT t.id, CASE WHEN json_valid(a.payload) THEN json_extract(a.payload, '$.estimate_usd') END AS usd,"
            " (SELECT COUNT(*) FROM tasks o WHERE o.attempt_id = t.attempt_id) AS takes"
            f" FROM tasks t JOIN attempts a ON a.id = t.attempt_id WHERE t.id IN ({marks})",
            ids,
        )
        return {r["id"]: (None if r["usd"] is None else str(r["usd"]), int(r["takes"] or 1)) for r in rows}

    def parent(self, task_id: str) -> str | None:
        rows = self._rows("SELECT parent_id FROM library_songs WHERE id = ?", (task_id,))
        return rows[0]["parent_id"] if rows else None

    def node(self, task_id: str) -> NodeRow | None:
        """A song's title, state and action, as its lineage shows it."""
        rows = self._rows(
            "SELECT t.title, t.state, l.action FROM tasks t LEFT JOIN library_songs l ON l.id = t.id WHERE t.id = ?",
            (task_id,),
        )
        return cast(NodeRow, rows[0]) if rows else None

    def children(self, task_id: str) -> list[str]:
        rows = self._rows(
            "SELECT l.id FROM library_songs l LEFT JOIN tasks t ON t.id = l.id WHERE l.parent_id = ?"
            " ORDER BY t.created_at, l.id",
            (task_id,),
        )
        return [r["id"] for r in rows]

    def spend(self, by: str) -> list[SpendRow]:
        """Paid calls grouped by day, model or batch (`k`), model (`m`) and provider (`p`): calls, complete songs, first
        call."""
        return self._typed(  # grouped in SQLite (one pass), priced by the caller
            f"SELECT {SPEND_KEYS[by]} AS k, request_model(a.payload) AS m, COALESCE(a.provider, '{MUSICFUL}') AS p,"
            " COUNT(*) AS calls,"
            " SUM((SELECT COUNT(*) FROM tasks t WHERE t.attempt_id = a.id AND t.state = 'complete')) AS songs,"
            f" MIN(a.created_at) AS first FROM attempts a WHERE a.outcome IN {PAID_OUTCOMES}"
            " AND a.endpoint NOT LIKE '%lyric%' GROUP BY k, m, p ORDER BY first"
        )

    def batch_runs(self) -> list[RunRow]:
        """Every batch run that called or has not ended: its counts, its day, the paid calls inside its window
        and the models of its sent rows (comma-separated)."""
        return self._typed(
            "SELECT r.batch, r.started_at, r.finished_at, r.counts_before, r.counts_after, r.calls,"
            " date(r.started_at, 'unixepoch', 'localtime') AS day,"
            " (SELECT COUNT(*) FROM attempts a WHERE a.created_at BETWEEN r.started_at AND r.finished_at"
            f"   AND a.outcome IN {PAID_OUTCOMES} AND a.endpoint NOT LIKE '%lyric%') AS paid_in_window,"
            " (SELECT group_concat(DISTINCT COALESCE(request_model(b.request), '(default)')) FROM batch_rows b"
            "   WHERE b.batch = r.batch AND b.state NOT IN ('pending', 'rejected', 'skipped')) AS models"
            " FROM batch_runs r WHERE r.calls > 0 OR r.finished_at IS NULL ORDER BY r.started_at"
        )

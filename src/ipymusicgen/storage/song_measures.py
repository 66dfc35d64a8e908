"""Every measure of a song's analysis, kept whole in the journal, so a second `analyze()` of the same unchanged
file reads its measures back instead of measuring again.

`library_songs` keeps the filterable few (bpm, key, lufs, ...: `LibraryStore.analysed`); this table keeps all of
them (tempo confidence, half and double, key confidence and runner-up, loudness range, maximum momentary and
short-term loudness, the lossy-source verdict and which file it was made on, ...) as one JSON object, with the
file they were taken from (path, size, modification time) and the version of the analysis that took them. A
kept row counts only for the same file, unchanged, and the same version: a new take, a file rewritten in place
or a newer analysis measures again. A failed analysis forgets the row (old numbers never stand).

Table made by journal migration m016 (`create_tables`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MEASURES_LIMIT = 20_000
"""Characters of JSON a song's measures may take (they take under 1,000): a bigger object is not kept."""


def create_tables(db: Any) -> None:
    """The table of migration m016 (a no-op when it is there)."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS song_measures (
            song TEXT PRIMARY KEY,
            measures TEXT NOT NULL,
            path TEXT,
            size INTEGER,
            mtime_ns INTEGER,
            version INTEGER NOT NULL,
            measured_at REAL NOT NULL
        )"""
    )


@dataclass(frozen=True)
class Source:
    """The file measures were taken from, as the file system tells it (a rewrite changes size or time)."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str | Path) -> Source | None:
        try:
            found = os.stat(path)
        except (OSError, ValueError):
            return None
        return cls(str(Path(path).resolve()), int(found.st_size), int(found.st_mtime_ns))


def _finite(value: Any) -> Any:
    """The measures with every NaN or infinity as None (JSON has neither; a measure that is not a number is none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(key): _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


class SongMeasures:
    """The `song_measures` queries, mixed into `LibraryStore` (they use its `write()` and `_rows()`)."""

    write: Any
    _rows: Any

    def keep_measures(self, task_id: str, measures: dict[str, Any], source: Source | None, version: int) -> None:
        """Keep a song's measures whole, with the file and the analysis version they belong to."""
        text = json.dumps(_finite(measures), allow_nan=False, default=str)
        if len(text) > MEASURES_LIMIT:
            return
        with self.write() as db:
            db.execute(
                "INSERT INTO song_measures (song, measures, path, size, mtime_ns, version, measured_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(song) DO UPDATE SET measures = excluded.measures,"
                " path = excluded.path, size = excluded.size, mtime_ns = excluded.mtime_ns,"
                " version = excluded.version, measured_at = excluded.measured_at",
                (
                    task_id,
                    text,
                    source.path if source else None,
                    source.size if source else None,
                    source.mtime_ns if source else None,
                    int(version),
                    time.time(),
                ),
            )

    def kept_measures(self, task_id: str, source: Source | None, version: int) -> dict[str, Any] | None:
        """The song's kept measures if they were taken from this very file, unchanged, by this analysis version;
        None otherwise (then it is measured again)."""
        if source is None:
            return None
        rows = self._rows(
            "SELECT measures FROM song_measures WHERE song = ? AND path = ? AND size = ? AND mtime_ns = ?"
            " AND version = ?",
            (task_id, source.path, source.size, source.mtime_ns, int(version)),
        )
        return _parsed(rows[0]["measures"]) if rows else None

    def measures_of(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The kept measures of these songs (whatever file or version: what a card shows), by song id."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            for row in self._rows(f"SELECT song, measures FROM song_measures WHERE song IN ({marks})", chunk):
                parsed = _parsed(row["measures"])
                if parsed is not None:
                    found[row["song"]] = parsed
        return found

    def forget_measures(self, task_id: str) -> None:
        with self.write() as db:
            db.execute("DELETE FROM song_measures WHERE song = ?", (task_id,))


def _parsed(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

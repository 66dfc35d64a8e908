"""Every measure of a song's analysis, kept whole in the journal, so a second `analyze()` of the same unchanged
file reads its measures back instead of measuring again.

`library_songs` keeps the filterable few (bpm, key, lufs, ...: `LibraryStore.analysed`); this table keeps all of
them (tempo confidence, half and double, key confidence and runner-up, loudness range, maximum momentary and
short-term loudness, the lossy-source verdict and which file it was made on, ...) as one JSON object, with the
file they were taken from (path, size, modification time; its change time and a digest of a sample of its
content in the JSON) and the version of the analysis that took them. A
kept row counts only for the same file, unchanged, and the same version: a new take, a file rewritten in place
or a newer analysis measures again. A failed analysis forgets the row (old numbers never stand).

Table made by journal migration m016 (`create_tables`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE_KEY = "_source"
"""Where a kept row holds its file's change time and content digest (`Source.identity`)."""
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


SAMPLES = 16
SAMPLE_BYTES = 4096
"""The content digest reads 16 stretches of 4 KiB spread evenly over the file, the first and the last among them."""


@dataclass(frozen=True)
class Source:
    """The file measures were taken from. Size and modification time alone are no identity (another song of the
    same length copied with its times kept, `touch -r`, reads the same), so it also holds the inode's change time
    (set by the system on every write, rename or `utime`, and not settable back) and a digest of a cheap sample
    of the content (the same bytes at the same places)."""

    path: str
    size: int
    mtime_ns: int
    ctime_ns: int = 0
    digest: str = ""

    @classmethod
    def of(cls, path: str | Path) -> Source | None:
        try:
            found = os.stat(path)
            if not stat.S_ISREG(found.st_mode):  # a pipe would block open(), a folder is no song
                return None
            digest = _sampled_digest(path, int(found.st_size))
        except (OSError, ValueError):
            return None
        return cls(
            str(Path(path).resolve()), int(found.st_size), int(found.st_mtime_ns), int(found.st_ctime_ns), digest
        )

    @property
    def identity(self) -> list[Any]:
        """What a kept row must match besides path, size and modification time."""
        return [self.ctime_ns, self.digest]


def _sampled_digest(path: str | Path, size: int) -> str:
    """BLAKE2b of `SAMPLES` stretches of the file at evenly spaced offsets (all of it when it is small)."""
    hasher = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        if size <= SAMPLES * SAMPLE_BYTES:
            hasher.update(handle.read(size))
        else:
            for index in range(SAMPLES):
                handle.seek((size - SAMPLE_BYTES) * index // (SAMPLES - 1))
                hasher.update(handle.read(SAMPLE_BYTES))
    return hasher.hexdigest()


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
        kept = {**measures, SOURCE_KEY: source.identity} if source else measures
        text = json.dumps(_finite(kept), allow_nan=False, default=str)
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
        found = _parsed(rows[0]["measures"]) if rows else None
        if found is None or found.pop(SOURCE_KEY, None) != source.identity:
            return None
        return found

    def measures_of(self, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The kept measures of these songs (whatever file or version: what a card shows), by song id."""
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            for row in self._rows(f"SELECT song, measures FROM song_measures WHERE song IN ({marks})", chunk):
                parsed = _parsed(row["measures"])
                if parsed is not None:
                    parsed.pop(SOURCE_KEY, None)
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

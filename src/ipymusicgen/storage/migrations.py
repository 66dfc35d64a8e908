"""The journal file's schema as numbered steps, applied once each, in order, in one transaction each.

The file's version is `PRAGMA user_version`: the number of steps applied. Files written before versions
existed (version 0) already hold some of these tables, so every step is written to be a no-op on what is
already there (`IF NOT EXISTS`, columns added only when missing): they open with nothing lost. A file
whose version is above what this code knows was written by a newer ipymusicgen: it is refused, untouched.

A new step is a new function at the end, decorated with `@migration`; steps are never edited once
released (llm's `migrations.py` is the model).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ..errors import JournalUnavailableError

APPLICATION_ID = 0x494D474A
"""`PRAGMA application_id` of a journal ("IMGJ"); files written before it existed are recognised by their schema."""
Step = Callable[[sqlite3.Connection], None]


class JournalVersionError(JournalUnavailableError):
    """The journal file was written by a newer version of ipymusicgen; it is left as it is."""


def migration(step: Step) -> Step:
    """Mark a schema step: a function named `mNNN_...`, run in the order of its number (`MIGRATIONS`)."""
    if not re.fullmatch(r"m\d{3}_\w+", step.__name__):
        raise ValueError(f"a migration is named mNNN_what (got {step.__name__!r})")
    return step


def _numbered_steps(names: dict[str, object]) -> tuple[Step, ...]:
    """This module's `mNNN_` steps in number order; their numbers run 1, 2, 3... with none missing or repeated."""
    steps = sorted((int(name[1:4]), step) for name, step in names.items() if re.fullmatch(r"m\d{3}_\w+", name))
    numbers = [number for number, _ in steps]
    if numbers != list(range(1, len(steps) + 1)):
        raise RuntimeError(f"the journal's migrations are not numbered 1 to {len(steps)}: {numbers}")
    return tuple(step for _, step in steps)  # type: ignore[misc]


def _add_missing_columns(db: sqlite3.Connection, table: str, columns: tuple[tuple[str, str], ...]) -> None:
    present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    for name, kind in columns:
        if name not in present:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


@migration
def m001_journal(db: sqlite3.Connection) -> None:
    """Paid attempts (before they are sent) and the tasks they created."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS attempts (
            id TEXT PRIMARY KEY,
            endpoint TEXT NOT NULL,
            host TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at REAL NOT NULL,
            outcome TEXT NOT NULL DEFAULT 'pending',
            note TEXT
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS tasks (
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
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state)")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_created ON tasks(created_at)")


@migration
def m002_attempt_owners(db: sqlite3.Connection) -> None:
    """Which process sent each attempt, so a dead sender's pending attempt reads as unknown."""
    _add_missing_columns(db, "attempts", (("owner_host", "TEXT"), ("owner_pid", "INTEGER"), ("owner_started", "TEXT")))


@migration
def m003_batches(db: sqlite3.Connection) -> None:
    """Batch rows (what each row sent, its ids, who claimed it) and batches (measured credits)."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS batch_rows (
            batch TEXT NOT NULL,
            row_index INTEGER NOT NULL,
            request_hash TEXT NOT NULL,
            request TEXT NOT NULL,
            v2 INTEGER NOT NULL DEFAULT 0,
            state TEXT NOT NULL DEFAULT 'pending',
            ids TEXT NOT NULL DEFAULT '[]',
            attempts INTEGER NOT NULL DEFAULT 0,
            owner_pid INTEGER,
            owner_start TEXT,
            error TEXT,
            cost INTEGER,
            updated_at REAL NOT NULL,
            PRIMARY KEY (batch, row_index)
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS batches (
            name TEXT PRIMARY KEY,
            created_at REAL NOT NULL,
            counts_before INTEGER,
            counts_after INTEGER,
            calls INTEGER NOT NULL DEFAULT 0
        )"""
    )


@migration
def m004_library(db: sqlite3.Connection) -> None:
    """The library: lyrics, favourites, notes, archive paths and peaks, and a full-text index."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS library_songs (
            id TEXT PRIMARY KEY,
            lyrics TEXT,
            prompt TEXT,
            model TEXT,
            action TEXT,
            batch TEXT,
            duration_s REAL,
            parent_id TEXT,
            favourite INTEGER NOT NULL DEFAULT 0,
            kept INTEGER NOT NULL DEFAULT 0,
            note TEXT,
            archive_path TEXT,
            archive_size INTEGER,
            wav_path TEXT,
            cover_path TEXT,
            peaks BLOB,
            archive_error TEXT,
            archive_tries INTEGER NOT NULL DEFAULT 0,
            archived_at REAL
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS library_songs_parent ON library_songs(parent_id)")
    db.execute("CREATE INDEX IF NOT EXISTS library_tasks_attempt ON tasks(attempt_id)")
    db.execute("CREATE INDEX IF NOT EXISTS library_songs_favourite ON library_songs(favourite) WHERE favourite = 1")
    db.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS library_fts USING fts5("
        "id UNINDEXED, title, style, lyrics, prompt, tokenize = 'unicode61 remove_diacritics 2')"
    )


@migration
def m005_task_lyrics(db: sqlite3.Connection) -> None:
    """Each task's lyrics as an answer gave them: the v2 query answers them blank, the submit answer did not."""
    _add_missing_columns(db, "tasks", (("lyrics", "TEXT"),))


@migration
def m006_batch_runs(db: sqlite3.Connection) -> None:
    """Each run of a batch measured on its own (the key's counts before and after, its window and calls), so a
    re-run never adds what the key spent between runs. Batches measured before become one run each."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS batch_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            batch TEXT NOT NULL,
            host TEXT,
            started_at REAL NOT NULL,
            finished_at REAL,
            counts_before INTEGER,
            counts_after INTEGER,
            calls INTEGER NOT NULL DEFAULT 0
        )"""
    )
    db.execute("CREATE INDEX IF NOT EXISTS batch_runs_batch ON batch_runs(batch)")
    db.execute(
        "INSERT INTO batch_runs (batch, started_at, finished_at, counts_before, counts_after, calls)"
        " SELECT b.name, b.created_at, (SELECT MAX(r.updated_at) FROM batch_rows r WHERE r.batch = b.name),"
        " b.counts_before, b.counts_after, b.calls FROM batches b WHERE b.counts_before IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM batch_runs)"
    )


@migration
def m007_ratings(db: sqlite3.Connection) -> None:
    """The listening lab: a song's stars (1 to 5), and pairwise votes between songs, blind or not, in time order."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS ratings (
            id TEXT PRIMARY KEY,
            stars INTEGER NOT NULL CHECK (stars BETWEEN 1 AND 5),
            rated_at REAL NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS comparisons (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            winner TEXT NOT NULL,
            loser TEXT NOT NULL,
            blind INTEGER NOT NULL DEFAULT 1,
            voted_at REAL NOT NULL,
            CHECK (winner != loser)
        )"""
    )


@migration
def m008_analysis(db: sqlite3.Connection) -> None:
    """What each archived song measures (tempo, key, loudness, true peak, silence at the ends), filterable."""
    _add_missing_columns(
        db,
        "library_songs",
        (
            ("bpm", "REAL"),
            ("musical_key", "TEXT"),
            ("lufs", "REAL"),
            ("true_peak_db", "REAL"),
            ("silence_start_s", "REAL"),
            ("silence_end_s", "REAL"),
            ("analysed_at", "REAL"),
            ("analysis_error", "TEXT"),
        ),
    )
    db.execute("CREATE INDEX IF NOT EXISTS library_songs_bpm ON library_songs(bpm) WHERE bpm IS NOT NULL")


@migration
def m009_application_id(db: sqlite3.Connection) -> None:
    """Mark the file as an ipymusicgen journal, so another program's database is never taken for one."""
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")


@migration
def m010_paid_extras(db: sqlite3.Connection) -> None:
    """Paid extras of a song (its WAV, its MP4, a singer voice), one row per (song, kind): claimed before the
    request is sent, so a second press, another kernel or an agent reuses it instead of paying again."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS paid_extras (
            song TEXT NOT NULL,
            kind TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'sending',
            value TEXT,
            path TEXT,
            note TEXT,
            owner_host TEXT,
            owner_pid INTEGER,
            owner_started TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (song, kind)
        )"""
    )


@migration
def m011_retire_batch_counters(db: sqlite3.Connection) -> None:
    """A batch's measure lives in its runs only (step 6 made them; its counters in `batches` were kept beside
    them since). A batch measured with no run of its own becomes one run, then `batches` keeps its name and
    start only (the table rebuilt, which any SQLite can do)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(batches)")}
    if "counts_before" in columns:
        db.execute(
            "INSERT INTO batch_runs (batch, started_at, finished_at, counts_before, counts_after, calls)"
            " SELECT b.name, b.created_at, (SELECT MAX(r.updated_at) FROM batch_rows r WHERE r.batch = b.name),"
            " b.counts_before, b.counts_after, b.calls FROM batches b WHERE b.counts_before IS NOT NULL"
            " AND NOT EXISTS (SELECT 1 FROM batch_runs r WHERE r.batch = b.name)"
        )
    db.execute("CREATE TABLE batches_retired (name TEXT PRIMARY KEY, created_at REAL NOT NULL)")
    db.execute("INSERT INTO batches_retired (name, created_at) SELECT name, created_at FROM batches")
    db.execute("DROP TABLE batches")
    db.execute("ALTER TABLE batches_retired RENAME TO batches")


@migration
def m012_batch_row_stalled(db: sqlite3.Connection) -> None:
    """A row the batch engine failed because none of its songs moved is marked `stalled` (a re-run follows it
    again); before this step the only sign was its error's first words, read here once and never again."""
    _add_missing_columns(db, "batch_rows", (("stalled", "INTEGER NOT NULL DEFAULT 0"),))
    db.execute("UPDATE batch_rows SET stalled = 1 WHERE state = 'failed' AND error LIKE 'timed out:%'")


@migration
def m013_vote_outcomes(db: sqlite3.Connection) -> None:
    """A vote's outcome (issue 41): "win" (`winner` preferred to `loser`, what every earlier vote was), "tie", or
    "both_bad" (then `winner` and `loser` are the two songs in the order shown)."""
    _add_missing_columns(
        db,
        "comparisons",
        (("outcome", "TEXT NOT NULL DEFAULT 'win' CHECK (outcome IN ('win', 'tie', 'both_bad'))"),),
    )


ATTEMPT_PROVIDER = (
    "CASE WHEN json_valid(payload) AND json_extract(payload, '$.provider') IN ('musicful', 'elevenlabs', 'lyria')"
    " THEN json_extract(payload, '$.provider') WHEN endpoint LIKE 'elevenlabs %' THEN 'elevenlabs'"
    " WHEN endpoint LIKE 'lyria %' THEN 'lyria' ELSE 'musicful' END"
)
"""Step 14's rule for an attempt's provider: its payload's (a known name only), else its endpoint's engine, else
the service. Part of a released step: never edited."""


@migration
def m014_attempt_providers(db: sqlite3.Connection) -> None:
    """Each attempt's provider (issue 37): filled in for attempts journalled before, and by a trigger for every
    new one (the journal's writer need not know the column), so spend and budgets group by it in SQL."""
    _add_missing_columns(db, "attempts", (("provider", "TEXT"),))
    db.execute(f"UPDATE attempts SET provider = {ATTEMPT_PROVIDER} WHERE provider IS NULL")
    db.execute(
        "CREATE TRIGGER IF NOT EXISTS attempts_provider AFTER INSERT ON attempts WHEN NEW.provider IS NULL BEGIN"
        f" UPDATE attempts SET provider = {ATTEMPT_PROVIDER} WHERE id = NEW.id; END"
    )
    db.execute("CREATE INDEX IF NOT EXISTS attempts_provider ON attempts(provider)")


@migration
def m015_agent_quotes(db: sqlite3.Connection) -> None:
    """The agent server's consent quotes, and the attempt row's quote id (issue 40): `agent_quotes.py`."""
    from .agent_quotes import create_tables

    create_tables(db)


@migration
def m016_song_measures(db: sqlite3.Connection) -> None:
    """Every measure of a song's analysis kept whole, with the file it was taken from (issue 41):
    `song_measures.py`."""
    from .song_measures import create_tables

    create_tables(db)


MIGRATIONS: tuple[Step, ...] = _numbered_steps(globals())
"""Every schema step, in order: a file at `PRAGMA user_version` N has had the first N."""
LATEST = len(MIGRATIONS)


def version_of(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(db: sqlite3.Connection | int, path: str | Path) -> None:
    """Raise `JournalVersionError`, changing nothing, if a newer version of ipymusicgen wrote this file (read
    from a connection, or given as the version the file's header holds)."""
    found = db if isinstance(db, int) else version_of(db)
    if found > LATEST:
        raise JournalVersionError(
            f"The journal {path} was written by a newer version of ipymusicgen (schema version {found}); this "
            f"version knows schema versions up to {LATEST}. Upgrade ipymusicgen to use it; the file was left "
            "untouched."
        )


def migrate(db: sqlite3.Connection, path: str | Path = "the journal") -> int:
    """Apply the steps the file lacks, each in its own IMMEDIATE transaction; returns the file's version.

    Another process may migrate the same file at the same moment: the version is read again inside each
    transaction, so every step runs exactly once. A step that fails leaves the file at the step before.
    """
    refuse_newer(db, path)
    while True:
        if version_of(db) >= LATEST:
            return version_of(db)
        db.execute("BEGIN IMMEDIATE")
        try:
            current = version_of(db)
            if current > LATEST:
                db.execute("ROLLBACK")
                refuse_newer(db, path)
            if current < LATEST:
                MIGRATIONS[current](db)
                db.execute(f"PRAGMA user_version = {current + 1}")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

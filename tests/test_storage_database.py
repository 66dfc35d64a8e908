"""Storage is the one place that knows the database: no SQL, `sqlite3` import or pragma outside `storage/` (the
sandbox, which plays the service, aside), and one connection per journal file per process however often the
library, the waveform, the analysis or the archiver open it."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ipymusicgen"
ALLOWED = ("storage", "sandbox")
SQL = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+(OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bCREATE\s+(TABLE|INDEX|VIRTUAL)\b|\bPRAGMA\b|\bjson_extract\s*\(|\bCOALESCE\s*\("
)


def outside_storage() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(PACKAGE).parts[0] not in ALLOWED]


def sql_found(path: Path) -> list[str]:
    """Imports of sqlite3 and string literals that read as SQL, as `file:line: text`."""
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        found += [f"{path.name}:{node.lineno}: import {n}" for n in names if n.split(".")[0] == "sqlite3"]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.STRING and SQL.search(token.string):
            found.append(f"{path.name}:{token.start[0]}: {' '.join(token.string.split())[:80]}")
    return found


def test_the_check_finds_sql_where_it_is() -> None:
    found = [f for path in sorted((PACKAGE / "storage").glob("*.py")) for f in sql_found(path)]
    assert any("import sqlite3" in f for f in found)
    assert any("SELECT" in f for f in found) and any("PRAGMA" in f for f in found)


def test_no_sql_sqlite_or_pragma_outside_storage() -> None:
    found = [f"{path.relative_to(PACKAGE)}: {f}" for path in outside_storage() for f in sql_found(path)]
    assert found == []


COUNT_CONNECTIONS = """
import json, os, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from ipymusicgen.workspace import session
from ipymusicgen.song_library import Library
from ipymusicgen.storage.database import Database

journal = session.get_journal()
path = Path(journal.path).resolve()

def connections():
    opened = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if Path(os.readlink(f"/proc/self/fd/{fd}")) == path:
                opened += 1
        except OSError:
            pass
    return opened

seen = [connections()]
for _ in range(12):
    session.library()
    session.library(path)
    for call in (session.waveform, session.analyze):
        try:
            call("no-such-song")
        except Exception:
            pass
seen.append(connections())
db = Database(path)
db.library.song_count()
db.batches.names()
db.extras.of_song("no-such-song")
with Library(path) as opened:
    opened.songs()
seen.append(connections())
print("SEEN=" + json.dumps(seen))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts the process's open files in /proc")
def test_one_connection_per_journal_file_however_often_it_is_opened(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(
        {
            "MUSICGEN_API_KEY": "test-key-not-real",
            "MUSICGEN_BASE_URL": "http://127.0.0.1:9",
            "MUSICGEN_JOURNAL": str(tmp_path / "journal.sqlite3"),
            "MUSICGEN_ARCHIVE_DIR": str(tmp_path / "songs"),
        }
    )
    done = subprocess.run(
        [sys.executable, "-c", COUNT_CONNECTIONS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.split("SEEN=")[-1])
    assert seen == [1, 1, 1], seen


def journal_with(path: Path, payloads: dict[str, dict[str, object]], lyrics: dict[str, str]) -> None:
    """Songs journalled as the client journals them: a paid attempt each, its task, what polling learnt."""
    from ipymusicgen.models.schema import TaskRecord
    from ipymusicgen.storage.journal import Journal

    with Journal(path) as journal:
        for task_id, payload in payloads.items():
            attempt = journal.begin("generate", "http://127.0.0.1:9", payload)
            journal.submitted(attempt, [task_id])
        journal.observe([TaskRecord(id=i, status=1, title=f"song {i}", lyric=lyrics.get(i)) for i in payloads])


def test_a_songs_lyrics_are_one_rule_for_the_library_and_the_archive(tmp_path: Path) -> None:
    from ipymusicgen.archive.archiver import song_info
    from ipymusicgen.song_library import Library

    path = tmp_path / "journal.sqlite3"
    journal_with(path, {"asked": {"style": "x", "lyrics": "the words asked for"}, "told": {"style": "y"}},
                 {"told": "the words the service sang"})  # fmt: skip
    with Library(path) as library:
        for task_id, words in (("asked", "the words asked for"), ("told", "the words the service sang")):
            assert library.song(task_id).lyrics == words
            assert song_info(library.store, task_id).lyrics == words


def test_which_model_a_request_used_is_one_rule(tmp_path: Path) -> None:
    from ipymusicgen.models.costs import model_of
    from ipymusicgen.song_library import Library

    payloads = {
        "v1": {"style": "x", "mv": "MFV2.0"},
        "v2": {"prompt": "y", "model_version": "v4.5"},
        "old": {"style": "z", "model": "MFV1.5"},
        "none": {"style": "w"},
    }
    path = tmp_path / "journal.sqlite3"
    journal_with(path, payloads, {})
    with Library(path) as library:
        for task_id, payload in payloads.items():
            assert library.song(task_id).model == model_of(payload)
        spent = {row["model"] for row in library.spend(by="model").rows}
    assert spent == {"MFV2.0", "v4.5", "MFV1.5", "(default)"}


def test_a_spend_read_that_fails_is_said_not_taken_for_nothing_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.song_library import Library
    from ipymusicgen.storage.errors import StorageUnavailableError

    path = tmp_path / "journal.sqlite3"
    journal_with(path, {"a": {"style": "x", "mv": "MFV2.0"}}, {})
    with Library(path) as library:
        assert library.spend(by="batch").rows[0]["credits_measured"] is None  # nothing measured: no batch ran

        def fails() -> list[dict[str, object]]:
            raise StorageUnavailableError("disk I/O error")

        monkeypatch.setattr(library.store, "batch_runs", fails)
        with pytest.raises(StorageUnavailableError, match="disk I/O error"):
            library.spend(by="day")


def test_the_batches_counters_are_retired_by_a_migration_and_old_journals_keep_their_measures(tmp_path: Path) -> None:
    """Journals written at schema 10 kept a batch's counts twice (the `batches` row and its runs); step 11 keeps
    them in `batch_runs` only: a batch measured before runs existed becomes a run, and the counters go."""
    import sqlite3

    from ipymusicgen.storage.batches import BatchStore
    from ipymusicgen.storage.migrations import LATEST, MIGRATIONS

    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:10]:
        step(db)
    db.execute("PRAGMA user_version = 10")
    db.execute("INSERT INTO batches VALUES ('old', 100.0, 50, 44, 3)")  # measured, but no run (a lost run row)
    db.execute("INSERT INTO batches VALUES ('ran', 200.0, 40, 38, 1)")  # measured, and its run says the same
    db.execute("INSERT INTO batch_runs (batch, started_at, finished_at, counts_before, counts_after, calls)"
               " VALUES ('ran', 200.0, 210.0, 40, 38, 1)")  # fmt: skip
    db.execute("INSERT INTO batches (name, created_at) VALUES ('unmeasured', 300.0)")
    db.close()

    store = BatchStore(path)
    try:
        assert store.names() == ["old", "ran", "unmeasured"]
        assert store.counts("old")[:2] == (50, 44) and store.counts("ran")[:2] == (40, 38)
        assert store.counts("unmeasured")[:2] == (None, None)
    finally:
        store.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST >= 11
        assert [r[1] for r in db.execute("PRAGMA table_info(batches)")] == ["name", "created_at"]
        runs = db.execute("SELECT batch, counts_before, counts_after, calls FROM batch_runs ORDER BY batch").fetchall()
        assert runs == [("old", 50, 44, 3), ("ran", 40, 38, 1)]
    finally:
        db.close()


def test_threads_opening_one_file_share_one_connection_closed_by_its_last_user(tmp_path: Path) -> None:
    import sqlite3
    import threading

    from ipymusicgen.storage.shared_connection import acquire, open_connections

    path = tmp_path / "journal.sqlite3"
    start = threading.Barrier(8)
    got: list[object] = []

    def take() -> None:
        start.wait()
        got.append(acquire(path))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    shared = got[0]
    assert all(other is shared for other in got) and shared.users == 8  # type: ignore[attr-defined]
    assert [s for s in open_connections() if s.path == path.resolve()] == [shared]
    for one in got:
        one.release()  # type: ignore[attr-defined]
    assert [s for s in open_connections() if s.path == path.resolve()] == []
    with pytest.raises(sqlite3.ProgrammingError):
        shared.db.execute("SELECT 1")  # type: ignore[attr-defined]


def test_a_file_replaced_on_disk_is_a_new_file_with_its_own_connection(tmp_path: Path) -> None:
    from ipymusicgen.storage.journal import Journal

    path = tmp_path / "journal.sqlite3"
    first = Journal(path)
    try:
        path.rename(tmp_path / "moved-aside.sqlite3")
        with Journal(path) as second:  # a fresh journal in its place, not the moved one's connection
            assert second._db is not first._db and second.history() == []
    finally:
        first.close()


def test_writes_a_read_makes_on_the_side_wait_briefly_on_the_shared_connection(tmp_path: Path) -> None:
    """Settling a dead sender's attempt is tried with a brief wait (never the journal's full one), and the
    journal's own wait is back for what follows, though the connection is shared with the library."""
    import sqlite3

    from ipymusicgen.song_library import Library
    from ipymusicgen.storage.journal import QUICK_BUSY_MS, Journal

    path = tmp_path / "journal.sqlite3"
    with Journal(path, busy_timeout=5) as journal, Library(path) as library:
        journal.begin("generate", "http://127.0.0.1:9", {"style": "x"})
        raw = sqlite3.connect(path)
        raw.execute("UPDATE attempts SET owner_host = NULL, owner_pid = NULL")  # sent by a version before owners
        raw.commit()
        raw.close()
        seen: list[str] = []
        journal._db.set_trace_callback(seen.append)
        try:
            assert [a.outcome for a in journal.attempts()] == ["unknown"]
            settle = next(i for i, s in enumerate(seen) if s.startswith("UPDATE attempts"))
            waits = [s for s in seen[:settle] if s.startswith("PRAGMA busy_timeout")]
            assert waits and waits[-1] == f"PRAGMA busy_timeout={QUICK_BUSY_MS}"
            library.songs()
            journal.history()
            assert journal._db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        finally:
            journal._db.set_trace_callback(None)


def test_a_database_owns_its_concerns_and_closes_what_it_opened(tmp_path: Path) -> None:
    """Each concern opens once and is the same object after (the batch store too: no registry by path hands it
    out), two databases over one file own their own stores over its one connection, and `close()` closes only
    what that database opened."""
    import sqlite3

    from ipymusicgen.storage.database import Database

    path = tmp_path / "journal.sqlite3"
    first, second = Database(path), Database(path)
    try:
        assert first.batches is first.batches and first.library is first.library and first.extras is first.extras
        assert first.batches is not second.batches and first.journal is not second.journal
        assert not any(hasattr(first, alias) for alias in ("tasks", "attempts", "ratings"))
        first.batches.open_batch("kept", [("digest", "{}", False)])
        batches = first.batches
        first.close()
        with pytest.raises(sqlite3.ProgrammingError):
            batches.names()
        assert second.batches.names() == ["kept"]  # the other database's store still reads the file
    finally:
        first.close()
        second.close()

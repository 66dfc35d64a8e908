"""The journal file's schema: numbered migrations, the upgrade of a journal written by an older release,
a journal from a newer release refused untouched, and a file private to its user."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from ipymusicgen import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage import migrations
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.journal_file import open_db
from ipymusicgen.storage.library import LibraryStore
from ipymusicgen.storage.migrations import LATEST, JournalVersionError, migrate, version_of

FIXTURE = Path(__file__).parent / "fixtures" / "journal-v0.sqlite3"
"""Written by the code of commit 2791417 (no schema version) with `fixtures/make_journal_v0.py`."""
FAVOURITE = "e3e70682-c209-4cac-a29f-6fbed82c07cd"


@pytest.fixture
def old_journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    shutil.copyfile(FIXTURE, path)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_fixture_is_an_unversioned_journal_of_the_old_code() -> None:
    db = sqlite3.connect(FIXTURE)
    assert version_of(db) == 0
    assert db.execute("SELECT COUNT(*) FROM library_songs").fetchone()[0] == 8
    db.close()


def test_an_old_journal_opens_with_nothing_lost(old_journal: Path) -> None:
    journal = Journal(old_journal)
    outcomes = sorted(a.outcome for a in journal.attempts())
    journal.close()
    assert outcomes == ["submitted"] * 4 + ["unknown"] * 2  # the pending one's sender (a dead pid) is gone
    db = sqlite3.connect(old_journal)
    assert version_of(db) == LATEST
    assert db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 8
    assert db.execute("SELECT favourite, note FROM library_songs WHERE id = ?", (FAVOURITE,)).fetchone() == (
        1,
        "the good take",
    )
    assert db.execute("SELECT state FROM batch_rows ORDER BY row_index").fetchall() == [("complete",), ("complete",)]
    db.close()


def test_an_old_journal_still_reports_its_unknown_and_pending_attempts(old_journal: Path) -> None:
    journal = Journal(old_journal)
    seen = [a.describe() for a in journal.attempts("unknown")]
    journal.close()
    assert len(seen) == 2
    assert any("unknown outcome" in text for text in seen)
    assert any("still pending" in text for text in seen)  # its sender (a dead pid) is gone: in doubt


def test_rerunning_the_old_journals_finished_batch_by_name_sends_nothing(old_journal: Path) -> None:
    rows = [{"action": "auto", "style": "lo-fi"}, {"action": "auto", "style": "jazz"}]
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={"real-looking-key": 50}) as service:
        with MusicClient(
            "real-looking-key", base_url=service.base_url, v2_base_url=service.v2_base_url,
            journal=Journal(old_journal), archive=False,
            settings=Settings.from_env().with_changes(poll_interval=0.05),  # its ids are unknown here: read briefly
        ) as client:  # fmt: skip
            batch = client.batch(rows, name="fixture-batch", stall_timeout=30)
        assert service.request_counts().get("/v1/music/generate", 0) == 0
        assert service.credits("real-looking-key") == 50
    assert batch.counts()["complete"] == 2


def test_the_library_store_and_batch_store_open_an_old_journal_too(old_journal: Path) -> None:
    store = LibraryStore(old_journal)
    assert store._rows("SELECT note FROM library_songs WHERE id = ?", (FAVOURITE,))[0]["note"] == "the good take"
    store.close()
    batches = BatchStore(old_journal)
    assert [r.state for r in batches.rows("fixture-batch").values()] == ["complete", "complete"]


def test_migrations_run_once_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    steps = [lambda db, n=n, step=step: (calls.append(n), step(db))[1] for n, step in enumerate(migrations.MIGRATIONS)]
    monkeypatch.setattr(migrations, "MIGRATIONS", steps)
    path = tmp_path / "j.sqlite3"
    Journal(path).close()
    Journal(path).close()
    LibraryStore(path).close()
    assert calls == list(range(LATEST))


def test_a_failing_step_leaves_the_file_at_the_step_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE half_done (x)")
        raise sqlite3.OperationalError("disk I/O error (simulated)")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS[:2], broken, *migrations.MIGRATIONS[3:]])
    path = tmp_path / "j.sqlite3"
    db = open_db(path)
    with pytest.raises(sqlite3.OperationalError):
        migrate(db, path)
    assert version_of(db) == 2
    assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchall()
    db.close()


def test_a_journal_from_a_newer_version_is_refused_untouched(old_journal: Path) -> None:
    db = sqlite3.connect(old_journal)
    db.execute(f"PRAGMA user_version = {LATEST + 3}")
    db.commit()
    db.close()
    before = digest(old_journal)
    for opener in (Journal, LibraryStore, BatchStore):
        with pytest.raises(JournalVersionError) as refused:
            opener(old_journal)
        message = str(refused.value)
        assert f"schema version {LATEST + 3}" in message and f"up to {LATEST}" in message
        assert "\n" not in message
    assert digest(old_journal) == before
    assert not Path(f"{old_journal}-wal").exists()


def test_a_new_journal_and_its_side_files_are_private(tmp_path: Path) -> None:
    folder = tmp_path / "made-by-us"
    with Journal(folder / "journal.sqlite3") as journal:
        journal.begin("generate", "https://api.example", {"style": "secret prompt"})
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{journal.path}{suffix}")
            assert path.exists(), suffix
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, suffix
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_an_old_world_readable_journal_is_made_private(old_journal: Path) -> None:
    old_journal.chmod(0o644)
    Journal(old_journal).close()
    assert stat.S_IMODE(old_journal.stat().st_mode) == 0o600


def test_a_row_an_older_release_failed_as_stalled_is_marked_stalled_once(tmp_path: Path) -> None:
    """Before step 12 a stalled row was known only by its error's first words; the step reads them once, so a re-run
    still follows that row's songs, and an ordinary failure stays one."""
    path = tmp_path / "journal.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    for number, step in enumerate(migrations.MIGRATIONS[:11], start=1):
        step(db)
        db.execute(f"PRAGMA user_version = {number}")
    for index, (state, error) in enumerate(
        [("failed", "timed out: no song changed state for 900 s"), ("failed", "the service refused it")]
    ):
        db.execute(
            "INSERT INTO batch_rows (batch, row_index, request_hash, request, state, ids, error, updated_at)"
            " VALUES ('old', ?, 'h', '{}', ?, '[\"a\"]', ?, 0)",
            (index, state, error),
        )
    db.close()
    store = BatchStore(path)
    try:
        assert [r.stalled for r in store.rows("old").values()] == [True, False]
    finally:
        store.close()

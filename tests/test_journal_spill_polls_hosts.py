"""The journal's quieter promises: a spill file is private and a failed one leaves nothing behind; a poll that
changes nothing writes nothing; unfinished tasks and attempts are found whatever spelling of the host made them."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from ipymusicgen.errors import JournalWriteWarning
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

WAIT = 60


class Holder:
    """Another connection holding the journal's write lock, as another kernel might."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("BEGIN EXCLUSIVE")

    def close(self) -> None:
        self.db.execute("COMMIT")
        self.db.close()


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    return path


# -- item 17: the spill file -----------------------------------------------------------------------------------


def test_a_spill_file_is_private_whatever_the_umask(journal_path: Path) -> None:
    journal = Journal(journal_path, busy_timeout=0.05)
    attempt = journal.begin("generate", "https://api.example", {"title": "Secret title", "style": "secret prompt"})
    holder = Holder(journal_path)
    try:
        with pytest.warns(JournalWriteWarning):
            journal.submitted(attempt, ["spilled-1"])
        with pytest.warns(JournalWriteWarning, match="were saved to"):
            journal.close()
    finally:
        holder.close()
    (spill,) = journal_path.parent.glob("*.unsaved-*.json")
    assert "spilled-1" in spill.read_text()
    assert stat.S_IMODE(spill.stat().st_mode) == 0o600
    assert not list(journal_path.parent.glob("*.part"))
    with Journal(journal_path) as again:  # taken in at the next open, then removed
        assert [e.id for e in again.unfinished()] == ["spilled-1"]
    assert not spill.exists()


FAILED_SPILL = """
import os, resource, signal, sqlite3, sys, warnings
from ipymusicgen.storage.journal import Journal
os.umask(0o022)
path = sys.argv[1]
journal = Journal(path, busy_timeout=0.05)
attempt = journal.begin("generate", "https://api.example", {"style": "x" * 2000})
holder = sqlite3.connect(path, isolation_level=None)
holder.execute("BEGIN EXCLUSIVE")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    journal.submitted(attempt, ["lost-" + str(n) for n in range(300)])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))  # the spill cannot be written whole: EFBIG
    journal.close()
print("WARNED=" + " | ".join(str(w.message) for w in caught))
"""


def test_a_failed_spill_leaves_no_part_file(journal_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FAILED_SPILL, str(journal_path)], capture_output=True, text=True, timeout=WAIT
    )
    assert "were NOT journalled" in done.stdout, (done.stdout, done.stderr)
    leftovers = [p.name for p in journal_path.parent.iterdir() if p.name.startswith(journal_path.name + ".")]
    assert leftovers == [], leftovers


# -- item 19: polls that change nothing write nothing ---------------------------------------------------------


def writes_during(journal: Journal, action) -> list[str]:
    """The statements that write, traced on the journal's own connection while `action` runs."""
    seen: list[str] = []
    journal._db.set_trace_callback(seen.append)
    try:
        action()
    finally:
        journal._db.set_trace_callback(None)
    return [s for s in seen if s.split()[0].upper() in ("BEGIN", "UPDATE", "INSERT", "DELETE", "COMMIT")]


def test_observing_what_the_journal_already_knows_writes_nothing(journal_path: Path) -> None:
    with Journal(journal_path) as journal:
        attempt = journal.begin("generate", "https://api.example", {"title": "T", "style": "s"})
        journal.submitted(attempt, ["a", "b"])
        done = [
            TaskRecord(id=i, status=0, title="T", style="s", audio_url=f"https://x/{i}.mp3", lyric="la")
            for i in ("a", "b")
        ]
        assert writes_during(journal, lambda: journal.observe(done))  # new state: written
        assert writes_during(journal, lambda: journal.observe(done)) == []
        assert writes_during(journal, lambda: journal.observe([TaskRecord(id="a", status=0)])) == []  # blanks
        assert writes_during(journal, lambda: journal.observe([TaskRecord(id="never-seen", status=1)])) == []
        changed = [TaskRecord(id="a", status=0, title="New title")]
        assert writes_during(journal, lambda: journal.observe(changed))  # a change is still written
        assert journal.history(text="New title")[0].id == "a"
        failed = [TaskRecord(id="b", status=3, fail_reason="too loud")]
        writes_during(journal, lambda: journal.observe(failed))
        assert journal.history(state="failed")[0].fail_reason == "too loud"


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.02, song_seconds=2, faults="", keys={"real-looking-key": 100}) as service:
        yield service


def test_a_poll_of_finished_songs_through_the_client_writes_nothing(sandbox: Sandbox, journal_path: Path) -> None:
    journal = Journal(journal_path)
    # no archive: its thread writes the library on the journal's shared connection whenever a song lands
    with sandbox.client(api_key="real-looking-key", journal=journal, archive=False) as client:
        ids = client.generate(action="auto", style="lo-fi").ids
        client.wait(ids, timeout=WAIT, interval=0.02)
        client.tasks(ids)  # the last answer with anything new
        other = sqlite3.connect(journal_path)
        before = other.execute("PRAGMA data_version").fetchone()[0]
        changes = journal._db.total_changes
        assert writes_during(journal, lambda: client.tasks(ids)) == []
        assert journal._db.total_changes == changes
        assert other.execute("PRAGMA data_version").fetchone()[0] == before
        other.close()


# -- item 20: another spelling of the host ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("made", "asked"),
    [
        ("https://api.example.com", "https://API.Example.com/"),
        ("https://api.example.com:443/", "HTTPS://api.example.com"),
        ("http://127.0.0.1:80", "http://127.0.0.1/"),
        ("https://api.example.com/base/", "https://api.example.com/base"),
    ],
)
def test_unfinished_tasks_are_found_through_another_spelling_of_the_host(
    journal_path: Path, made: str, asked: str
) -> None:
    with Journal(journal_path) as journal:
        attempt = journal.begin("generate", made, {"style": "s"})
        journal.submitted(attempt, ["t1"])
        journal.begin("generate", made, {"style": "in doubt"})  # pending, its sender alive
        other = journal.begin("generate", "https://elsewhere.example", {"style": "s"})
        journal.submitted(other, ["t2"])
        assert [e.id for e in journal.unfinished(asked)] == ["t1"]
        assert [e.id for e in journal.unfinished(made)] == ["t1"]


def test_unfinished_tasks_waiting_in_memory_are_found_through_another_spelling(journal_path: Path) -> None:
    journal = Journal(journal_path, busy_timeout=0.05)
    attempt = journal.begin("generate", "https://api.example.com", {"style": "s"})
    holder = Holder(journal_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", JournalWriteWarning)
            journal.submitted(attempt, ["waiting"])
        assert [e.id for e in journal.unfinished("https://API.example.com:443/")] == ["waiting"]
    finally:
        holder.close()
    journal.close()


def test_a_client_lists_unknown_attempts_made_through_another_spelling_of_its_host(journal_path: Path) -> None:
    from ipymusicgen import MusicClient

    with Journal(journal_path) as journal:
        doubtful = journal.begin("generate", "HTTPS://API.Example.com:443/", {"style": "in doubt"})
        journal.unknown(doubtful, "no answer came back")
        elsewhere = journal.begin("generate", "https://other.example.com", {"style": "another service"})
        journal.unknown(elsewhere, "no answer came back")
        client = MusicClient(
            "a-real-looking-key",
            base_url="https://api.example.com",
            v2_base_url="https://api.example.com/",
            journal=journal,
        )
        found = client.unfinished()
        client.close()
    assert [a.id for a in found.unknown] == [doubtful]


# -- neighbours in the library's tables ------------------------------------------------------------------------


def test_indexing_records_the_library_already_holds_writes_nothing(journal_path: Path) -> None:
    from ipymusicgen.storage.library import LibraryStore

    with Journal(journal_path) as journal:
        attempt = journal.begin("generate", "https://api.example", {"title": "T", "style": "s", "lyrics": "la la"})
        journal.submitted(attempt, ["a", "b"])
        done = [
            TaskRecord(id=i, status=0, title="T", style="s", audio_url=f"https://x/{i}.mp3", lyric="la la", duration=60)
            for i in ("a", "b")
        ]
        journal.observe(done)
    store = LibraryStore(journal_path)
    try:
        seen: list[str] = []
        store.db.set_trace_callback(seen.append)
        store.index_records(done)
        assert any(s.startswith("INSERT INTO library_fts") for s in seen)
        seen.clear()
        store.index_records(done)  # the next poll's answer: nothing new
        store.index_records([TaskRecord(id="a", status=0)])  # blanks never erase, so nothing to write either
        assert [s for s in seen if s.split()[0].upper() in ("BEGIN", "UPDATE", "INSERT", "DELETE", "COMMIT")] == []
        store.index_records([TaskRecord(id="a", status=0, title="Renamed", lyric="new words")])  # still indexed
        assert [r["id"] for r in store._rows("SELECT id FROM library_fts WHERE library_fts MATCH 'Renamed'")] == ["a"]
        assert store._rows("SELECT lyrics FROM library_songs WHERE id = 'a'")[0]["lyrics"] == "new words"
    finally:
        store.db.set_trace_callback(None)
        store.close()


def test_the_archive_retry_list_matches_its_hosts_however_spelled(journal_path: Path) -> None:
    from ipymusicgen.storage.library import LibraryStore

    with Journal(journal_path) as journal:
        attempt = journal.begin("generate", "HTTPS://API.example.com:443/", {"style": "s"})
        journal.submitted(attempt, ["a"])
        other = journal.begin("generate", "https://elsewhere.example", {"style": "s"})
        journal.submitted(other, ["b"])
        journal.observe([TaskRecord(id=i, status=0, audio_url=f"https://x/{i}.mp3") for i in ("a", "b")])
    store = LibraryStore(journal_path)
    try:
        assert store.to_archive(["https://api.example.com"]) == ["a"]
        assert sorted(store.to_archive()) == ["a", "b"]
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_spill_file_another_user_left_beside_the_journal_is_not_taken(journal_path: Path) -> None:
    """In a shared folder anyone could leave a file named like a spill: only the journal's own user's are taken."""
    planted = journal_path.with_name(f"{journal_path.name}.unsaved-1-planted.json")
    rows = [["forged", "no-attempt", 1, "https://api.example", "Forged", "s", 0.0, 0.0]]
    planted.write_text(json.dumps([{"kind": "submitted", "attempt_id": "no-attempt", "rows": rows}]))
    os.chown(planted, 4242, 4242)
    with Journal(journal_path) as journal:
        assert journal.unfinished() == []
    assert planted.exists()  # left as it was


def test_a_v2_query_of_a_finished_song_writes_nothing(sandbox: Sandbox, journal_path: Path) -> None:
    journal = Journal(journal_path)
    # no archive: its thread writes the library on the journal's shared connection whenever a song lands
    with sandbox.client(api_key="real-looking-key", journal=journal, archive=False) as client:
        songs = client.submit_v2(is_auto=1, model_version="v4.5", prompt="a quiet one")
        client.wait([s.id for s in songs], timeout=WAIT, interval=0.02)
        client.query_v2(songs[0].id)  # the last answer with anything new
        changes = journal._db.total_changes
        assert writes_during(journal, lambda: client.query_v2(songs[0].id)) == []
        assert journal._db.total_changes == changes

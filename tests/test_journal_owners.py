"""Hardening of the journal: paid attempts of dead processes are reported, never lost; a journal that
cannot be written does not lose the ids of a paid answer; begin() refuses cleanly before anything is sent.

Everything here runs against real sockets (tiny hostile servers on 127.0.0.1, the sandbox) and real
processes (a child killed with SIGKILL mid paid call), and real SQLite locks held by a second connection.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_until
from hostile_server import AnsweringServer, SilentServer

from ipymusicgen import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal, JournalUnavailableError, JournalWriteWarning
from ipymusicgen.storage.journal_file import DEFAULT_BUSY_TIMEOUT, open_db
from ipymusicgen.storage.owner import Owner, process_started

KEY = "hardening-test-key"
WAIT = 60.0


# ---------------------------------------------------------------------------------------------------
# Servers on 127.0.0.1.


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


# ---------------------------------------------------------------------------------------------------
# Processes.

CHILD_PAID_CALL = """
from ipymusicgen import MusicClient
MusicClient().generate(action="custom", title="Lost Song", style="kill -9 blues", lyrics="la la")
"""

CHILD_RESUME = """
import json
from ipymusicgen import MusicClient
with MusicClient() as client:
    found = client.resume()
    print(json.dumps({
        "unknown": [{"id": a.id, "title": a.title, "style": a.style, "note": a.note, "line": a.describe()}
                    for a in found.unknown],
        "ids": found.ids,
    }))
"""


def child_env(base_url: str, journal: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(
        {
            "MUSICGEN_API_KEY": KEY,
            "MUSICGEN_BASE_URL": base_url,
            "MUSICGEN_V2_BASE_URL": base_url,
            "MUSICGEN_JOURNAL": str(journal),
            "MUSICGEN_TIMEOUT": "300",
        }
    )
    return env


def pending_attempts(journal: Path) -> list[sqlite3.Row]:
    if not journal.exists():
        return []
    with open_db(journal) as db:
        try:
            return db.execute("SELECT * FROM attempts WHERE outcome = 'pending'").fetchall()
        except sqlite3.OperationalError:  # the tables are not made yet
            return []


@pytest.mark.slow
def test_a_paid_call_killed_mid_flight_is_reported_unknown_but_not_while_its_process_lives(
    silent: SilentServer, tmp_path: Path
) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    env = child_env(silent.url, journal_path)
    child = subprocess.Popen([sys.executable, "-c", CHILD_PAID_CALL], env=env)
    try:
        wait_until(lambda: len(silent.requests) == 1 and pending_attempts(journal_path), "the paid POST in flight")
        assert b"POST /v1/music/generate" in silent.requests[0]

        # While the sender lives (another kernel, say), its attempt is in flight, not unknown.
        with MusicClient(KEY, base_url=silent.url, v2_base_url=silent.url, journal=Journal(journal_path)) as other:
            assert other.resume().unknown == ()
            (pending,) = other.journal.attempts(outcome="pending")
            assert pending.owner == Owner(socket.gethostname(), child.pid, process_started(child.pid))
            other.journal.close()
        assert child.poll() is None
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(WAIT)
    assert child.returncode == -signal.SIGKILL

    # A new process finds it: outcome unknown, with its title, style and why.
    done = subprocess.run(
        [sys.executable, "-c", CHILD_RESUME], env=env, capture_output=True, text=True, timeout=WAIT, check=True
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    (lost,) = found["unknown"]
    assert (lost["title"], lost["style"]) == ("Lost Song", "kill -9 blues")
    assert f"pid {child.pid}" in lost["note"] and "ended" in lost["note"]
    assert (
        lost["line"].startswith("generate 'Lost Song' (kill -9 blues) at ") and ": unknown, the process" in lost["line"]
    )
    assert found["ids"] == []
    assert len(silent.requests) == 1  # nothing was resent
    with Journal(journal_path) as journal:  # and the journal now says so for everyone
        (attempt,) = journal.attempts()
        assert attempt.outcome == "unknown" and attempt.id == lost["id"]
    assert KEY not in journal_path.read_bytes().decode("latin-1")


def test_a_reused_pid_is_not_taken_for_the_sender(tmp_path: Path) -> None:
    """A pending attempt owned by a pid that now belongs to another process (another start time) is unknown."""
    with Journal(tmp_path / "j.sqlite3") as journal:
        reused = journal.begin("generate", "https://api.example", {"style": "reused"})
        mine = journal.begin("generate", "https://api.example", {"style": "mine, in flight"})
        elsewhere = journal.begin("generate", "https://api.example", {"style": "another machine"})
        with open_db(journal.path) as db:
            db.execute("UPDATE attempts SET owner_started = 'another-boot:1' WHERE id = ?", (reused,))
            db.execute(
                "UPDATE attempts SET owner_host = 'some-other-machine', owner_pid = 1 WHERE id = ?", (elsewhere,)
            )
        outcomes = {a.id: a.outcome for a in journal.attempts()}
    assert outcomes == {reused: "unknown", mine: "pending", elsewhere: "pending"}


OLD_SCHEMA = """
CREATE TABLE attempts (id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, host TEXT NOT NULL, payload TEXT NOT NULL,
    created_at REAL NOT NULL, outcome TEXT NOT NULL DEFAULT 'pending', note TEXT);
CREATE TABLE tasks (id TEXT PRIMARY KEY, attempt_id TEXT, version INTEGER NOT NULL DEFAULT 1, host TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'processing', title TEXT, style TEXT, audio_url TEXT, cover_url TEXT, song_id TEXT,
    fail_reason TEXT, downloaded_path TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL);
INSERT INTO attempts VALUES ('old-pending', 'generate', 'https://old', '{"title": "Old"}', 1.0, 'pending', NULL);
INSERT INTO attempts VALUES ('old-done', 'generate', 'https://api.example', '{}', 2.0, 'submitted', NULL);
"""


def test_a_journal_of_the_earlier_version_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    with Journal(path) as journal:
        columns = {row["name"] for row in open_db(path).execute("PRAGMA table_info(attempts)")}
        assert {"owner_host", "owner_pid", "owner_started"} <= columns
        (old,) = journal.attempts(outcome="unknown")
        assert old.id == "old-pending" and old.title == "Old" and "earlier version" in (old.note or "")
        assert [a.id for a in journal.attempts(outcome="submitted")] == ["old-done"]
        fresh = journal.begin("generate", "https://api.example", {"style": "new"})
        assert journal.attempts(outcome="pending")[0].id == fresh
    with Journal(path) as again:  # opening a migrated journal again is a no-op
        assert len(again.attempts()) == 3


def test_describe_is_one_line_with_what_when_and_why(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite3") as journal:
        v1 = journal.begin(
            "generate", "https://api.example", {"action": "custom", "title": "Night\nDrive", "style": "synth"}
        )
        journal.unknown(v1, "No answer from the service (read timeout).\nCheck the task list before resending.")
        v2 = journal.begin(
            "submit_v2", "https://v2.example", {"is_auto": 1, "prompt": "sea shanty", "model_version": "v4.5"}
        )
        wav = journal.begin("generate_wav", "https://api.example", {"song_id": "song-42"})
        by_id = {a.id: a for a in journal.attempts()}
    when = time.strftime("%Y-%m-%d", time.localtime())
    line = by_id[v1].describe()
    assert "\n" not in line and line.startswith("generate 'Night Drive' (synth) at " + when)
    assert line.endswith(": unknown, No answer from the service (read timeout).")
    assert (by_id[v2].title, by_id[v2].style) == (None, "sea shanty")
    assert by_id[v2].describe().startswith("submit_v2 (sea shanty) at ") and by_id[v2].describe().endswith(": pending")
    assert by_id[wav].describe().startswith("generate_wav song song-42 at ")


# ---------------------------------------------------------------------------------------------------
# A journal that cannot be written.


class Holder:
    """Another connection holding the journal's write lock (BEGIN EXCLUSIVE), as another kernel might."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.held = False

    def hold(self) -> None:
        self.db.execute("BEGIN EXCLUSIVE")
        self.held = True

    def release(self) -> None:
        if self.held:
            self.db.execute("COMMIT")
            self.held = False

    def close(self) -> None:
        self.release()
        self.db.close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    Journal(tmp_path / "journal.sqlite3").close()
    lock = Holder(tmp_path / "journal.sqlite3")
    yield lock
    lock.close()


def test_the_busy_timeout_is_a_parameter(tmp_path: Path) -> None:
    assert DEFAULT_BUSY_TIMEOUT == 10.0
    with Journal(tmp_path / "j.sqlite3", busy_timeout=0.25) as journal:
        assert journal._db.execute("PRAGMA busy_timeout").fetchone()[0] == 250


@pytest.mark.slow
def test_a_paid_answer_arriving_while_the_journal_is_locked_keeps_its_ids(tmp_path: Path, holder: Holder) -> None:
    """The server answers only once another connection holds the journal: the ids are returned, warned, kept."""
    path = tmp_path / "journal.sqlite3"
    server = AnsweringServer(before_answer=holder.hold, ids=("locked-1", "locked-2"))
    journal = Journal(path, busy_timeout=0.05)
    try:
        with MusicClient(KEY, base_url=server.url, v2_base_url=server.url, journal=journal) as client:
            with pytest.warns(JournalWriteWarning) as caught:
                result = client.generate(action="custom", title="Held", style="locked", lyrics="la")
            assert list(result.ids) == ["locked-1", "locked-2"]
            (warning,) = [w for w in caught if w.category is JournalWriteWarning]
            message = str(warning.message)
            assert "locked-1, locked-2 are NOT journalled yet" in message and str(path) in message
            assert journal.backlog_ids == ["locked-1", "locked-2"]
            # This process still knows them: resume() lists them while the file is locked.
            assert sorted(client.resume().v1_ids) == ["locked-1", "locked-2"]
            with Journal(path) as other:  # another kernel cannot see them yet
                assert other.unfinished() == []

            # A second paid call now cannot even be recorded first: refused, nothing sent.
            with pytest.raises(JournalUnavailableError, match="not sent and nothing was charged"):
                client.generate(action="auto", style="refused while locked")
            assert server.posts == 1

            holder.release()
            assert sorted(e.id for e in journal.unfinished()) == ["locked-1", "locked-2"]  # next use writes them
            assert journal.backlog_ids == []
        with Journal(path) as other:
            entries = {e.id: e for e in other.unfinished()}
            assert sorted(entries) == ["locked-1", "locked-2"] and entries["locked-1"].title == "Held"
            assert [a.outcome for a in other.attempts()] == ["submitted"]
    finally:
        journal.close()
        server.close()


def test_state_updates_and_outcomes_wait_in_order_and_warn_once(tmp_path: Path, holder: Holder) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal(path, busy_timeout=0.05) as journal:
        attempt = journal.begin("generate", "https://api.example", {"title": "Order", "style": "s"})
        doubtful = journal.begin("generate", "https://api.example", {"style": "doubt"})
        holder.hold()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            journal.submitted(attempt, ["o1"])
            journal.unknown(doubtful, "no answer")
            from ipymusicgen.models.schema import TaskRecord

            journal.observe([TaskRecord(id="o1", status=0, audio_url="http://127.0.0.1:9/o1.mp3", title="")])
        messages = [str(w.message) for w in caught if w.category is JournalWriteWarning]
        assert len(messages) == 1 and "o1 are NOT journalled yet" in messages[0]  # one warning, naming the ids
        holder.release()
        (entry,) = journal.history()
        assert (entry.id, entry.state, entry.title, entry.audio_url) == (
            "o1",
            "complete",
            "Order",
            "http://127.0.0.1:9/o1.mp3",
        )
        assert {a.id: a.outcome for a in journal.attempts()} == {attempt: "submitted", doubtful: "unknown"}


def test_a_journal_still_locked_at_close_spills_the_ids_beside_it_for_the_next_open(
    tmp_path: Path, holder: Holder
) -> None:
    path = tmp_path / "journal.sqlite3"
    journal = Journal(path, busy_timeout=0.05)
    attempt = journal.begin("generate", "https://api.example", {"title": "Spilt", "style": "s"})
    doubtful = journal.begin("generate", "https://api.example", {"style": "doubt"})
    holder.hold()
    with pytest.warns(JournalWriteWarning):
        journal.submitted(attempt, ["c1", "c2"])
    journal.unknown(doubtful, "no answer")
    with pytest.warns(JournalWriteWarning, match="at close: task ids c1, c2 were saved to .*unsaved-"):
        journal.close()
    (spill,) = tmp_path.glob("journal.sqlite3.unsaved-*.json")
    holder.release()
    with Journal(path) as later:  # the next open (any process) takes them in
        entries = {e.id: e for e in later.unfinished()}
        assert sorted(entries) == ["c1", "c2"] and entries["c1"].title == "Spilt"
        outcomes = {a.id: (a.outcome, a.note) for a in later.attempts()}
        assert outcomes == {attempt: ("submitted", None), doubtful: ("unknown", "no answer")}
    assert not spill.exists()


def test_a_journal_that_can_spill_nothing_says_the_ids_were_not_journalled(tmp_path: Path, holder: Holder) -> None:
    journal = Journal(tmp_path / "journal.sqlite3", busy_timeout=0.05)
    attempt = journal.begin("generate", "https://api.example", {"style": "s"})
    holder.hold()
    with pytest.warns(JournalWriteWarning):
        journal.submitted(attempt, ["n1"])
    undo = _make_read_only(tmp_path)  # the folder too: no spill file can be made
    try:
        with pytest.warns(JournalWriteWarning, match="at close: task ids n1 were NOT journalled"):
            journal.close()
    finally:
        undo()


def _make_read_only(path: Path) -> Callable[[], None]:
    """Make the journal file read-only (chattr +i as root, who ignores modes); returns the undo."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)
    path.chmod(0o444)
    return lambda: path.chmod(0o644)


def test_a_read_only_journal_refuses_before_sending_and_keeps_answers_until_writable(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as first:
        attempt = first.begin("generate", "https://api.example", {"title": "RO", "style": "s"})
    undo = _make_read_only(path)
    try:
        journal = Journal(path)  # opens (to read) all the same
        assert [a.id for a in journal.attempts()] == [attempt]
        with pytest.raises(JournalUnavailableError, match="readonly"):
            journal.begin("generate", "https://api.example", {"style": "nope"})
        with pytest.warns(JournalWriteWarning, match="ro-1 are NOT journalled yet"):
            journal.submitted(attempt, ["ro-1"])
        assert [e.id for e in journal.unfinished()] == ["ro-1"]
    finally:
        undo()
    assert [e.id for e in journal.history()] == ["ro-1"]  # written on the next use once writable
    journal.close()
    with Journal(path) as again:
        assert [e.id for e in again.unfinished()] == ["ro-1"]


FILL_THE_DISK = """
import resource, signal, sys, warnings
from ipymusicgen.storage.journal import Journal, JournalWriteWarning
journal = Journal(sys.argv[1])
attempt = journal.begin("generate", "https://api.example", {"style": "full disk"})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = journal.path.stat().st_size + (journal.path.with_name(journal.path.name + "-wal").stat().st_size)
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # as if the disk were full: writes fail with EFBIG
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    journal.submitted(attempt, ["full-" + str(n) for n in range(400)])
print("WARNED=" + str([str(w.message) for w in caught if w.category is JournalWriteWarning]))
print("KEPT=" + str(len(journal.backlog_ids)))
"""


def test_a_full_disk_keeps_the_ids_in_memory_and_warns(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FILL_THE_DISK, str(tmp_path / "journal.sqlite3")],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    out = done.stdout
    assert "KEPT=400" in out, done.stderr
    assert out.count("NOT journalled yet") == 1 and ("full" in out or "I/O" in out)
    assert "full-0, full-1" in out and "and 380 more are NOT journalled yet" in out  # a bounded warning


# ---------------------------------------------------------------------------------------------------
# Through the sandbox: a locked journal refuses the paid call before it is sent.


def test_a_locked_journal_sends_nothing(sandbox: Sandbox, tmp_path: Path, holder: Holder) -> None:
    journal = Journal(tmp_path / "journal.sqlite3", busy_timeout=0.05)
    holder.hold()
    with sandbox.client(journal=journal) as client, pytest.raises(JournalUnavailableError, match="another program"):
        client.submit_v2(is_auto=1, model_version="v4.5", prompt="never sent")
    assert sandbox.request_counts().get("/v2/submit", 0) == 0
    assert sandbox.credits() == 100
    holder.release()
    journal.close()


def test_a_dead_senders_attempt_is_reported_unknown_even_while_the_journal_is_locked(
    tmp_path: Path, holder: Holder
) -> None:
    with Journal(tmp_path / "journal.sqlite3") as journal:
        attempt = journal.begin("generate", "https://api.example", {"title": "Orphan"})
        with open_db(journal.path) as db:
            db.execute("UPDATE attempts SET owner_started = 'another-boot:1' WHERE id = ?", (attempt,))
        holder.hold()
        (found,) = journal.attempts(outcome="unknown")  # reported at once, though it cannot be marked yet
        assert (found.id, found.title) == (attempt, "Orphan")
        holder.release()
        with open_db(journal.path) as db:
            assert db.execute("SELECT outcome FROM attempts").fetchone()[0] == "pending"
        assert [a.outcome for a in journal.attempts()] == ["unknown"]  # marked on the next read
        with open_db(journal.path) as db:
            assert db.execute("SELECT outcome FROM attempts").fetchone()[0] == "unknown"


def test_a_closed_or_broken_journal_is_a_clear_error_on_read(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.close()
    with pytest.raises(JournalUnavailableError, match="cannot be read"):
        journal.history()
    (tmp_path / "garbage.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(JournalUnavailableError):
        Journal(tmp_path / "garbage.sqlite3").begin("generate", "https://api.example", {})


def test_an_old_journal_locked_at_open_is_migrated_on_first_paid_call(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.execute("PRAGMA journal_mode=WAL")
    lock = Holder(path)
    lock.hold()
    try:
        journal = Journal(path, busy_timeout=0.05)  # cannot migrate now: still opens, still reads
        assert {a.id for a in journal.attempts()} == {"old-pending", "old-done"}
    finally:
        lock.close()
    attempt = journal.begin("generate", "https://api.example", {"style": "after the lock"})
    assert journal.attempts(outcome="pending")[0].id == attempt
    journal.close()

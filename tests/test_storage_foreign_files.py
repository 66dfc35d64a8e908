"""Storage touches only its own files: a journal is recognised (its application id, or the schema of a journal
written before the id existed) before anything is changed; anything else is refused in one line, untouched. A
read-only or newer journal keeps its mode, an old journal on a read-only location opens to read in every store,
and a damaged journal is never written to, every entry point saying the same one line with the remedy."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ipymusicgen import MusicClient
from ipymusicgen.errors import JournalUnavailableError, JournalWriteWarning
from ipymusicgen.mcp.desk import AgentDesk
from ipymusicgen.song_library import Library
from ipymusicgen.storage import journal_file as storage_db
from ipymusicgen.storage import migrations
from ipymusicgen.storage.batches import BatchStore
from ipymusicgen.storage.journal import Journal
from ipymusicgen.storage.library import LibraryStore, LibraryWriteError
from ipymusicgen.storage.migrations import LATEST, JournalVersionError

FIXTURE = Path(__file__).parent / "fixtures" / "journal-v0.sqlite3"
SIDE_FILES = ("-wal", "-shm", "-journal")


def _journal(path: str | Path) -> Journal:
    return Journal(path)


def _library(path: str | Path) -> Library:
    return Library(path)


OPENERS: list[Callable[[Path], object]] = [_journal, LibraryStore, BatchStore, _library]
OPENER_IDS = ["Journal", "LibraryStore", "BatchStore", "library"]


def close(opened: object) -> None:
    getattr(opened, "close", lambda: None)()


def snapshot(path: Path) -> tuple[str, int, list[str]]:
    """Bytes, mode and side files of `path`: what must stay the same when a file is left untouched."""
    sides = sorted(s for s in SIDE_FILES if Path(f"{path}{s}").exists())
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(path.stat().st_mode), sides


@pytest.fixture
def old_journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite3"
    shutil.copyfile(FIXTURE, path)
    return path


@pytest.fixture(params=["delete", "wal"])
def foreign_db(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """Another program's database (with a table named like one of ours), world-readable as it was made; in
    rollback or WAL mode (where even reading it the ordinary way would make its -shm file)."""
    path = tmp_path / "photos.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA journal_mode={request.param}")
    db.execute("CREATE TABLE tasks (id TEXT PRIMARY KEY, todo TEXT)")
    db.execute("CREATE TABLE albums (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO tasks VALUES ('t1', 'buy milk')")
    db.commit()
    db.close()
    path.chmod(0o644)
    return path


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# -- item 13: modes ----------------------------------------------------------------------------------------


def test_a_read_only_journal_is_never_made_writable(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    path.chmod(0o444)
    for opener in OPENERS:
        close(opener(path))
        assert stat.S_IMODE(path.stat().st_mode) == 0o400, opener  # group/other read removed, nothing added


def test_a_group_readable_journal_loses_only_group_and_other_bits(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    path.chmod(0o640)
    Journal(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o604)
    LibraryStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("opener", OPENERS, ids=OPENER_IDS)
def test_a_newer_journal_keeps_its_mode_bytes_and_side_files(old_journal: Path, opener: Callable) -> None:
    db = sqlite3.connect(old_journal)
    db.execute(f"PRAGMA user_version = {LATEST + 2}")
    db.commit()
    db.close()
    old_journal.chmod(0o644)
    before = snapshot(old_journal)
    with pytest.raises(JournalVersionError) as refused:
        opener(old_journal)
    assert "left untouched" in one_line(refused.value)
    assert snapshot(old_journal) == before


# -- item 14: foreign files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("opener", OPENERS, ids=OPENER_IDS)
def test_a_foreign_database_is_refused_untouched(foreign_db: Path, opener: Callable) -> None:
    before = snapshot(foreign_db)
    with pytest.raises(JournalUnavailableError) as refused:
        opener(foreign_db)
    message = one_line(refused.value)
    assert str(foreign_db) in message and "not an ipymusicgen journal" in message and "untouched" in message
    assert snapshot(foreign_db) == before
    db = sqlite3.connect(f"file:{foreign_db}?mode=ro", uri=True)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master ORDER BY name")] == [
        "albums",
        "sqlite_autoindex_tasks_1",
        "tasks",
    ]
    db.close()


@pytest.mark.parametrize("opener", OPENERS, ids=OPENER_IDS)
def test_a_text_file_is_refused_before_any_chmod(tmp_path: Path, opener: Callable) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("my shopping list\n" * 200)
    path.chmod(0o664)
    before = snapshot(path)
    with pytest.raises(JournalUnavailableError) as refused:
        opener(path)
    assert "not an ipymusicgen journal" in one_line(refused.value)
    assert snapshot(path) == before


def test_a_database_with_another_application_id_is_refused_even_with_our_tables(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id = 12345")
    db.commit()
    db.close()
    before = snapshot(path)
    with pytest.raises(JournalUnavailableError, match="not an ipymusicgen journal"):
        Journal(path)
    assert snapshot(path) == before


def test_a_new_journal_carries_the_application_id(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone()[0] == storage_db.APPLICATION_ID
    db.close()


def test_an_old_journal_without_the_id_still_opens_and_is_given_it(old_journal: Path) -> None:
    with Journal(old_journal) as journal:
        assert len(journal.attempts()) == 6
    db = sqlite3.connect(old_journal)
    assert db.execute("PRAGMA application_id").fetchone()[0] == storage_db.APPLICATION_ID
    db.close()


def test_an_empty_file_is_made_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    path.touch()
    with Journal(path) as journal:
        journal.begin("generate", "https://api.example", {"style": "s"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- item 15: an old journal on a read-only location ---------------------------------------------------------


@pytest.fixture
def frozen(old_journal: Path) -> Iterator[Path]:
    """The old journal in a folder nothing may write to (chattr +i as root, who ignores modes)."""
    folder = old_journal.parent
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(old_journal), str(folder)], check=True)
        undo = ["chattr", "-i", str(old_journal), str(folder)]
    else:
        old_journal.chmod(0o444)
        folder.chmod(0o555)
        undo = None
    try:
        yield old_journal
    finally:
        if undo:
            subprocess.run(undo, check=True)
        else:
            folder.chmod(0o755)
            old_journal.chmod(0o644)


def test_an_old_journal_on_a_read_only_location_opens_to_read_in_every_store(frozen: Path) -> None:
    before = snapshot(frozen)
    journal = Journal(frozen)
    assert len(journal.attempts()) == 6
    store = BatchStore(frozen)  # the agent server's store: no traceback at start
    assert [r.state for r in store.rows("fixture-batch").values()] == ["complete", "complete"]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # the batch engine says so in one line
        store.open_batch("new", [("h", "{}", False)])
    store.close()
    journal.close()
    assert snapshot(frozen) == before


@pytest.mark.parametrize("opener", [LibraryStore, _library], ids=["LibraryStore", "library"])
def test_the_library_of_an_old_read_only_journal_says_in_one_line_what_to_do(frozen: Path, opener: Callable) -> None:
    """The library reads tables only the upgrade makes (ratings, comparisons): it says so at open, not at a query."""
    before = snapshot(frozen)
    with pytest.raises(LibraryWriteError) as refused:
        opener(frozen)
    message = one_line(refused.value)
    assert str(frozen) in message and "older version" in message and "left unchanged" in message
    assert "copy it somewhere writable" in message
    assert snapshot(frozen) == before


def test_a_current_journal_on_a_read_only_location_is_read_by_every_store(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal:
        journal.submitted(journal.begin("generate", "https://api.example", {"title": "Kept"}), ["t1"])
    subprocess.run(["chattr", "+i", str(path), str(tmp_path)], check=True)
    try:
        before = snapshot(path)
        with pytest.warns(JournalWriteWarning, match="could not index"):  # listed, searchable once writable
            opened = Library(path)
        assert [s.id for s in opened.songs()] == ["t1"] and opened.leaderboard() is not None
        with pytest.raises(LibraryWriteError):
            opened.favourite("t1")
        opened.close()
        with Journal(path) as journal:  # read as it is (no -shm can be made here), paid calls refused
            assert [e.id for e in journal.unfinished()] == ["t1"]
            with pytest.raises(JournalUnavailableError, match="not sent"):
                journal.begin("generate", "https://api.example", {"style": "never sent"})
        store = BatchStore(path)
        assert store.names() == []
        store.close()
        assert snapshot(path) == before
    finally:
        subprocess.run(["chattr", "-i", str(path), str(tmp_path)], check=True)


def test_the_agent_desk_starts_on_an_old_read_only_journal(frozen: Path) -> None:
    before = snapshot(frozen)
    client = MusicClient("a-real-looking-key", base_url="http://127.0.0.1:9", journal=Journal(frozen))
    desk = AgentDesk(client)
    assert [r.state for r in desk.store.rows("fixture-batch").values()] == ["complete", "complete"]
    client.close()
    desk.store.close()
    assert snapshot(frozen) == before


# -- item 16: a damaged journal --------------------------------------------------------------------------------


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """A journal of this version with its second page overwritten (the header and schema page are intact)."""
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal:
        for n in range(50):
            journal.begin("generate", "https://api.example", {"style": f"song {n}" * 20})
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    for side in SIDE_FILES:
        Path(f"{path}{side}").unlink(missing_ok=True)
    with path.open("r+b") as f:
        f.seek(page)
        f.write(b"\xa5" * page)
    return path


def test_a_damaged_journal_is_refused_by_every_entry_point_with_the_remedy(damaged: Path, tmp_path: Path) -> None:
    before = snapshot(damaged)
    messages = []
    for opener in OPENERS:
        with pytest.raises(JournalUnavailableError) as refused:
            opener(damaged)
        messages.append(one_line(refused.value))
    client = MusicClient("a-real-looking-key", base_url="http://127.0.0.1:9", journal=False)
    with pytest.raises(JournalUnavailableError) as from_desk:
        BatchStore(damaged)  # what the agent desk opens for its batches
    client.close()
    messages.append(one_line(from_desk.value))
    assert len(set(messages)) == 1, messages
    message = messages[0]
    assert str(damaged) in message and "damaged" in message
    assert "move it aside" in message.lower() and "backup" in message and ".recover" in message
    assert snapshot(damaged) == before
    with Journal(tmp_path / "fresh.sqlite3") as fresh:  # a fresh journal beside it works
        fresh.begin("generate", "https://api.example", {"style": "s"})


def test_a_file_with_a_damaged_header_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(path).close()
    data = bytearray(path.read_bytes())
    data[16:18] = b"\x00\x03"  # an impossible page size
    path.write_bytes(bytes(data))
    path.chmod(0o600)
    before = snapshot(path)
    with pytest.raises(JournalUnavailableError) as refused:
        Journal(path)
    assert str(path) in one_line(refused.value)
    assert snapshot(path) == before


def serve_an_agent(journal: Path) -> subprocess.CompletedProcess[str]:
    """`python -m ipymusicgen mcp` on `journal`, its stdin closed at once (a host that went away)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(MUSICGEN_JOURNAL=str(journal), MUSICGEN_API_KEY="sk-a-real-looking-key")
    env.update(MUSICGEN_BASE_URL="http://127.0.0.1:9", MUSICGEN_V2_BASE_URL="http://127.0.0.1:9")
    return subprocess.run(
        [sys.executable, "-m", "ipymusicgen", "mcp"],
        input="",  # a pipe closed at once (/dev/null cannot be watched by the server's event loop)
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_the_agent_server_starts_on_an_old_journal_on_a_read_only_location(frozen: Path) -> None:
    before = snapshot(frozen)
    done = serve_an_agent(frozen)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(frozen) == before


def test_the_agent_server_refuses_a_damaged_journal_in_one_line(damaged: Path) -> None:
    before = snapshot(damaged)
    done = serve_an_agent(damaged)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    with pytest.raises(JournalUnavailableError) as direct:
        Journal(damaged)
    assert line == f"error: {direct.value}"
    assert snapshot(damaged) == before


def test_damage_found_after_opening_is_the_same_one_line_in_every_store(tmp_path: Path) -> None:
    """A journal damaged while open (a disk error, another program): each store's next read says so, with the remedy."""
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal:
        for n in range(50):
            journal.begin("generate", "https://api.example", {"style": f"song {n}" * 20})
    opened = [Journal(path), LibraryStore(path), BatchStore(path)]
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = other.execute("PRAGMA page_size").fetchone()[0]
    attempts_root = other.execute("SELECT rootpage FROM sqlite_master WHERE name = 'attempts'").fetchone()[0]
    batches_root = other.execute("SELECT rootpage FROM sqlite_master WHERE name = 'batches'").fetchone()[0]
    with path.open("r+b") as f:
        for root in (attempts_root, batches_root):
            f.seek((root - 1) * page)
            f.write(b"\xa5" * page)
    other.execute("PRAGMA user_version = user_version")  # a write elsewhere: every reader drops its cached pages
    other.execute(f"PRAGMA user_version = {LATEST}")
    other.close()
    journal, library, batches = opened
    reads = [
        journal.attempts,
        lambda: library._rows("SELECT * FROM attempts"),
        batches.names,
    ]
    messages = []
    for read in reads:
        with pytest.raises(JournalUnavailableError) as refused:
            read()
        messages.append(one_line(refused.value))
    assert all("is damaged" in m and ".recover" in m and str(path) in m for m in messages), messages
    for store in opened:
        close(store)


@pytest.mark.parametrize("opener", OPENERS, ids=OPENER_IDS)
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_path_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, opener: Callable, kind: str) -> None:
    path = tmp_path / "journal.sqlite3"
    if kind == "fifo":
        os.mkfifo(path, 0o644)  # reading it would wait forever for a writer
    else:
        path.mkdir(mode=0o755)
    with pytest.raises(JournalUnavailableError) as refused:
        opener(path)
    assert str(path) in one_line(refused.value)
    assert stat.S_IMODE(path.stat().st_mode) == (0o644 if kind == "fifo" else 0o755)


def test_a_client_on_a_damaged_journal_sends_nothing_and_says_the_same_line(
    damaged: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.sandbox import Sandbox

    before = snapshot(damaged)
    with pytest.raises(JournalUnavailableError) as direct:
        Journal(damaged)
    monkeypatch.setenv("MUSICGEN_JOURNAL", str(damaged))
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={"real-looking-key": 50}) as service:
        with (
            MusicClient("real-looking-key", base_url=service.base_url, v2_base_url=service.v2_base_url) as client,
            pytest.raises(JournalUnavailableError) as refused,
        ):
            client.generate(action="auto", style="never sent")
        assert service.request_counts().get("/v1/music/generate", 0) == 0
        assert service.credits("real-looking-key") == 50
    assert one_line(refused.value) == str(direct.value)
    assert snapshot(damaged) == before


KILLED_BEFORE_CHECKPOINT = """
import os, sqlite3, sys
from ipymusicgen.storage import migrations
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
for step in migrations.MIGRATIONS[:8]:  # as the previous release wrote it: version 8, no application id
    step(db)
db.execute("PRAGMA user_version = 8")
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
db.execute("PRAGMA wal_autocheckpoint = 0")
db.execute("INSERT INTO attempts (id, endpoint, host, payload, created_at) VALUES ('a1', 'generate', 'h', '{}', 0)")
os._exit(0)  # killed: the last writes are only in the -wal file
"""


def test_a_previous_release_journal_killed_before_its_checkpoint_opens_and_gets_the_id(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    subprocess.run([sys.executable, "-c", KILLED_BEFORE_CHECKPOINT, str(path)], check=True, timeout=120)
    assert Path(f"{path}-wal").stat().st_size > 0
    assert path.read_bytes()[68:72] == b"\x00\x00\x00\x00"  # no id: recognised by its schema
    with Journal(path) as journal:
        assert [a.id for a in journal.attempts()] == ["a1"]
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone()[0] == storage_db.APPLICATION_ID
    assert db.execute("PRAGMA user_version").fetchone()[0] == LATEST
    db.close()


def _newest_wal_page(wal: Path, number: int) -> bytes:
    """The newest copy of page `number` in a WAL file (a 32-byte header, then frames: a 24-byte header and a page)."""
    data = wal.read_bytes()
    size = int.from_bytes(data[8:12], "big")
    found = [data[at + 24 : at + 24 + size] for at in range(32, len(data) - size - 23, size + 24)
             if int.from_bytes(data[at : at + 4], "big") == number]  # fmt: skip
    assert found, f"page {number} is not in {wal}"
    return found[-1]


def _caught_mid_checkpoint(path: Path) -> sqlite3.Connection:
    """Another kernel's journal with no application id yet (a previous release's, or a new one whose first steps
    are still in its WAL), caught as that kernel checkpoints it: its newest first page written, not yet the rest.
    The writer's connection is returned, still open (its WAL and -shm beside the file)."""
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE filler (x TEXT)")
    writer.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,) for _ in range(40)])
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    for step in migrations.MIGRATIONS[:8]:  # the schema's pages are in the WAL only
        step(writer)
    writer.execute("PRAGMA user_version = 8")
    with path.open("r+b") as main:
        main.write(_newest_wal_page(Path(f"{path}-wal"), 1))
    reader = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):  # the state it is in, read alone
        reader.execute("SELECT name FROM sqlite_master").fetchall()
    reader.close()
    return writer


def test_a_journal_caught_mid_checkpoint_is_read_again_once_the_checkpoint_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read alone, the half-checkpointed file looked damaged, and the user was told to move the journal aside: it is
    read again while another connection holds it in WAL mode, and the checkpoint done, it is a journal as any."""
    path = tmp_path / "journal.sqlite3"
    writer = _caught_mid_checkpoint(path)
    pauses: list[float] = []

    def checkpoint_done(seconds: float) -> None:  # the other kernel's checkpoint ends while this one waits
        pauses.append(seconds)
        writer.close()

    monkeypatch.setattr(storage_db, "_pause", checkpoint_done)
    storage_db.recognise(path)
    assert len(pauses) == 1
    with Journal(path) as journal:
        assert journal.attempts() == []


def test_a_journal_still_mid_checkpoint_is_busy_not_damaged_and_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.sqlite3"
    writer = _caught_mid_checkpoint(path)
    try:
        before = snapshot(path)
        monkeypatch.setattr(storage_db, "CHECKPOINT_WAIT", 0.0)
        with pytest.raises(storage_db.JournalBusyError) as busy:
            Journal(path)
        message = one_line(busy.value)
        assert "being written by another program" in message and "Try again" in message
        assert "damaged" not in message and "Move it aside" not in message
        assert snapshot(path) == before  # no side file made or removed, the file as it was
    finally:
        writer.close()

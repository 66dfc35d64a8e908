"""Odd numbers for a batch and decomposed unicode in a library search, over the real sandbox."""

from __future__ import annotations

import shutil
import unicodedata
from pathlib import Path

import pytest

from ipymusicgen import Journal, MusicClient
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.batch.drivers import BatchError, run_batch, run_batch_async
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.batches import BatchStore

GENERATE = "/v1/music/generate"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("budget", float("nan"), "budget"),
        ("budget", "10", "budget"),
        ("concurrency", 2.5, "concurrency"),
        ("concurrency", "3", "concurrency"),
        ("stall_timeout", float("nan"), "stall_timeout"),
        ("stall_timeout", -1, "stall_timeout"),
        ("stall_timeout", 0, "stall_timeout"),
    ],
)
def test_odd_batch_numbers_are_refused_before_anything_is_sent(
    client: MusicClient, sandbox: Sandbox, option: str, value: object, message: str
) -> None:
    # a NaN budget compared False against every cost: the batch would spend without limit
    with pytest.raises(BatchError, match=message):
        run_batch(client, [{"style": "lo-fi", "mv": "MFV2.0"}], store=BatchStore(None), **{option: value})
    assert sandbox.request_counts().get(GENERATE, 0) == 0


def test_odd_batch_numbers_are_refused_by_the_async_face_too(sandbox: Sandbox) -> None:
    import asyncio

    async def run() -> None:
        async with sandbox.async_client() as aclient:
            with pytest.raises(BatchError, match="budget"):
                await run_batch_async(aclient, [{"style": "lo-fi", "mv": "MFV2.0"}], budget=float("nan"),
                                      store=BatchStore(None))  # fmt: skip

    asyncio.run(run())
    assert sandbox.request_counts().get(GENERATE, 0) == 0


def test_whole_numbers_of_any_kind_are_accepted(client: MusicClient) -> None:
    import numpy as np

    batch = run_batch(client, [{"style": "lo-fi", "mv": "MFV2.0"}], concurrency=np.int64(2), budget=np.int64(5),
                      stall_timeout=float("inf"), store=BatchStore(None))  # fmt: skip
    assert batch.counts()["complete"] == 1


@pytest.mark.slow
def test_a_search_typed_in_decomposed_unicode_finds_the_song(sandbox: Sandbox, tmp_path: Path) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "songs") as client:
        ids = client.generate(action="custom", title="Naïve Café", style="chanson",
                              lyrics="[Verse]\nrésumé of a crème brûlée").ids  # fmt: skip
        client.wait(ids)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
    with Library(journal_path) as library:
        for typed in ("naïve", "Café", "crème brûlée", "résum"):
            decomposed = unicodedata.normalize("NFD", typed)  # what macOS input methods often send
            assert {s.id for s in library.songs(text=typed)} == set(ids), typed
            assert {s.id for s in library.songs(text=decomposed)} == set(ids), ascii(decomposed)
            assert library.count(text=decomposed) == len(ids)


@pytest.mark.slow
def test_a_sandbox_with_its_own_key_never_archives_into_the_users_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the sandbox is known by identity (it made the client), not by its demo key alone
    monkeypatch.delenv("MUSICGEN_ARCHIVE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    from ipymusicgen.archive.archiver import archive_dir_for, archive_of, default_archive_dir

    assert str(default_archive_dir()).startswith(str(tmp_path / "xdg"))
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={"my-test-key": 50}) as own:
        with own.client(journal=Journal(tmp_path / "journal.sqlite3")) as client:
            home = archive_of(client)
            assert home is not None and archive_dir_for(client) == home.sandbox_dir()
            ids = client.generate(action="auto", style="drone").ids
            client.wait(ids)
            archiver = archiver_of(client)
            assert archiver is not None and archiver.join(30)
            assert archiver.archived  # it archived, into its own temp folder
        async_client = own.async_client()
        assert archive_dir_for(async_client) == home.sandbox_dir()  # the same wiring's throwaway folder
    assert not (tmp_path / "xdg").exists() or not any((tmp_path / "xdg").rglob("*.mp3"))


@pytest.mark.slow
def test_an_archive_killed_mid_download_leaves_no_partial_file_once_archiving_runs_again(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    import os
    import signal
    import socket
    import sqlite3
    import subprocess
    import sys
    import threading

    from helpers import wait_until

    from ipymusicgen.archive.archiver import archive_song
    from ipymusicgen.storage.library import LibraryStore

    journal_path, songs = tmp_path / "journal.sqlite3", tmp_path / "songs"
    with sandbox.client(journal=Journal(journal_path), archive=False) as client:
        ids = client.generate(action="auto", style="half a song").ids
        client.wait(ids)
    held: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:  # an MP3 that stops half way and never finishes
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: 400000\r\n\r\n"
            conn.sendall(head + b"\xff" * 150000)
            held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    with sqlite3.connect(journal_path) as db:
        real_url = db.execute("SELECT audio_url FROM tasks WHERE id = ?", (ids[0],)).fetchone()[0]
        db.execute("UPDATE tasks SET audio_url = ? WHERE id = ?",
                   (f"http://127.0.0.1:{listener.getsockname()[1]}/files/a.mp3", ids[0]))  # fmt: skip
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from ipymusicgen import MusicClient\nfrom ipymusicgen.archive.archiver import archive_song\n"
        "from ipymusicgen.storage.library import LibraryStore\n"
        "store = LibraryStore(sys.argv[1]); store.sync()\n"
        "client = MusicClient('k', base_url='http://127.0.0.1:9', journal=False, archive=False)\n"
        "archive_song(client, store, Path(sys.argv[2]), sys.argv[3])\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(journal_path), str(songs), ids[0]])
    try:
        wait_until(lambda: any(p.is_file() and p.stat().st_size > 0 for p in songs.rglob("*")), "a half download")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        listener.close()
        for conn in held:
            conn.close()
    assert any(songs.glob(".ipymusicgen-archive-*"))  # the killed process left its half download behind
    with sqlite3.connect(journal_path) as db:
        db.execute("UPDATE tasks SET audio_url = ? WHERE id = ?", (real_url, ids[0]))
    store = LibraryStore(journal_path)
    try:
        with sandbox.client(journal=False, archive=False) as downloader:
            for task_id in ids:  # the re-run archives both songs, and sweeps what the dead process left
                archive_song(downloader, store, songs, task_id)
    finally:
        store.close()
    assert sorted(p.name for p in songs.iterdir() if p.name.startswith(".")) == []
    assert len(list(songs.glob("*.mp3"))) == 2


@pytest.mark.slow
def test_a_journal_locked_while_a_batch_create_is_answered_keeps_the_row_and_its_ids(
    sandbox: Sandbox, tmp_path: Path, short_locks: float
) -> None:
    """Another kernel holds the journal (BEGIN EXCLUSIVE) as a create is answered: the batch neither raises a
    sqlite3 error nor loses the row's ids; the row's state reaches the file once the lock is let go."""
    import sqlite3
    import warnings

    from helpers import wait_until

    from ipymusicgen.storage.batches import BatchStore

    path = tmp_path / "journal.sqlite3"
    journal = Journal(path, busy_timeout=0.05)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    sandbox.set_faults("slow:seconds=3:path=/v1/music/generate")
    try:
        with sandbox.client(journal=journal) as client, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the client's "not journalled yet" warning, from the batch's thread
            batch = client.batch([{"style": "held", "mv": "MFV2.0"}], name="held", wait=False)
            wait_until(lambda: sandbox.request_counts().get(GENERATE, 0) == 1, "the create to reach the service")
            holder.execute("BEGIN EXCLUSIVE")
            try:
                wait_until(lambda: len(batch.rows[0].ids) == 2 or batch.error is not None, "the create's answer")
            finally:
                holder.execute("COMMIT")
            assert batch.error is None and batch.rows[0].state in ("submitted", "complete")
            ids = batch.rows[0].ids
            batch.wait()
            assert batch.error is None and batch.rows[0].state == "complete"
        stored = BatchStore(path)
        try:
            (row,) = stored.rows("held").values()
            assert row.ids == ids and row.state != "sending"
        finally:
            stored.close()
    finally:
        holder.close()
        journal.close()


@pytest.mark.slow
def test_a_library_opened_while_another_kernel_holds_the_journal_lists_songs_and_says_why_a_choice_waits(
    sandbox: Sandbox, tmp_path: Path, short_locks: float
) -> None:
    import sqlite3
    import warnings

    from ipymusicgen.errors import MusicGenError
    from ipymusicgen.storage.journal import JournalWriteWarning

    path = tmp_path / "journal.sqlite3"
    Library(path).close()  # the library's tables exist (as after any archived song)
    with sandbox.client(journal=Journal(path), archive=False) as client:  # journalled, never indexed yet
        ids = client.generate(action="auto", style="held open").ids
        client.wait(ids)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            library = Library(path)  # indexing must wait, the songs must not
        try:
            assert any(w.category is JournalWriteWarning for w in caught)
            assert {s.id for s in library.songs()} == set(ids)
            with pytest.raises(MusicGenError, match="locked") as info:
                library.favourite(ids[0])
            assert not isinstance(info.value, sqlite3.Error)
        finally:
            library.close()
        fresh = tmp_path / "fresh.sqlite3"  # a journal of an older version: the library's schema is still to make
        shutil.copyfile(Path(__file__).parent / "fixtures" / "journal-v0.sqlite3", fresh)
        other = sqlite3.connect(fresh, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        with pytest.raises(MusicGenError, match="locked"):  # a first open cannot make its tables: said plainly
            Library(fresh)
        other.execute("COMMIT")
        other.close()
    finally:
        holder.execute("COMMIT")
        holder.close()
    with Library(path) as library:  # the lock let go: indexed, searchable, and the choice can be made
        assert {s.id for s in library.songs(text="held")} == set(ids)
        library.favourite(ids[0])
        assert library.song(ids[0]).favourite


@pytest.mark.slow
def test_the_library_magic_searches_words_with_an_apostrophe(sandbox: Sandbox, tmp_path: Path) -> None:
    from IPython.core.error import UsageError

    from ipymusicgen.notebook.library_magics import parse_library_line

    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "songs") as client:
        ids = client.generate(action="custom", title="Don't Stop Singin'", style="soul", lyrics="la").ids
        client.wait(ids)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
    assert parse_library_line("don't stop --state ready") == ("don't stop", {"state": "ready"})
    assert parse_library_line("singin' soul") == ("singin' soul", {})
    with pytest.raises(UsageError):
        parse_library_line('"unclosed')  # a quote the user opened is still theirs to close
    with Library(journal_path) as library:
        for line in ("don't stop", "singin' soul", "DON'T"):
            text, _ = parse_library_line(line)
            assert {s.id for s in library.songs(text=text)} == set(ids), line


def test_library_pages_and_times_take_odd_numbers_without_sqlite_errors(sandbox: Sandbox, tmp_path: Path) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=False) as client:
        ids = client.generate(action="auto", style="odd numbers").ids
        client.wait(ids)
    with Library(journal_path) as library:
        assert len(library.songs(limit=10**30)) == 2 and len(library.songs(offset=10**30)) == 0  # no OverflowError
        assert len(library.songs(limit=None, offset=None)) == 2 and len(library.songs(limit=-1)) == 0
        assert len(library.songs(text=2)) == 0  # a number typed as the text is searched as text
        for bad in ({"limit": float("nan")}, {"offset": float("inf")}, {"limit": "ten"}, {"since": float("nan")}):
            with pytest.raises(ValueError, match=next(iter(bad))):
                library.songs(**bad)


@pytest.mark.slow
def test_bytes_that_are_not_audio_are_an_archive_error_not_the_song(sandbox: Sandbox, tmp_path: Path) -> None:
    """Bytes no audio header starts (served as audio/mpeg) are not kept as the song: an archive error, retried."""
    import socket
    import sqlite3
    import threading

    from ipymusicgen.archive.archiver import archive_song
    from ipymusicgen.archive.sniff import NotAudioError
    from ipymusicgen.storage.library import LibraryStore

    journal_path, songs = tmp_path / "journal.sqlite3", tmp_path / "songs"
    with sandbox.client(journal=Journal(journal_path), archive=False) as client:
        ids = client.generate(action="auto", style="undecodable").ids
        client.wait(ids)
    listener = socket.create_server(("127.0.0.1", 0))
    body = b"RIFF-not-really" + bytes(range(256)) * 64  # not audio miniaudio can read

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                head = f"HTTP/1.1 200 OK\r\nContent-Type: audio/mpeg\r\nContent-Length: {len(body)}\r\n"
                conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)

    threading.Thread(target=serve, daemon=True).start()
    with sqlite3.connect(journal_path) as db:
        db.execute("UPDATE tasks SET audio_url = ?, cover_url = NULL WHERE id = ?",
                   (f"http://127.0.0.1:{listener.getsockname()[1]}/files/odd.mp3", ids[0]))  # fmt: skip
    store = LibraryStore(journal_path)
    try:
        store.sync()
        with sandbox.client(journal=False, archive=False) as downloader, pytest.raises(NotAudioError):
            archive_song(downloader, store, songs, ids[0])
        assert not [p for p in songs.iterdir() if p.is_file()]  # nothing kept under the song's name
        with Library(journal_path) as library:
            assert library.song(ids[0]).archive_path is None
    finally:
        store.close()
        listener.close()

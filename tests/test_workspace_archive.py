"""A workspace's archive and its news, without a service: listeners that raise, vanish or unsubscribe; throwaway
folders of its own, removed once however often it is closed; a closed archive takes no new client's songs."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ipymusicgen.archive.workspace_archive as workspace_archive
from ipymusicgen import MusicClient
from ipymusicgen.archive.events import ArchiveEvents
from ipymusicgen.archive.workspace_archive import WorkspaceArchive

WAIT = 30.0


class Ear:
    def __init__(self) -> None:
        self.heard: list[tuple[str, Path | None, Any, str | None]] = []

    def hear(self, task_id: str, path: Path | None, peaks: Any, error: str | None) -> None:
        self.heard.append((task_id, path, peaks, error))


@pytest.fixture
def client(clean_env: None) -> Iterator[MusicClient]:
    """A client that talks to nothing (an unroutable host), keeps no journal and archives nowhere by itself."""
    with MusicClient("k-archive-unit", base_url="https://api.example.invalid", journal=False, archive=False) as made:
        yield made


def test_a_listener_that_raises_keeps_neither_the_archive_nor_the_others_from_hearing() -> None:
    events, ear = ArchiveEvents(), Ear()

    def broken(*_: Any) -> None:
        raise RuntimeError("a closed view")

    events.subscribe(broken)
    events.subscribe(ear.hear)
    events.announce("t-1", Path("/songs/a.mp3"), [[-0.5, 0.5]], None)
    events.announce("t-2", None, None, "DownloadError: 404")
    assert [word[0] for word in ear.heard] == ["t-1", "t-2"]
    assert ear.heard[1][3] == "DownloadError: 404"


def test_a_view_is_held_weakly_and_may_unsubscribe() -> None:
    events, kept, dropped = ArchiveEvents(), Ear(), Ear()
    events.subscribe(kept.hear)
    events.subscribe(dropped.hear)
    del dropped
    gc.collect()
    assert events.listening
    events.unsubscribe(kept.hear)
    events.unsubscribe(Ear().hear)  # one never subscribed: ignored
    assert not events.listening
    events.announce("t-3", None, None, None)
    assert kept.heard == []


def test_two_archives_hear_apart() -> None:
    first, second, ear_first, ear_second = WorkspaceArchive(), WorkspaceArchive(), Ear(), Ear()
    first.events.subscribe(ear_first.hear)
    second.events.subscribe(ear_second.hear)
    first.events.announce("only-first", None, None, None)
    assert [w[0] for w in ear_first.heard] == ["only-first"] and ear_second.heard == []
    first.close()
    second.close()


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [(False, None), (None, "env"), (True, "env"), ("", "env"), ("songs here", "chosen")],
)
def test_the_chosen_folder_wins_over_the_environment(
    client: MusicClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: Any, expected: str | None
) -> None:
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "from env"))
    home = WorkspaceArchive()
    home.choose(tmp_path / chosen if isinstance(chosen, str) and chosen else chosen)
    where = {None: None, "env": tmp_path / "from env", "chosen": tmp_path / "songs here"}[expected]
    assert home.directory_for(client) == where
    assert home.directory_for(client, tmp_path / "given") == tmp_path / "given"  # the client's own archive= wins
    assert home.directory_for(client, False) is None
    home.close()


def test_each_archive_makes_its_own_throwaway_folders_and_closing_removes_them_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workspace_archive, "SANDBOX_EXIT_WAIT", 600.0)  # a close that waited on itself would hang
    first, second = WorkspaceArchive(), WorkspaceArchive()
    folders = [first.sandbox_dir(), second.sandbox_dir(), first.extras_file().parent, second.extras_file().parent]
    assert len(set(folders)) == 4 and all(folder.is_dir() for folder in folders)
    assert first.sandbox_dir() == folders[0]  # made once
    first.close()
    assert not folders[0].exists() and not folders[2].exists()
    assert folders[1].is_dir() and folders[3].is_dir()  # the other archive's stay
    again = threading.Thread(target=first.close, daemon=True)
    again.start()
    again.join(WAIT)
    assert not again.is_alive()  # closing twice is harmless and waits for nothing
    with first.archiving_into(folders[0]) as allowed:  # a song in hand after the close: refused at once
        assert allowed is False
    second.close()
    assert not folders[1].exists() and not folders[3].exists()


def test_a_closed_archive_takes_no_songs_of_a_client_attached_late(client: MusicClient, tmp_path: Path) -> None:
    home = WorkspaceArchive()
    home.close()
    archiver = home.attach(client, tmp_path / "late", downloader=client)
    assert archiver is not None and archiver.stopped
    assert home.archiver_of(client) is archiver
    assert archiver.wait_archived([], 1) == {}
    assert not (tmp_path / "late").exists()


def test_an_archiver_is_found_from_its_own_archive_only(client: MusicClient, tmp_path: Path) -> None:
    mine, other = WorkspaceArchive(), WorkspaceArchive()
    archiver = mine.attach(client, tmp_path / "songs", downloader=client)
    assert mine.archiver_of(client) is archiver and other.archiver_of(client) is None
    assert mine.attach(client, False) is None
    mine.close()
    other.close()
    assert archiver is not None and archiver.stopped

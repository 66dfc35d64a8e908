"""A library view hears the archive news of its own workspace only (issue 38: two workspaces in one process share
nothing). A view given a workspace's library and no client used to listen to the session's current workspace:
songs kept by its own workspace never refreshed it, and the session's songs (another file) did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.widgets.library import LibraryView
from ipymusicgen.workspace import session
from ipymusicgen.workspace.workspace import Workspace


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[Workspace, Workspace]]:
    """Two workspaces of the test's own on two files (neither the session's); nothing is ever sent."""
    settings = Settings.from_env().with_changes(
        api_key="test-key-never-sent", base_url="http://127.0.0.1:9", v2_base_url="http://127.0.0.1:9"
    )
    made = [Workspace(settings, journal_path=tmp_path / f"{name}.sqlite3") for name in ("one", "two")]
    for workspace in made:
        workspace.archive.choose(False)
    try:
        yield made[0], made[1]
    finally:
        for workspace in made:
            workspace.close()


class Counted(LibraryView):
    """A view that notes the archive news it hears (each one would refresh it)."""

    def __init__(self, library: Library, **kwargs: object) -> None:
        self.heard: list[str] = []
        super().__init__(library, **kwargs)  # type: ignore[arg-type]

    def _archived(self, task_id: str, _path: object, _peaks: object, _error: object) -> None:
        self.heard.append(task_id)


view_of = Counted


def test_a_view_of_a_workspaces_library_hears_that_workspace_and_no_other(
    two: tuple[Workspace, Workspace], tmp_path: Path
) -> None:
    first, second = two
    session_events = session.current_workspace().archive.events  # the session's own workspace, another file
    libraries = [first.library(), second.library(), first.library()]
    views = [view_of(library) for library in libraries]
    try:
        first.archive.events.announce("made-in-first", None, None, "kept")
        second.archive.events.announce("made-in-second", None, None, "kept")
        session_events.announce("made-in-the-session", None, None, "kept")
        assert [view.heard for view in views] == [["made-in-first"], ["made-in-second"], ["made-in-first"]]
    finally:
        for view in views:
            view.close()
        for library in libraries:
            library.close()


def test_a_library_of_no_workspace_hears_no_workspaces_news(two: tuple[Workspace, Workspace], tmp_path: Path) -> None:
    """A script's own `Library(path)` on a file no workspace here holds: nothing any workspace makes is its news;
    a client given beside it still brings its own workspace's."""
    first, second = two
    with Library(tmp_path / "script.sqlite3") as own:
        alone, with_client = view_of(own), view_of(own, client=second.client)
        try:
            for workspace in (first, second, session.current_workspace()):
                workspace.archive.events.announce(f"from {workspace.path.name}", None, None, None)
            assert alone.heard == [] and with_client.heard == ["from two.sqlite3"]
        finally:
            alone.close()
            with_client.close()


def test_a_view_open_on_another_file_neither_hears_nor_holds_up_this_files_archive(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """Hand-made clients share the session's wiring, so every library view made beside one heard every song any of
    them archived, each a whole refresh on the archiver's thread: a view left open on a slow or locked file held up
    every archiver of the process (CI saw songs of unrelated tests not archived within 30 and 60 s). A view hears
    its own file's songs only."""
    import threading

    from ipymusicgen.storage.journal import Journal

    release = threading.Event()

    class Stuck(Counted):
        def _archived(self, task_id: str, _path: object, _peaks: object, _error: object) -> None:
            self.heard.append(task_id)
            release.wait(120)  # a refresh on a file another process holds locked

    with sandbox.client(journal=Journal(tmp_path / "mine.sqlite3"), archive=tmp_path / "songs") as client:
        other, mine = Library(tmp_path / "other.sqlite3"), Library(tmp_path / "mine.sqlite3")
        stuck, own = Stuck(other, client=client), Counted(mine, client=client)
        try:
            ids = list(client.generate(action="auto", style="glass harmonica").ids)
            client.wait(ids, timeout=30, archived=True)
            assert stuck.heard == [] and set(own.heard) == set(ids)
        finally:
            release.set()
            for closing in (stuck, own, other, mine):
                closing.close()


def test_songs_of_a_journal_opened_by_a_relative_path_are_still_its_views_news_after_a_change_of_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal keeps its path as given; the archiver named its file by that path at each song, so after a
    notebook's `%cd` a relative one named another file and the view of the journal's library stopped hearing."""
    from types import SimpleNamespace

    from ipymusicgen.archive.archiver import Archiver
    from ipymusicgen.archive.events import ArchiveEvents
    from ipymusicgen.storage.journal import Journal

    (tmp_path / "project").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    heard: list[str] = []
    events = ArchiveEvents()
    with Journal("journal.sqlite3") as journal:

        def hear(task_id: str, *_: object) -> None:
            heard.append(task_id)

        events.subscribe(hear, journal="journal.sqlite3")  # a view of the library opened here, by the same path
        archiver = SimpleNamespace(client=SimpleNamespace(journal=journal))
        events.announce("before", None, None, None, journal=Archiver.journal_path.fget(archiver))  # type: ignore[attr-defined]
        monkeypatch.chdir(tmp_path / "elsewhere")
        events.announce("after", None, None, None, journal=Archiver.journal_path.fget(archiver))  # type: ignore[attr-defined]
        assert heard == ["before", "after"]
        assert journal.file == (tmp_path / "project" / "journal.sqlite3").resolve()


def test_a_view_collected_while_the_archive_news_are_read_closes_without_waiting_for_its_own_thread() -> None:
    """A collection can start at any allocation, also while an archiver's thread holds the news' lock (reading who
    listens); a view collected then closes itself and unsubscribes on that same thread. With a plain lock that
    thread waited for itself for ever: a whole-suite run hung so, its archiver in `unsubscribe` under `_alive`
    (`Widget.__del__` -> `LibraryView.close`), and the test's report in `ArchiveEvents.__repr__` behind it."""
    import threading

    from helpers import WAIT

    from ipymusicgen.archive.events import ArchiveEvents

    events = ArchiveEvents()
    heard: list[str] = []

    class View:
        def hear(self, task_id: str, *_: object) -> None:
            heard.append(task_id)

        def close(self) -> None:  # what `Widget.__del__` does to a library view
            events.unsubscribe(self.hear)

    collected, kept = View(), View()
    events.subscribe(collected.hear)
    events.subscribe(kept.hear)

    def reading_who_listens_when_a_collection_closes_a_view() -> None:
        with events._lock:  # as `_alive` holds it when an allocation in it starts a collection
            collected.close()
        events.announce("after", None, None, None)

    reader = threading.Thread(target=reading_who_listens_when_a_collection_closes_a_view, daemon=True)
    reader.start()
    reader.join(WAIT)
    assert not reader.is_alive(), "the thread waited for itself"
    assert heard == ["after"] and repr(events) == "ArchiveEvents(listeners=1)"

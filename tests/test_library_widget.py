"""The library view (real widget, real journal from the sandbox) and the %musicgen_library magic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import HOSTILE
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from ipymusicgen import Journal, MusicClient
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.notebook.library_magics import parse_library_line
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.widgets.library import LibraryView, files_path
from ipymusicgen.workspace import session


@pytest.fixture
def filled(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Library, list[str], list[str]]]:
    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "songs") as client:
        first = _songs(client, action="custom", title=HOSTILE, style="harp, rain", lyrics="[Verse]\ndrizzle")
        extended = _songs(client, action="extend", continue_song_id=first[0], continue_at=1, style="harp")
    with Library(journal_path) as library:
        yield library, first, extended


def _songs(client: MusicClient, **request: object) -> list[str]:
    ids = client.generate(request).ids
    client.wait(ids)
    archiver = archiver_of(client)
    assert archiver is not None and archiver.join(30)
    return ids


@pytest.mark.slow
def test_cards_carry_waveform_player_and_takes(filled: tuple[Library, list[str], list[str]]) -> None:
    library, first, extended = filled
    view = LibraryView(library, page_size=3)
    assert view.total == 4 and len(view.cards) == 3 and "1–3 of 4" in view.status
    assert [c["id"] for c in view.cards] == [*reversed(extended), first[1]]  # newest first
    card = view.cards[2]
    assert card["title"] == HOSTILE  # text; the browser draws it with textContent
    assert len(card["peaks"]) == 400 and card["audio_url"].startswith("http://127.0.0.1")
    assert card["state"] == "ready" and card["state_label"] == "Ready" and card["call"] and card["take"] == 2
    assert "favourite" in card["actions"]
    assert card["archived_path_label"].startswith("archived:")
    assert not str(card["play_url"]).startswith("/") and card["play_source"]  # no server root here: no files/
    view._on_msg(view, {"kind": "page", "page": 1}, [])
    assert view.page == 1 and len(view.cards) == 1
    view._on_msg(view, {"kind": "search", "text": "drizzle"}, [])
    assert {c["id"] for c in view.cards} == set(first)
    view._on_msg(view, {"kind": "favourite", "id": first[1]}, [])
    assert library.song(first[1]).favourite
    view._on_msg(view, {"kind": "keep", "id": first[1]}, [])  # Keep is drawn on a take shown beside the other
    view._on_msg(view, {"kind": "filter", "filters": {"favourite": True}}, [])
    assert [c["id"] for c in view.cards] == [first[1]] and view.cards[0]["favourite"]
    assert [c["kept"] for c in view.cards] == [True]
    view._on_msg(view, {"kind": "filter", "filters": {"favourite": False}}, [])
    view._on_msg(view, {"kind": "search", "text": ""}, [])
    view._on_msg(view, {"kind": "lineage", "id": extended[0]}, [])
    assert view.lineage[0]["id"] == first[0]
    assert {c["id"] for c in view.cards} == {first[0], *extended}
    assert next(c for c in view.cards if c["id"] == extended[0])["has_lineage"]
    view._on_msg(view, {"kind": "lineage", "id": ""}, [])
    assert view.lineage == [] and view.total == 4
    assert view.spend_total["calls"] == 2 and view.spend_days[0]["songs"] == 4
    view._on_msg(view, {"kind": "favourite", "id": "missing"}, [])
    assert "nothing was done" in view.status  # a song the page does not show
    assert "Library:" in repr(view) and "Spend: 2 call(s)" in repr(view)
    view.close()


@pytest.mark.slow
def test_archived_file_under_a_server_root_plays_through_the_files_api(
    filled: tuple[Library, list[str], list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library, first, _ = filled
    path = library.song(first[0]).archive_path
    assert files_path(path, [tmp_path]) == f"songs/{Path(path or '').name}"
    assert files_path(path, [tmp_path / "elsewhere"]) is None
    monkeypatch.setenv("MUSICGEN_SERVER_ROOT", str(tmp_path))
    view = LibraryView(library)
    card = next(c for c in view.cards if c["id"] == first[0])
    assert card["play_url"] == f"/files/songs/{quote(Path(path or '').name)}"  # Python makes the URL, not the browser
    view.close()


def test_magic_line_parsing() -> None:
    assert parse_library_line('rain "night drive" --favourites --state ready --page-size 5') == (
        "rain night drive",
        {"favourite": True, "state": "ready", "page_size": 5},
    )
    for bad in ("--nope", "--state", "--page-size x", '"unclosed'):
        with pytest.raises(UsageError):
            parse_library_line(bad)


def test_magic_opens_the_library_of_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    try:
        view = shell.run_line_magic("musicgen_library", "rain --favourites")
        assert isinstance(view, LibraryView) and view.text == "rain" and view.filters["favourite"]
        assert view.library.path == session.get_journal().path  # the sandbox's own journal, not the user's
        assert view.status == "No songs match."
        view.close()
        shell.run_line_magic("config", "MusicGen.archive_dir = 'off'")
        assert session.current_workspace().archive.chosen is False
        shell.run_line_magic("config", "MusicGen.archive_dir = ''")
        assert session.current_workspace().archive.chosen is None
    finally:
        shell.run_line_magic("unload_ext", "ipymusicgen")
        shell.config.pop("MusicGen", None)
    assert shell.find_line_magic("musicgen_library") is None


@pytest.mark.slow
def test_watcher_cards_show_the_archive_and_favourites_reach_the_library(sandbox: Sandbox, tmp_path: Path) -> None:
    from helpers import wait_until

    from ipymusicgen.widgets import TaskWatcher

    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "songs") as client:
        library = Library(journal_path)
        view = LibraryView(library, client=client)  # hears its client's archive (its wiring's), no other's
        ids = client.generate(action="auto", style="glass harp").ids
        watcher = TaskWatcher(ids, client=client)
        view_with_watcher = LibraryView(library, watcher=watcher, client=client)
        try:
            wait_until(lambda: all((watcher.card(i).extra or {}).get("peaks") for i in ids), "peaks on watcher cards")
            labels = [watcher.card(i).extra["archived_path_label"] for i in ids]
            assert all(label.startswith("archived: ") and label.endswith(".mp3") for label in labels)
            wait_until(lambda: view.total == 2 and all(c["peaks"] for c in view.cards), "the view shows new songs")
            watcher.favourite(ids[0])
            assert library.song(ids[0]).favourite
            assert [c["favourite"] for c in view_with_watcher.cards if c["id"] == ids[0]] == [True]
        finally:
            watcher.close()
            view.close()
            view_with_watcher.close()
            library.close()

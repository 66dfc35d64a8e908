"""The grid view's song cards play like the library's and the watcher's (`widgets/card_audio.CardAudio`): Python
puts `play_url` and `play_source` on each card (the browser computes no URL), and a card's player that asks the
kernel for its source gets the song's bytes once over the board's widget channel. The batch view draws its songs
with its `TaskWatcher`, whose cards take the same path (tests/test_card_audio.py)."""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import pytest
from helpers import AudioPage, ManualClock, advance_until_done, joined, wait_until

from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.lab.grid import Grid
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets import card_audio
from ipymusicgen.widgets.card_audio import REFUSAL
from ipymusicgen.widgets.grid import GridView


def test_grid_cards_carry_where_they_play_and_a_played_card_gets_its_bytes_once(
    sandbox: Sandbox, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(card_audio.ENV_SERVER_ROOT, raising=False)  # no files API: no files/ URL is offered
    journal = tmp_path / "journal.sqlite3"
    client = sandbox.client(journal=Journal(journal), archive=tmp_path / "songs")
    library = Library(journal)
    grid = Grid(client, {"action": "auto"}, {"style": ["lo-fi", "jazz"]}, name=f"g{uuid.uuid4().hex[:8]}")
    view = GridView(grid, library=library)
    page = AudioPage()
    try:
        view.board._handle_custom_msg({"kind": "run"}, [])  # the free sandbox: the press is the decision
        batch = grid.batch
        assert batch is not None
        advance_until_done(batch, clock, sandbox)
        archiver = archiver_of(client)
        assert archiver is not None and joined(archiver)
        view._draw()  # the songs' files are archived now: the cards are drawn again
        wait_until(lambda: not view.board.data["running"], "the board drawn after the last round")
        songs = [song for row in view.board.data["rows"] for cell in row["cells"] for song in cell["songs"]]
        assert len(songs) == 4
        for song in songs:  # Python decided: the service's fresh URL first, the kernel's bytes by an opaque name
            assert song["play_url"] == song["audio_url"] and song["play_url"].startswith("http://127.0.0.1")
            assert song["play_source"] and song["id"] not in song["play_source"]
        assert len({song["play_source"] for song in songs}) == 4

        monkeypatch.setattr(view.board, "send", page.send)
        first = songs[0]
        archived = library.archived_path(first["id"])
        assert archived is not None
        view.board._handle_custom_msg({"kind": "audio", "source": first["play_source"]}, [])
        content, buffers = page.answer(first["play_source"])
        assert buffers == [archived.read_bytes()] and content["type"] == "audio/mpeg"
        assert len(page.audio(first["play_source"])) == 1  # sent once, only the one played
        assert all(not page.audio(song["play_source"]) for song in songs[1:])
        view._draw()  # a redraw keeps each card's name
        again = [song for row in view.board.data["rows"] for cell in row["cells"] for song in cell["songs"]]
        assert [s["play_source"] for s in again] == [s["play_source"] for s in songs]

        view.board._handle_custom_msg({"kind": "audio", "source": str(archived)}, [])  # a path is no name here
        assert page.answer(str(archived)) == ({"kind": "audio", "source": str(archived)[:100], "error": REFUSAL}, [])
        source = first["play_source"]
        view.close()
        page.sent.clear()
        view.board._handle_custom_msg({"kind": "audio", "source": source}, [])  # a closed view's names answer no more
        assert all(not buffers for _, buffers in page.sent)
    finally:
        view.close()
        library.close()
        client.close()


def test_the_batch_views_songs_are_watcher_cards_that_play_the_same_way(
    sandbox: Sandbox, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.batch.drivers import run_batch
    from ipymusicgen.storage.batches import BatchStore
    from ipymusicgen.widgets import TaskWatcher
    from ipymusicgen.widgets.batch import BatchView

    monkeypatch.delenv(card_audio.ENV_SERVER_ROOT, raising=False)
    with sandbox.client() as client:
        watcher = TaskWatcher(client=client, autostart=False)
        view = BatchView(watcher=watcher)
        page = AudioPage()
        try:
            rows = [{"style": f"lo-fi {n}", "mv": "MFV2.0"} for n in range(2)]
            batch = run_batch(client, rows, wait=False, on_update=view.update, store=BatchStore(None))
            advance_until_done(batch, clock, sandbox)
            view.update(batch)
            wait_until(lambda: len(watcher.records) == 4, "the batch's songs on the watcher")
            cards = [watcher.card(record.id).data() for record in watcher.records]
            assert all(c["play_url"] == c["audio_url"] and c["play_source"] for c in cards)
            monkeypatch.setattr(watcher, "send", page.send)
            watcher._on_msg(watcher, {"kind": "audio", "source": cards[0]["play_source"]}, [])
            content, buffers = page.answer(cards[0]["play_source"])
            with urllib.request.urlopen(cards[0]["audio_url"], timeout=10) as served:  # the sandbox, on 127.0.0.1
                assert buffers == [served.read()] and content["type"] == "audio/mpeg"
            assert len(page.audio(cards[0]["play_source"])) == 1
        finally:
            view.close()
            watcher.close()

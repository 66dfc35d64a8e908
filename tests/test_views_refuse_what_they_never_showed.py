"""A view acts only on what its page shows now (issue 43, items 2 and 5): forged messages naming a song the view never
showed, one that left it (another page, a search with no match), a button its card does not draw or a control the
view does not show do nothing (nothing paid, written or marked), and a card's audio name answers only while its
card is on the page. Real widgets, the sandbox (its free key sends at once, so a forged paid intent would pay)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import AudioPage, ManualClock

from ipymusicgen import Journal, MusicClient
from ipymusicgen.archive.export import exports_dir_beside
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.widgets.card_audio import REFUSAL
from ipymusicgen.widgets.library import LibraryView
from ipymusicgen.widgets.offered import REFUSED

WAV = "/v1/music/generate-wav"
MP4 = "/v1/music/generate-mp4"
GENERATE = "/v1/music/generate"
LYRICS = "/v1/lyrics"
KEY_INFO = "/v1/get_api_key_info"
PAID = (WAV, MP4, GENERATE, LYRICS)
STYLES = ("marimba, dusk", "tuba, carnival", "koto, snowfall")


def paid(sandbox: Sandbox) -> dict[str, int]:
    counts = sandbox.request_counts()
    return {path: counts.get(path, 0) for path in PAID}


@pytest.fixture
def shelf(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[MusicClient, Library, list[list[str]], Path]]:
    """Three finished, archived calls (six songs) in a journal; the client stays open for the views' extras."""
    journal_path, archive = tmp_path / "journal.sqlite3", tmp_path / "songs"
    with sandbox.client(journal=Journal(journal_path), archive=archive) as client:
        calls = []
        for style in STYLES:
            ids = list(client.generate(action="auto", style=style).ids)
            client.wait(ids, timeout=60, archived=True)
            calls.append(ids)
        with Library(journal_path) as library:
            yield client, library, calls, archive


def forge(view: Any, **content: Any) -> None:
    """What a browser (or anyone who can write to the widget's channel) sends."""
    view._handle_custom_msg(content, [])


def test_the_library_acts_only_on_the_cards_its_page_shows(
    sandbox: Sandbox, shelf: tuple[MusicClient, Library, list[list[str]], Path]
) -> None:
    client, library, calls, archive = shelf
    view = LibraryView(library, client=client, page_size=2)
    try:
        view.confirm_required = False  # a press is the decision: a forged press would pay at once
        shown = [card["id"] for card in view.cards]
        assert shown == list(reversed(calls[2])) and view.total == 6
        before = paid(sandbox)
        elsewhere = calls[0][1]  # in the library, never on this page
        for kind in ("wav", "mp4", "export", "favourite", "keep", "lineage", "copy_id", "extend", "concat"):
            forge(view, kind=kind, id=elsewhere)
            assert view.status == REFUSED, kind
        for odd in ({"a": 1}, ["x"], 7, None, "", elsewhere.upper(), f" {elsewhere}"):
            forge(view, kind="wav", id=odd)
        assert paid(sandbox) == before
        assert not exports_dir_beside(archive).exists()  # no folder written
        assert not library.song(elsewhere).favourite and not library.song(elsewhere).kept
        assert view.lineage == [] and view.cards[0]["id"] == shown[0]

        forge(view, kind="page", page=1)  # the first page's songs leave the view
        assert {card["id"] for card in view.cards} == set(calls[1])
        forge(view, kind="favourite", id=shown[0])
        forge(view, kind="wav", id=shown[1])
        assert view.status == REFUSED and not library.song(shown[0]).favourite and paid(sandbox) == before

        forge(view, kind="search", text="no song is called this")  # nothing shown at all
        assert view.cards == []
        for task_id in calls[1]:
            forge(view, kind="mp4", id=task_id)
            forge(view, kind="export", id=task_id)
        forge(view, kind="page", page=2)  # one page only: no pager is drawn
        assert view.status == REFUSED and paid(sandbox) == before and not exports_dir_beside(archive).exists()

        forge(view, kind="search", text="tuba")  # shown again: its buttons work
        forge(view, kind="favourite", id=calls[1][0])
        forge(view, kind="keep", id=calls[1][1])
        assert library.song(calls[1][0]).favourite and library.song(calls[1][1]).kept
        forge(view, kind="wav", id=calls[1][0])
        assert paid(sandbox)[WAV] == before[WAV] + 1
    finally:
        view.close()


def test_a_take_shown_alone_offers_no_keep_and_a_song_not_finished_no_extra(
    sandbox: Sandbox, shelf: tuple[MusicClient, Library, list[list[str]], Path]
) -> None:
    client, library, calls, _ = shelf
    view = LibraryView(library, client=client, page_size=3)  # the middle call is split across two pages
    try:
        view.confirm_required = False
        alone = view.cards[2]["id"]
        assert alone in calls[1] and sum(card["id"] in calls[1] for card in view.cards) == 1
        forge(view, kind="keep", id=alone)  # no Keep is drawn on a take shown without its other take
        assert view.status == REFUSED and not library.song(alone).kept
        running = list(client.generate(action="auto", style="harp, still writing").ids)
        view.refresh()
        before = paid(sandbox)
        forge(view, kind="wav", id=running[0])  # on the page, but its card has no WAV yet
        assert view.status == REFUSED and paid(sandbox) == before
    finally:
        view.close()


def test_the_watcher_acts_only_on_the_cards_of_its_visible_page(
    sandbox: Sandbox, client: MusicClient, clock: ManualClock, tmp_path: Path
) -> None:
    from ipymusicgen.widgets.watcher import TaskWatcher

    ids = [task_id for style in STYLES for task_id in client.generate(action="auto", style=style).ids]
    clock.stages(10)
    watcher = TaskWatcher(ids, client=client, autostart=False)
    try:
        watcher.download_dir = tmp_path / "downloads"
        watcher.page_size = 1  # one call per page
        watcher.poll_once()
        watcher.show_page(0)
        on_page = watcher.visible_ids
        assert on_page == ids[4:6] and watcher.done
        before = paid(sandbox)
        hidden = ids[0]
        for kind in ("wav", "mp4", "concat", "retry", "download", "export", "extend", "favourite", "keep", "copy_id"):
            forge(watcher, kind=kind, id=hidden)
        assert paid(sandbox) == before and not (tmp_path / "downloads").exists()
        card = watcher.card(hidden)
        assert not card.favourite and not card.kept and card.note == "" and watcher.extend_form is None

        forge(watcher, kind="page", page=2)  # the first page's songs leave the page
        assert watcher.visible_ids == ids[0:2]
        forge(watcher, kind="concat", id=on_page[0])
        forge(watcher, kind="favourite", id=on_page[1])
        forge(watcher, kind="retry", id=ids[0])  # on the page, but its call did not fail: no Retry drawn
        assert paid(sandbox) == before and not watcher.card(on_page[1]).favourite
        assert watcher.card(ids[0]).note == REFUSED  # said on the card that is shown
        forge(watcher, kind="hide_failed", on=True)  # no failed call: the button is not drawn
        assert not watcher.hide_failed

        forge(watcher, kind="favourite", id=ids[1])  # on the page: works
        forge(watcher, kind="download", id=ids[1])
        assert watcher.card(ids[1]).favourite and len(list((tmp_path / "downloads").iterdir())) == 1
    finally:
        watcher.close()


def test_the_grid_acts_only_on_what_its_board_shows(client: MusicClient, sandbox: Sandbox) -> None:
    from ipymusicgen.lab.grid import Grid
    from ipymusicgen.widgets.grid import GridView

    other = list(client.generate(action="auto", style="not in the grid").ids)
    view = GridView(Grid(client, {"action": "auto"}, {"style": ["oud", "sitar"]}), confirm=True)
    try:
        forge(view.board, kind="confirm")  # nothing was asked
        forge(view.board, kind="compare")  # nothing picked
        forge(view.board, kind="pick", id=other[0])  # a song the board never drew
        assert view.grid.batch is None and view.picked == [] and view.comparison is None
        forge(view.board, kind="run")
        assert view.asking and view.grid.batch is None
        forge(view.board, kind="run")  # while it asks, Run is not drawn (Confirm is): nothing sent
        assert view.grid.batch is None
        forge(view.board, kind="confirm")
        batch = view.grid.batch
        assert batch is not None
        batch.wait(timeout=60)
        view._draw()
        forge(view.board, kind="run")  # nothing left to run: no Run is offered
        forge(view.board, kind="pick", id=other[1])
        assert view.grid.batch is batch and view.picked == []
        drawn = [s["id"] for row in view.board.data["rows"] for cell in row["cells"] for s in cell["songs"]]
        forge(view.board, kind="pick", id=drawn[0])
        assert view.picked == [drawn[0]]
    finally:
        view.close()


def test_the_batch_view_acts_only_on_the_buttons_it_shows(client: MusicClient, sandbox: Sandbox) -> None:
    from ipymusicgen.widgets.batch import BatchView

    batch = client.batch([{"action": "auto", "style": "banjo"}], name="forged-batch", wait=True)
    view = BatchView(batch)
    try:
        before = paid(sandbox)
        for kind in ("retry_failed", "stop", "send", "confirm", "cancel"):  # none drawn on a batch that ended well
            forge(view, kind=kind)
        assert paid(sandbox) == before and view.batch is batch and not batch.stop_requested
    finally:
        view.close()


def test_the_studio_acts_only_on_the_tab_and_fields_it_shows(client: MusicClient, sandbox: Sandbox) -> None:
    from ipymusicgen.widgets.studio import studio

    made = studio(client)
    try:
        assert made.tab == "song"
        before, keys = paid(sandbox), sandbox.request_counts().get(KEY_INFO, 0)
        forge(made.view, kind="input", form="lyrics", name="prompt", value="a lighthouse at dawn")  # hidden tab
        forge(made.view, kind="submit", form="lyrics")
        forge(made.view, kind="submit", form="v2")
        forge(made.view, kind="use_lyrics")
        forge(made.view, kind="refresh_key")  # the Key tab is not shown
        assert made.lyrics.typed["prompt"] == "" and made.lyrics.result is None
        assert paid(sandbox) == before and sandbox.request_counts().get(KEY_INFO, 0) == keys
        hidden = [f["name"] for f in made.view.panes["song"]["fields"] if not f["shown"]]
        assert hidden  # auto mode hides the custom song's fields
        forge(made.view, kind="input", form="song", name=hidden[0], value="typed where nothing is drawn")
        forge(made.view, kind="input", form="song", name="no_such_field", value="x")
        forge(made.view, kind="input", form="song/style", name="x", value="x")
        assert made.song.typed[hidden[0]] != "typed where nothing is drawn"
        forge(made.view, kind="confirm", form="song")  # no confirm step shown
        forge(made.view, kind="dismiss", form="song")
        assert paid(sandbox) == before and made.watcher.ids == []

        forge(made.view, kind="tab", tab="lyrics")  # shown now: its fields and Submit work
        forge(made.view, kind="input", form="lyrics", name="prompt", value="a lighthouse at dawn")
        forge(made.view, kind="submit", form="lyrics")
        assert paid(sandbox)[LYRICS] == before[LYRICS] + 1 and made.lyrics.result is not None
    finally:
        made.close()


def test_the_blind_view_ignores_picks_it_did_not_ask_for(client: MusicClient, clock: ManualClock) -> None:
    from ipymusicgen.widgets.compare import CompareView

    ids = list(client.generate(action="auto", style="glockenspiel").ids)
    clock.stages(10)
    view = CompareView(client.tasks(ids))
    try:
        for content in (
            {"kind": "pick", "label": "A", "round": "an-earlier-round"},
            {"kind": "pick", "label": "X", "round": view.round},
            {"kind": "pick", "label": ["A"], "round": view.round},
            {"kind": "pick", "label": "B"},
        ):
            forge(view, **content)
        assert view.result is None
    finally:
        view.close()


# -- item 5: a card's audio name answers only while its card is shown ----------------------------------------------


def asks(view: Any, page: AudioPage, name: str) -> tuple[dict[str, Any], list[bytes]]:
    page.sent.clear()
    forge(view, kind="audio", source=name)
    return page.answer(name)


def test_a_library_cards_audio_name_answers_only_while_the_card_is_shown(
    shelf: tuple[MusicClient, Library, list[list[str]], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, library, calls, _ = shelf
    view = LibraryView(library, client=client, page_size=2)
    page = AudioPage()
    monkeypatch.setattr(view, "send", page.send)
    try:
        first = {card["id"]: card["play_source"] for card in view.cards}
        name = first[calls[2][0]]
        content, buffers = asks(view, page, name)
        assert buffers and content["type"] == "audio/mpeg"  # shown: it plays
        forge(view, kind="page", page=2)
        assert asks(view, page, name) == ({"kind": "audio", "source": name, "error": REFUSAL}, [])
        forge(view, kind="page", page=0)
        again = {card["id"]: card["play_source"] for card in view.cards}
        assert asks(view, page, again[calls[2][0]])[1]  # shown again: its new name plays
        assert asks(view, page, name)[1] == []  # the old one never again
        forge(view, kind="search", text="a search nothing matches")
        for old in again.values():
            assert asks(view, page, old) == ({"kind": "audio", "source": old, "error": REFUSAL}, [])
    finally:
        view.close()


def test_a_watcher_cards_audio_name_answers_only_while_its_page_is_shown(
    shelf: tuple[MusicClient, Library, list[list[str]], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.widgets.watcher import TaskWatcher

    client, library, calls, _ = shelf
    ids = [task_id for call in calls for task_id in call]
    watcher = TaskWatcher(ids, client=client, autostart=False)
    page = AudioPage()
    monkeypatch.setattr(watcher, "send", page.send)
    try:
        watcher.page_size = 1
        watcher.poll_once()
        for task_id in ids:
            watcher.annotate(task_id, archived_path=library.song(task_id).archive_path)
        watcher.show_page(0)
        name = watcher.card(calls[2][1]).data()["play_source"]
        hidden = watcher.card(calls[0][0]).data()["play_source"]  # a name made for a card not on the page
        assert asks(watcher, page, name)[1]
        assert asks(watcher, page, hidden) == ({"kind": "audio", "source": hidden, "error": REFUSAL}, [])
        watcher.show_page(1)
        assert asks(watcher, page, name) == ({"kind": "audio", "source": name, "error": REFUSAL}, [])
    finally:
        watcher.close()


def test_closing_or_refusing_never_raises_from_a_forged_message(
    shelf: tuple[MusicClient, Library, list[list[str]], Path],
) -> None:
    client, library, calls, _ = shelf
    view = LibraryView(library, client=client, page_size=2)
    try:
        weird: list[Callable[[], Any]] = [
            lambda: forge(view, kind=None, id=calls[2][0]),
            lambda: forge(view, kind={"wav": 1}, id=calls[2][0]),
            lambda: forge(view, kind="favourite", id=calls[0][0], extra=[1] * 1000),
        ]
        for send in weird:
            send()
        view._on_msg(view, ["not", "a", "dict"], [])
    finally:
        view.close()

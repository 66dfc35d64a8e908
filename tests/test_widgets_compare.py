"""Blind A/B and ABX: what the browser gets before and after the vote, the vote in the library, the shuffle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library, LibrarySong
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.compare import CompareView, compare
from ipymusicgen.workspace import session


@pytest.fixture
def takes(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Library, list[LibrarySong]]]:
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=False) as client:
        ids = list(client.generate(action="custom", style="harbour waltz", title="Harbour", lyrics="la").ids)
        client.wait(ids)
    library = Library(path)
    yield library, [library.song(i) for i in ids]
    library.close()


def test_before_the_vote_the_browser_gets_labels_and_opaque_sources_only(
    takes: tuple[Library, list[LibrarySong]],
) -> None:
    library, songs = takes
    view = CompareView(songs, library=library, seed=1)
    data = view.data
    assert [p["label"] for p in data["players"]] == ["A", "B"] and data["revealed"] is False
    assert all(set(p) == {"label", "source"} for p in data["players"])  # no URL, no waveform (test_compare_blind)
    assert {p["source"] for p in data["players"]}.isdisjoint({s.audio_url for s in songs})
    shown = json.dumps(data)
    assert "Harbour" not in shown and "harbour waltz" not in shown and "MFV" not in shown
    assert "take" not in json.dumps(data["players"])
    assert "prefer" in data["question"] and "blind" in repr(view)


def test_the_order_is_shuffled(takes: tuple[Library, list[LibrarySong]]) -> None:
    library, songs = takes
    firsts = {CompareView(songs, library=library, seed=seed).order[0].id for seed in range(12)}
    assert firsts == {songs[0].id, songs[1].id}


def test_the_vote_is_kept_blind_then_the_labels_are_revealed(takes: tuple[Library, list[LibrarySong]]) -> None:
    library, songs = takes
    view = CompareView(songs, library=library, seed=3, min_listen_s=0)  # the minimum: test_compare_blind
    view._handle_custom_msg({"kind": "pick", "label": "C", "round": view.round}, [])  # not a choice: nothing happens
    assert view.result is None
    view._handle_custom_msg({"kind": "pick", "label": "B", "round": view.round}, [])
    a, b = (take.id for take in view.order)
    assert view.result == {"picked": "B", "outcome": "b", "a": a, "b": b, "winner": b, "loser": a, "recorded": True}
    (vote,) = library.compare_results()
    assert (vote["winner"], vote["loser"], vote["blind"]) == (view.order[1].id, view.order[0].id, True)
    data = view.data
    assert data["revealed"] is True and data["picked"] == "B" and "kept in the library" in data["note"]
    assert {p["title"] for p in data["players"]} == {"Harbour"}
    assert all("take" in p["details"] for p in data["players"])
    view.pick("A")  # a second choice changes nothing
    assert len(library.compare_results()) == 1 and view.result["picked"] == "B"


def test_abx_asks_which_one_x_is_and_keeps_no_preference(takes: tuple[Library, list[LibrarySong]]) -> None:
    library, songs = takes
    view = CompareView(songs, library=library, mode="abx", seed=5)
    labels = [p["label"] for p in view.data["players"]]
    assert labels == ["A", "B", "X"] and "Which one is X" in view.data["question"]
    sources = [p["source"] for p in view.data["players"]]
    assert len(set(sources)) == 3  # X has a source of its own: not its twin's (test_compare_blind)
    result = view.pick(view.x)
    assert result["correct"] is True and library.compare_results() == []
    assert f"X was {view.x}" in view.data["note"]


def test_what_cannot_be_compared_is_refused(takes: tuple[Library, list[LibrarySong]]) -> None:
    library, songs = takes
    with pytest.raises(ValueError, match="two different songs"):
        CompareView(songs[:1], library=library)
    with pytest.raises(ValueError, match="two different songs"):
        CompareView([songs[0], songs[0]], library=library)
    with pytest.raises(ValueError, match="mode"):
        CompareView(songs, library=library, mode="abc")
    silent = LibrarySong(id="x", call=None, take=1, state="failed", title="t", style=None, created_at=0.0)
    with pytest.raises(ValueError, match="no audio"):
        CompareView([songs[0], silent], library=library)


def test_compare_takes_both_takes_of_a_call_from_the_session(sandbox_shell: InteractiveShell) -> None:
    client = session.get_client()
    result = client.generate(action="auto", style="two takes")
    client.wait(result.ids)
    view = compare(result.ids[0], seed=0)  # one id: both takes of its call
    assert {t.id for t in view.order} == set(result.ids)
    view.pick("A")
    assert session.library().compare_results()[0]["winner"] == view.order[0].id
    assert {t.id for t in compare(result, seed=1).order} == set(result.ids)


def test_library_cards_carry_stars_and_measures_as_plain_data(takes: tuple[Library, list[LibrarySong]]) -> None:
    from ipymusicgen.widgets.library import LibraryView

    library, songs = takes
    library.rate(songs[0].id, 4)
    library.store.analysed(songs[0].id, {"bpm": 92.6, "key": "A minor", "lufs": -14.24})
    view = LibraryView(library=library)
    cards = {card["id"]: card for card in view.cards}
    assert cards[songs[0].id]["stars"] == 4 and cards[songs[0].id]["measures"] == ["93 BPM", "A minor", "-14.2 LUFS"]
    assert cards[songs[1].id]["stars"] is None and cards[songs[1].id]["measures"] == []
    view.close()


def test_an_empty_view_draws_nothing_until_two_songs_are_loaded_then_each_load_is_a_new_blind_round(
    takes: tuple[Library, list[LibrarySong]],
) -> None:
    library, songs = takes
    view = CompareView(library=library)  # a host makes it up front (marimo cannot make one from a message)
    assert view.data == {} and "nothing to compare yet" in repr(view)
    view._handle_custom_msg({"kind": "pick", "label": "A", "round": ""}, [])  # a stale page's pick: nothing happens
    assert view.result is None and library.compare_results() == []
    with pytest.raises(ValueError, match="nothing to compare yet"):
        view.pick("A")
    with pytest.raises(ValueError, match="two different songs"):
        view.load([songs[0], songs[0]])
    view.load(songs, seed=1)
    assert view.pick("A")["recorded"] and view.data["revealed"]
    view.load(list(reversed(songs)), seed=2)  # the next pair: blind again, no result carried over
    assert view.result is None and view.data["revealed"] is False and "title" not in json.dumps(view.data)
    view.close()

"""The library view's cards offer a song's paid extras (WAV, MP4) through the same rule as the watcher's cards:
the `PaidAsk` question first with a real key, `archive.extras.make_extra` (sent at most once per song and kind),
and an extra made before (here, in another kernel) offered as made and reused without asking. A keyed sandbox
plays the paid service; the view is driven by the messages its browser side sends; requests are counted where
they arrive."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.library import LibraryView

KEY = "k-library-extras-7d41"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""
WAV = "/v1/music/generate-wav"
MP4 = "/v1/music/generate-mp4"


@pytest.fixture
def views() -> Iterator[list[LibraryView]]:
    opened: list[LibraryView] = []
    yield opened
    for view in opened:
        view.close()
        view.library.close()


def finished_song(client: MusicClient, service: Sandbox) -> str:
    ids = client.generate(action="auto", style="library bells").ids
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)
    return ids[0]


def press(view: LibraryView, kind: str, song: str) -> str:
    """What the card's button sends from the browser (`{kind, id}`), through the widget's message handler."""
    view._handle_custom_msg({"kind": kind, "id": song}, [])
    return view.status


def card_of(view: LibraryView, song: str) -> dict[str, Any]:
    return next(card for card in view.cards if card["id"] == song)


def test_the_library_cards_wav_asks_first_sends_once_and_is_reused_in_another_kernel(
    paid_clients: Callable[..., MusicClient], service: Sandbox, views: list[LibraryView]
) -> None:
    client = paid_clients()
    song = finished_song(client, service)
    view = LibraryView(client=client)
    views.append(view)
    card = card_of(view, song)
    assert "wav" in card["actions"] and "mp4" in card["actions"] and card["extras_made"] == []

    asked = press(view, "wav", song)
    assert asked.startswith("Pay about 3 credit(s) for this song's WAV?") and "press WAV again" in asked
    assert service.request_counts().get(WAV, 0) == 0
    made = press(view, "wav", song)
    assert made.startswith("WAV made and kept: ") and made.endswith(".wav"), made
    assert Path(made.split(": ", 1)[1]).is_file() and service.request_counts()[WAV] == 1
    assert card_of(view, song)["extras_made"] == ["wav"]  # offered as made from now on

    again = press(view, "wav", song)  # a second press: reused, never asked
    assert "nothing paid again" in again, again
    other = LibraryView(client=paid_clients())  # another kernel on the same journal
    views.append(other)
    assert card_of(other, song)["extras_made"] == ["wav"]
    assert "nothing paid again" in press(other, "wav", song)
    assert service.request_counts()[WAV] == 1


def test_an_mp4_confirm_holds_for_the_very_next_press_of_the_same_button_only(
    paid_clients: Callable[..., MusicClient], service: Sandbox, views: list[LibraryView]
) -> None:
    client = paid_clients()
    song = finished_song(client, service)
    view = LibraryView(client=client)
    views.append(view)
    assert press(view, "mp4", song).startswith("Pay about 3 credit(s) for this song's MP4 video?")
    press(view, "refresh", song)  # another intent between: the question is dropped
    assert press(view, "mp4", song).startswith("Pay about")
    assert press(view, "wav", song).startswith("Pay about")  # another button: asks for itself, sends nothing
    assert service.request_counts().get(MP4, 0) == 0 and service.request_counts().get(WAV, 0) == 0
    assert press(view, "wav", song).startswith("WAV made and kept")
    assert press(view, "mp4", song).startswith("Pay about")  # MP4 not made: still asks
    refused = press(view, "mp4", song)  # the sandbox refuses MP4 (501): said in the view, never raised
    assert refused.startswith("MP4 failed: ") and "not supported" in refused, refused
    assert service.request_counts()[MP4] == 1 and service.request_counts()[WAV] == 1
    assert card_of(view, song)["extras_made"] == ["wav"]  # a refused MP4 is not offered as made
    assert press(view, "mp4", song).startswith("Pay about")  # and asks again (a refusal cost nothing)
    assert service.request_counts()[MP4] == 1


def test_confirming_off_sends_at_once_and_a_song_not_finished_offers_no_extra(
    paid_clients: Callable[..., MusicClient], service: Sandbox, views: list[LibraryView]
) -> None:
    client = paid_clients()
    song = finished_song(client, service)
    view = LibraryView(client=client)
    views.append(view)
    view.confirm_required = False  # the caller's choice, as on the watcher
    assert press(view, "wav", song).startswith("WAV made and kept")
    assert service.request_counts()[WAV] == 1
    running = client.generate(action="auto", style="still writing").ids[0]
    view.refresh()
    assert "wav" not in card_of(view, running)["actions"]
    said = press(view, "wav", running)  # a forged press on an unfinished song: said, nothing sent
    assert "nothing was done" in said and service.request_counts()[WAV] == 1  # its card offers no WAV

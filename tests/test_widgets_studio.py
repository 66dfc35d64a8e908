"""The studio without a browser: one anywidget driven by the intents the browser sends, against the sandbox.

Each test sends what the front end would send (`input`, `touch`, `submit`, `confirm`, `tab`) through the
widget's message handler, and reads the state Python syncs back (`view.panes`, `view.key`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import HOSTILE, WAIT, ManualClock, wait_until

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.models.schema import ACTIONS, shape_fields
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets.studio import TAB_IDS, Studio, StudioView, studio

REAL_LOOKING_KEY = "mg-live-7c1f0b9a42d35e86"


@pytest.fixture
def studios() -> Iterator[Callable[..., Studio]]:
    """Make studios that are closed (polling stopped) at the end of the test."""
    made: list[Studio] = []

    def make(client: MusicClient, **kwargs: Any) -> Studio:
        made.append(studio(client, **kwargs))
        return made[-1]

    yield make
    for item in made:
        item.close()


def intent(made: Studio, **content: Any) -> None:
    """What the browser sends: a custom message to the view."""
    made.view._handle_custom_msg(content, [])


def fields(made: Studio, form: str) -> dict[str, dict[str, Any]]:
    """The fields of a form as the browser gets them."""
    return {field["name"]: field for field in made.view.panes[form]["fields"]}


def create_count(sandbox: Sandbox) -> int:
    counts = sandbox.request_counts()
    return sum(n for path, n in counts.items() if path.endswith(("/generate", "/submit")) or "/v2/" in path)


def test_one_front_end_model_with_tabs_and_the_watcher_below(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    assert isinstance(made.children[0], StudioView) and made.children[-1] is made.watcher
    assert [tab["id"] for tab in made.view.tabs] == list(TAB_IDS)
    assert "ipymusicgen-studio" in made._dom_classes
    assert "ipymusicgen-studio" in made.view._esm and "export default" in made.view._esm
    assert ".ims-studio" in made.view._css and "--jp-" in made.view._css
    assert repr(made).startswith("Studio [Song | Prompt (v4.5 models) | Lyrics") and "(tab: song)" in repr(made)
    v2 = next(tab for tab in made.view.tabs if tab["id"] == "v2")
    assert "v2 endpoint" in v2["hint"] and "v2" not in v2["title"].split()  # music words; the API's name on hover


def test_no_problem_is_shown_before_a_field_is_touched(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    intent(made, kind="input", form="song", name="action", value="custom")
    intent(made, kind="input", form="song", name="title", value="x" * 80)
    assert fields(made, "song")["title"]["count"] == "80 of 80 characters"
    assert not fields(made, "song")["title"]["count_over"]
    intent(made, kind="input", form="song", name="title", value="x" * 81)
    assert fields(made, "song")["title"]["problem"] == ""  # typing, not yet left the field
    assert fields(made, "song")["title"]["count_over"]  # but the counter turns red at once
    assert made.view.panes["song"]["can_submit"]  # nothing visible stands in the way yet
    assert not made.song.valid  # but Python knows, and says so once the field is left
    intent(made, kind="touch", form="song", name="title")
    problem = fields(made, "song")["title"]["problem"]
    assert "80" in problem
    assert not made.view.panes["song"]["can_submit"]  # "Make songs" waits while the problem shows
    intent(made, kind="input", form="song", name="action", value="concat")  # needs the song to join
    assert fields(made, "song")["continue_song_id"]["problem"] == ""  # untouched fields stay quiet
    intent(made, kind="submit", form="song")  # a submit shows every problem and sends nothing
    assert fields(made, "song")["continue_song_id"]["problem"] != "" and made.watcher.ids == []
    assert made.view.panes["song"]["status"] == ""


@pytest.mark.parametrize("action", ACTIONS)
def test_fields_shown_and_required_follow_the_actions_shape(
    client: MusicClient, studios: Callable, action: str
) -> None:
    made = studios(client)
    intent(made, kind="input", form="song", name="action", value=action)
    shape = shape_fields(action)
    state = fields(made, "song")
    assert {name for name, f in state.items() if f["shown"]} == {"provider", "action", *shape}  # the engine picker
    assert {name for name, f in state.items() if f["required"]} == {"action", *(n for n, r in shape.items() if r)}


def test_labels_are_human_with_the_api_name_as_hint(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    song = fields(made, "song")
    assert song["mv"]["label"] == "Model" and song["mv"]["hint"] == "mv"
    assert song["continue_at"]["label"] == "Continue from (s)" and song["singer_id"]["label"] == "Singer"
    assert song["instrumental"]["label"] == "Instrumental"
    intent(made, kind="input", form="song", name="mv", value="MFV1.0")
    assert fields(made, "song")["mv"]["count"] == "songs up to 4 minutes, lyrics up to 3,000 words"
    assert fields(made, "v2")["model_version"]["hint"] == "model_version"


def test_submit_starts_songs_says_so_in_words_and_watches_them(
    client: MusicClient, clock: ManualClock, studios: Callable
) -> None:
    made = studios(client)
    intent(made, kind="input", form="song", name="style", value="sunny ska")
    intent(made, kind="submit", form="song")
    pane = made.view.panes["song"]
    assert pane["status"] == "2 songs started" and pane["error"] == ""
    assert len(pane["ids"]) == 2 and pane["ids"][0] not in pane["status"]  # ids only on request
    assert made.watcher.ids == pane["ids"]
    made.v2.set_values(prompt="calm piano")
    made.v2.submit()
    assert made.view.panes["v2"]["status"] == "2 songs started" and len(made.watcher.ids) == 4
    clock.stages(2)
    made.watcher.wait(timeout=WAIT)
    wait_until(lambda: not made.watcher.running, "polling to stop once all songs are done")


def test_real_key_asks_to_confirm_before_anything_is_sent(studios: Callable) -> None:
    paid = Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={REAL_LOOKING_KEY: 40})
    with paid, paid.client(max_retries=0) as client:
        made = studios(client)
        assert made.needs_confirm
        made.refresh_key()
        intent(made, kind="input", form="song", name="style", value="lo-fi piano")
        assert made.view.panes["song"]["cost"] == "uses about 3 credits (estimate) · 40 left"
        intent(made, kind="submit", form="song")
        pane = made.view.panes["song"]
        assert pane["confirm"].startswith("Send this request? It uses about 3 credits")
        assert paid.request_counts().get("/v1/music/generate", 0) == 0 and made.watcher.ids == []
        intent(made, kind="input", form="song", name="style", value="lo-fi piano, rain")
        assert made.view.panes["song"]["confirm"] == ""  # a changed request needs a new confirm
        intent(made, kind="submit", form="song")
        intent(made, kind="cancel", form="song")
        assert paid.request_counts().get("/v1/music/generate", 0) == 0
        intent(made, kind="submit", form="song")
        intent(made, kind="confirm", form="song")
        assert paid.request_counts()["/v1/music/generate"] == 1 and len(made.watcher.ids) == 2
        assert made.view.panes["song"]["status"] == "2 songs started"
        assert made.view.panes["song"]["cost"].endswith(f"· {paid.credits(REAL_LOOKING_KEY)} left")
        state = json.dumps(made.view.get_state(), default=str)
        assert REAL_LOOKING_KEY not in state and REAL_LOOKING_KEY[-4:] in made.view.key["mask"]


def test_the_sandbox_key_needs_no_confirm(client: MusicClient, sandbox: Sandbox, studios: Callable) -> None:
    made = studios(client)
    assert not made.needs_confirm and not made.view.key["confirm"]
    made.song.set_values(style="x")
    made.song.submit()
    assert sandbox.request_counts()["/v1/music/generate"] == 1


def test_wrong_key_is_said_in_the_pane_and_the_key_tab(sandbox: Sandbox, studios: Callable) -> None:
    with sandbox.client(api_key="not-a-key-but-long-enough", max_retries=0) as wrong:
        made = studios(wrong, confirm=False)
        made.song.set_values(style="x")
        made.song.submit()
        pane = made.view.panes["song"]
        assert pane["error_title"] == "API key problem" and pane["status"] == "nothing was started"
        intent(made, kind="tab", tab="key")
        assert made.tab == "key" and made.view.key["status"].startswith("API key problem")
        state = json.dumps(made.view.get_state(), default=str)
        assert "not-a-key-but-long-enough" not in state and made.watcher.ids == []


def test_server_422_lands_on_its_field(sandbox: Sandbox, studios: Callable) -> None:
    with sandbox.client(max_retries=0) as lenient:
        lenient.settings = lenient.settings.with_changes(allow_unknown_models=True)
        made = studios(lenient)
        made.song.set_values(action="auto", style="x", mv=HOSTILE)  # passes the client, not the service
        assert made.song.valid
        made.song.submit()
        assert sandbox.request_counts()["/v1/music/generate"] == 1
        mv = fields(made, "song")["mv"]
        assert "unknown model" in mv["problem"] and HOSTILE in mv["problem"]  # text: the JS sets textContent
        assert made.view.panes["song"]["error_title"] == "The request was refused" and made.watcher.ids == []


def test_key_tab_reads_lazily_and_says_credits(client: MusicClient, sandbox: Sandbox, studios: Callable) -> None:
    made = studios(client)
    assert made.key_info.info is None and made.view.key["status"] == "not checked yet"
    intent(made, kind="tab", tab="key")
    key = made.view.key
    assert key["credits"] == str(sandbox.credits()) and key["credits_hint"] == "key_music_counts"
    assert key["status"].startswith("key works") and key["service"] == "built-in sandbox"
    assert sandbox.api_key not in json.dumps(key)


def test_written_lyrics_go_into_the_song_tab(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    intent(made, kind="tab", tab="lyrics")
    intent(made, kind="input", form="lyrics", name="prompt", value="a rainy night in the city")
    intent(made, kind="submit", form="lyrics")
    lyrics = made.view.panes["lyrics"]["lyrics"]
    assert made.lyrics.result is not None and lyrics["text"] == made.lyrics.result.text
    assert made.view.panes["lyrics"]["status"].endswith("lines of lyrics written")
    intent(made, kind="use_lyrics")
    assert made.tab == "song"
    values = made.song.request_values()
    assert values["action"] == "custom" and values["lyrics"] == made.lyrics.result.text


def test_instrumental_leaves_the_lyrics_out(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    made.song.set_values(action="custom", style="x", lyrics="la la", instrumental=True)
    assert "lyrics" not in made.song.request_values() and fields(made, "song")["lyrics"]["disabled"]
    assert fields(made, "song")["lyrics"]["count"] == "not sent: instrumental"


def test_v2_mode_toggle_shows_only_what_is_sent(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    shown = {n for n, f in fields(made, "v2").items() if f["shown"]}
    assert shown == {"is_auto", "model_version", "prompt"}
    intent(made, kind="tab", tab="v2")  # a pane takes intents while its tab is shown
    intent(made, kind="input", form="v2", name="is_auto", value="0")  # the browser sends text
    assert made.v2.typed["is_auto"] == 0 and fields(made, "v2")["lyrics"]["shown"]


def test_closing_the_studio_stops_polling(client: MusicClient, clock: ManualClock) -> None:
    made = studio(client)
    made.song.set_values(style="x")
    made.song.submit()
    assert made.watcher.running
    made.close()
    assert not made.watcher.running and made.view.comm is None and made.comm is None


def test_batch_and_library_views_are_children_of_the_studios_view(client: MusicClient, studios: Callable) -> None:
    """Drawn inside their tabs by the studio's own front end (anywidget's child views), not under it."""
    made = studios(client)
    state = made.view.get_state()
    assert state["batch_view"] == f"anywidget:{made.batch.view.model_id}"
    assert state["library_view"] == f"anywidget:{made.library.model_id}"
    assert list(made.children) == [made.view, made.watcher]  # nothing else below the tabs
    assert made.batch.view.data == {} and not made.batch.state()["has_batch"]  # no empty table before a batch


def test_lyrics_bring_their_title_unless_the_song_has_one(client: MusicClient, studios: Callable) -> None:
    made = studios(client)
    made.song.set_values(action="custom", title="x" * 90)  # typed, then left behind for another action
    made.song.set_values(action="auto", style="x")
    made.lyrics.set_values(prompt="a lighthouse")
    made.lyrics.submit()
    made.lyrics.use_in_song()
    assert made.lyrics.result is not None and made.song.values()["title"] == made.lyrics.result.title
    made.song.set_values(title="Mine")
    made.lyrics.use_in_song()
    assert made.song.values()["title"] == "Mine" and made.song.valid


def test_extend_from_a_card_fills_the_song_tab_and_adds_the_songs(
    client: MusicClient, clock: ManualClock, studios: Callable
) -> None:
    made = studios(client)
    made.song.set_values(action="custom", style="jazz", title="First", lyrics="la la")
    first = made.song.submit()
    clock.stages(2)
    made.watcher.wait(timeout=WAIT)
    made.select("key")
    assert made.watcher.extend(first[0]) is made.song  # the studio's own pane, not a new form
    assert made.tab == "song"
    values = made.song.values()
    assert values["action"] == "extend" and values["continue_at"] == 4 and values["title"] == "First"
    assert "lyrics" not in values  # the last request's lyrics belong to another song
    assert made.song.submit() and len(made.watcher.ids) == 4


def test_first_view_reads_the_credits_once_in_the_background(
    client: MusicClient, sandbox: Sandbox, studios: Callable
) -> None:
    made = studios(client)
    before = sandbox.request_counts().get("/v1/get_api_key_info", 0)
    intent(made, kind="ready")
    wait_until(lambda: made.key_info.info is not None, "the key check of the first view")
    assert made.view.panes["song"]["cost"].endswith(f"· {sandbox.credits()} left")
    intent(made, kind="ready")  # a second view (another output of the same studio)
    assert sandbox.request_counts().get("/v1/get_api_key_info", 0) == before + 1

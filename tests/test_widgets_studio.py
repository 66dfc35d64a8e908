"""`studio()` without a browser: the forms in tabs, one watcher below, errors in the forms, against the sandbox."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from helpers import HOSTILE, WAIT, ManualClock, html_values, wait_until
from IPython.core.interactiveshell import InteractiveShell

from ipymusicgen.client import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.tasks import TaskState
from ipymusicgen.widgets import GenerateForm, KeyInfoPanel, LyricsForm, Studio, V2Form, studio
from ipymusicgen.widgets.studio import GENERATE_TAB, KEY_TAB, TAB_TITLES, V2_TAB


@pytest.fixture
def studios() -> Iterator[Callable[[MusicClient], Studio]]:
    """Make studios that are closed (polling stopped) at the end of the test."""
    made: list[Studio] = []

    def make(client: MusicClient) -> Studio:
        made.append(studio(client))
        return made[-1]

    yield make
    for item in made:
        item.close()


def submit_song(form: GenerateForm, **fields: object) -> list[str]:
    got: list[list[str]] = []
    form.on_submitted(got.append)
    form.set_values(**{"action": "custom", "style": "jazz", "title": "Night", "lyrics": "la la", **fields})
    form.submit_button.click()
    assert form.error == "" and len(got) == 1, form.error
    return got[0]


def test_four_forms_in_tabs_and_the_watcher_below(client: MusicClient, studios: Callable[..., Studio]) -> None:
    made = studios(client)
    assert made.children == (made.tabs, made.watcher)
    assert [type(tab) for tab in made.tabs.children] == [GenerateForm, V2Form, LyricsForm, KeyInfoPanel]
    assert tuple(made.tabs.titles) == TAB_TITLES
    assert made.lyrics._target is made.generate  # "use in song" fills the studio's own form
    text = repr(made)
    assert text.startswith("Studio [Generate | Generate v2 | Lyrics | Key]") and "TaskWatcher: 0 tasks" in text
    assert InteractiveShell.instance().display_formatter.format(made)[0]["text/plain"] == text


def test_submitting_shows_the_new_tasks_in_the_watcher_at_once(
    client: MusicClient, clock: ManualClock, studios: Callable[..., Studio]
) -> None:
    made = studios(client)
    v1 = submit_song(made.generate)
    assert made.watcher.ids == v1 and [made.watcher.card(i).v2 for i in v1] == [False, False]
    got: list[list[str]] = []
    made.v2.on_submitted(got.append)
    made.v2.set_values(prompt="calm piano")
    made.v2.submit_button.click()
    assert len(got) == 1 and made.watcher.ids == v1 + got[0]
    assert [made.watcher.card(i).v2 for i in got[0]] == [True, True]
    assert made.watcher.running
    clock.stages(2)
    records = made.watcher.wait(timeout=WAIT)
    assert {r.state for r in records} == {TaskState.COMPLETE} and len(records) == 4
    wait_until(lambda: not made.watcher.running, "polling to stop once all songs are done")


def test_wrong_key_is_shown_in_each_form_not_raised(sandbox: Sandbox, studios: Callable[..., Studio]) -> None:
    with sandbox.client(api_key="not-a-key", max_retries=0) as wrong:
        made = studios(wrong)
        made.generate.set_values(style="x")
        made.generate.submit_button.click()
        assert "API key problem" in made.generate.error
        made.v2.set_values(prompt="p")
        made.v2.submit_button.click()
        assert "API key problem" in made.v2.error
        made.tabs.selected_index = KEY_TAB  # the key tab reads the key info when first shown
        assert "API key problem" in made.key_info.error and made.key_info.info is None
        assert made.watcher.ids == [] and "not-a-key" not in made.generate.error


def test_no_credits_left_is_shown_in_the_form(
    client: MusicClient, sandbox: Sandbox, studios: Callable[..., Studio]
) -> None:
    assert sandbox.state.charge(sandbox.api_key, sandbox.credits())  # spend every credit of the key
    made = studios(client)
    made.generate.set_values(style="x")
    made.generate.submit_button.click()
    assert "No credits left" in made.generate.error and "Insufficient credits" in made.generate.error
    assert made.watcher.ids == [] and not made.generate.submit_button.disabled


def test_server_422_lands_on_its_field_escaped(sandbox: Sandbox, studios: Callable[..., Studio]) -> None:
    with sandbox.client(max_retries=0) as lenient:
        lenient.settings = lenient.settings.with_changes(allow_unknown_models=True)
        made = studios(lenient)
        made.generate.set_values(action="auto", style="x", mv=HOSTILE)  # passes the client, not the service
        assert made.generate.valid
        made.generate.submit_button.click()
        assert sandbox.request_counts()["/v1/music/generate"] == 1
        assert "unknown model" in made.generate.fields["mv"].problem and HOSTILE in made.generate.fields["mv"].problem
        assert "The request was refused" in made.generate.error
        markup = "\n".join(html_values(made.generate))
        assert "&lt;img src=x onerror=alert(1)&gt;" in markup and "<img" not in markup
        assert made.watcher.ids == []


def test_key_tab_shows_the_credits_left_without_the_key(
    client: MusicClient, sandbox: Sandbox, clock: ManualClock, studios: Callable[..., Studio]
) -> None:
    made = studios(client)
    assert made.key_info.info is None  # nothing is read until someone looks
    made.tabs.selected_index = KEY_TAB
    assert made.key_info.info is not None and made.key_info.info.key_music_counts == sandbox.credits()
    before = sandbox.credits()
    assert f"<b>{before}</b>" in made.key_info.html and sandbox.api_key not in made.key_info.html
    submit_song(made.generate)
    assert f"<b>{before}</b>" in made.key_info.html  # read on demand, not behind the user's back
    made.key_info._button.click()
    assert sandbox.credits() < before and f"<b>{sandbox.credits()}</b>" in made.key_info.html


def test_lyrics_go_into_the_generate_tab(client: MusicClient, studios: Callable[..., Studio]) -> None:
    made = studios(client)
    made.tabs.selected_index = 2
    made.lyrics.set_values(prompt="a rainy night in the city")
    made.lyrics.submit_button.click()
    assert made.lyrics.result is not None and made.lyrics.error == ""
    made.lyrics._use.click()
    assert made.tabs.selected_index == GENERATE_TAB
    values = made.generate.values()
    assert values["action"] == "custom" and values["lyrics"] == made.lyrics.result.text


def test_extend_from_a_card_fills_the_studio_form_and_adds_the_tasks(
    client: MusicClient, clock: ManualClock, studios: Callable[..., Studio]
) -> None:
    made = studios(client)
    first = submit_song(made.generate, title="First")
    clock.stages(2)
    made.watcher.wait(timeout=WAIT)
    card = made.watcher.card(first[0])
    made.tabs.selected_index = KEY_TAB
    card.buttons["extend"].click()
    assert made.tabs.selected_index == GENERATE_TAB and card.form is None  # the studio's own form, not a new one
    values = made.generate.values()
    assert values["action"] == "extend" and values["continue_song_id"] == card.record.song_id
    assert values["continue_at"] == 4 and values["style"] == "jazz" and values["title"] == "First"
    assert "lyrics" not in values  # the last request's lyrics belong to another song
    made.generate.submit_button.click()
    assert made.generate.error == "" and len(made.watcher.ids) == 4
    assert made.watcher.running


def test_extend_a_v2_song_uses_the_v2_tab(
    client: MusicClient, clock: ManualClock, studios: Callable[..., Studio]
) -> None:
    made = studios(client)
    made.v2.set_values(prompt="calm piano")
    made.v2.submit_button.click()
    clock.stages(2)
    made.watcher.wait(timeout=WAIT)
    card = made.watcher.card(made.watcher.ids[0])
    card.buttons["extend"].click()
    assert made.tabs.selected_index == V2_TAB
    values = made.v2.values()
    assert values["is_auto"] == 0 and values["continue_song_id"] == card.task_id and values["continue_at"] == 4
    assert values["prompt"] == "calm piano" and values["title"] == card.record.title
    made.v2.submit_button.click()
    assert made.v2.error == "" and len(made.watcher.ids) == 4
    assert all(made.watcher.card(i).v2 for i in made.watcher.ids)


def test_closing_the_studio_stops_polling(client: MusicClient, clock: ManualClock) -> None:
    made = studio(client)
    submit_song(made.generate)
    thread = made.watcher._thread
    assert thread is not None and thread.is_alive()
    made.close()
    assert not thread.is_alive() and not made.watcher.running
    parts = [made.tabs, made.generate, made.generate.fields["title"].control, made.v2.submit_button, made.key_info]
    assert all(part.comm is None for part in parts) and made.comm is None


def test_parts_carry_stable_css_classes_for_styling_and_browser_tests(
    client: MusicClient, studios: Callable[..., Studio]
) -> None:
    made = studios(client)
    assert "ipymusicgen-studio" in made._dom_classes
    assert "ipymusicgen-watcher" in made.watcher._dom_classes
    forms = [made.generate, made.v2, made.lyrics]
    assert all("ipymusicgen-form" in form._dom_classes for form in forms)
    made.generate.set_values(action="auto", style="css hooks")
    made.generate.submit_button.click()
    card = next(iter(made.watcher.cards.values()))
    assert "ipymusicgen-task-card" in card._dom_classes
    assert "ipymusicgen-player" in card.audio._dom_classes

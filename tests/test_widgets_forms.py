"""The form names of earlier releases are the studio's panes: fields per action, markers, live counts,
problems, and what the service says, without a browser."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.models.schema import ACTIONS, PROMPT_MAX, TITLE_MAX, shape_fields
from ipymusicgen.widgets.studio import KeyPane, LyricsPane, SongPane, Studio, V2Pane

Handler = Callable[[httpx.Request], httpx.Response]


def offline_client(handler: Handler | None = None) -> MusicClient:
    """A client whose transport is a function: no network, no server."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"unexpected request {request.url}")

    transport = httpx.MockTransport(handler or refuse)
    return MusicClient(
        "k-offline",
        base_url="http://127.0.0.1:9",
        v2_base_url="http://127.0.0.1:9",
        max_retries=0,
        http_client=httpx.Client(transport=transport),
    )


def song_pane(client: MusicClient, **values: Any) -> SongPane:
    """The Song pane of a new studio, prefilled with `values` (the one form model)."""
    pane = Studio(client).song
    if values:
        pane.set_values(**values)
    return pane


def v2_pane(client: MusicClient) -> V2Pane:
    return Studio(client).v2


def lyrics_pane(client: MusicClient, *, target: SongPane | None = None) -> LyricsPane:
    """The Lyrics pane; "use in song" fills the Song pane of the same studio (`target`'s, when given)."""
    return (target.studio if target is not None else Studio(client)).lyrics


@pytest.fixture
def form() -> SongPane:
    return song_pane(offline_client())


def shown(form: Any) -> set[str]:
    return {name for name, field in form.fields.items() if field["shown"]}


def problem(form: Any, name: str) -> str:
    return form.fields[name]["problem"]


@pytest.mark.parametrize("old", ["GenerateForm", "V2Form", "LyricsForm", "KeyInfoPanel"])
def test_the_old_form_names_are_simply_absent_and_the_panes_replace_them(old: str) -> None:
    """The package was never released: the old form names are gone (no shim, no tombstone since ea5fe36), and the
    studio's panes do their work."""
    import importlib

    import ipymusicgen
    import ipymusicgen.widgets as widgets

    client = offline_client()
    song, v2, lyrics = song_pane(client, style="jazz"), v2_pane(client), lyrics_pane(client)
    assert isinstance(song, SongPane) and isinstance(v2, V2Pane) and isinstance(lyrics, LyricsPane)
    assert isinstance(song.studio, Studio) and song.client is client
    assert song.values()["style"] == "jazz"
    assert isinstance(Studio(client).key_info, KeyPane)
    assert not hasattr(widgets, old) and not hasattr(ipymusicgen, old)
    assert old not in getattr(widgets, "__all__", ()) and old not in getattr(ipymusicgen, "__all__", ())
    with pytest.raises(ImportError, match=rf"cannot import name '{old}'"):
        exec(f"from ipymusicgen.widgets import {old}", {})
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"ipymusicgen.widgets.{old}")


@pytest.mark.parametrize("action", ACTIONS)
def test_fields_shown_per_action_match_the_shape(form: SongPane, action: str) -> None:
    form.set_values(action=action)
    shape = shape_fields(action)
    assert shown(form) == {"provider", "action", *shape}  # the engine picker (issue 37) heads every song
    for name, field in form.fields.items():
        if name in shape:
            assert field["required"] == shape[name], name
    assert form.fields["action"]["required"]


def test_required_marker_follows_the_action(form: SongPane) -> None:
    form.set_values(action="extend")
    assert not form.fields["continue_song_id"]["required"]
    form.set_values(action="concat")
    assert form.fields["continue_song_id"]["required"]


def test_title_count_is_live_against_80(form: SongPane) -> None:
    form.set_values(action="custom")
    form.type("title", "Rain")
    assert form.fields["title"]["count"] == f"4 of {TITLE_MAX} characters"


def test_lyrics_word_count_against_the_model_limit(form: SongPane) -> None:
    form.set_values(action="custom", mv="MFV3.0", lyrics="one two three")
    assert form.fields["lyrics"]["count"] == "3 of 5,000 words"
    form.set_values(mv="MFV1.0")
    assert form.fields["lyrics"]["count"] == "3 of 3,000 words"
    assert "4 min" in form.fields["mv"]["count"] and "3,000" in form.fields["mv"]["count"]


def test_model_picker_shows_each_models_limits(form: SongPane) -> None:
    assert {"MFV3.0", "MFV1.0"} <= {value for _label, value in form.fields["mv"]["options"]}
    form.set_values(mv="MFV3.0")
    assert "8 min" in form.fields["mv"]["count"] and "5,000" in form.fields["mv"]["count"]
    form.set_values(mv="MFV1.0")
    assert "4 min" in form.fields["mv"]["count"] and "3,000" in form.fields["mv"]["count"]


def test_invalid_title_is_shown_next_to_it_and_blocks_submit(form: SongPane) -> None:
    form.set_values(action="custom", title="x" * 81)
    assert "at most 80 characters" in problem(form, "title")
    assert not form.valid
    assert form.submit() is None  # nothing sent: the transport would fail the test
    form.set_values(title="x" * 80)
    assert problem(form, "title") == ""
    assert form.valid


def test_required_field_missing_is_shown(form: SongPane) -> None:
    form.set_values(action="concat")
    assert form.submit() is None  # a tried submit shows the problems of untouched fields too
    assert problem(form, "continue_song_id")
    form.set_values(continue_song_id="song-1")
    assert problem(form, "continue_song_id") == ""
    assert form.valid


def test_non_number_continue_at_is_refused_by_the_models(form: SongPane) -> None:
    form.set_values(action="extend", continue_song_id="s", continue_at="soon")
    assert problem(form, "continue_at")
    assert not form.valid
    form.set_values(continue_at=12.5)
    assert form.values()["continue_at"] == 12.5
    assert form.valid


def test_too_many_lyrics_words_for_the_model(form: SongPane) -> None:
    form.set_values(action="custom", mv="MFV1.0", lyrics="la " * 3001)
    assert "3000 words" in problem(form, "lyrics")
    assert not form.valid


def test_instrumental_disables_lyrics_and_leaves_them_out(form: SongPane) -> None:
    form.set_values(action="custom", lyrics="hello world")
    assert form.values()["lyrics"] == "hello world"
    form.type("instrumental", True)
    assert form.fields["lyrics"]["disabled"]
    assert "lyrics" not in form.values()
    assert form.values()["instrumental"] == 1


def test_values_hold_only_the_shape_of_the_action(form: SongPane) -> None:
    form.set_values(action="custom", style="jazz", title="T", singer_id="x", audio_url="https://a/b.mp3")
    assert form.values() == {"action": "custom", "style": "jazz", "title": "T", "instrumental": 0}
    form.set_values(action="upload")
    assert form.values() == {"action": "upload", "audio_url": "https://a/b.mp3"}


def test_set_values_refuses_unknown_fields(form: SongPane) -> None:
    with pytest.raises(TypeError, match="prompt"):
        form.set_values(prompt="x")


def test_unknown_model_follows_the_clients_setting() -> None:
    strict = song_pane(offline_client())
    strict.set_values(mv="MFV9.9")
    assert "unknown model" in problem(strict, "mv")
    lenient = offline_client()
    lenient.settings = lenient.settings.with_changes(allow_unknown_models=True)
    form = song_pane(lenient)
    form.set_values(mv="MFV9.9")
    assert problem(form, "mv") == "" and form.values()["mv"] == "MFV9.9"


def test_form_repr_is_short_text(form: SongPane) -> None:
    form.set_values(action="custom", title="x" * 81)
    text = repr(form)
    assert text.startswith("SongPane(action='custom'") and "[incomplete]" in text
    assert "title: at most 80 characters" in text


# -- submitting, and what the service says ---------------------------------------------------------------


def envelope(data: object, status: int = 200, message: str = "Success") -> httpx.Response:
    return httpx.Response(200, json={"status": status, "message": message, "data": data})


def test_submit_sends_once_and_calls_back_with_ids() -> None:
    bodies: list[dict[str, object]] = []
    seen_busy: list[bool] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        seen_busy.append(form.busy and not form.state()["can_submit"])
        return envelope({"ids": ["t1", "t2"]})

    form = song_pane(offline_client(handler))
    got: list[list[str]] = []
    form.on_submitted(got.append)
    form.set_values(action="auto", style="lo-fi")
    form.submit()
    assert bodies == [{"action": "auto", "style": "lo-fi", "instrumental": 0}]
    assert seen_busy == [True]  # the button is off while the request is in flight
    assert got == [["t1", "t2"]]
    assert form.state()["can_submit"]
    assert form.ids == ["t1", "t2"] and form.status == "2 songs started"


def test_server_422_lands_on_the_field_as_plain_text() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        detail = [{"loc": ["body", "custom", "title"], "msg": "<b>bad</b> title", "type": "value_error"}]
        return httpx.Response(422, json={"detail": detail})

    form = song_pane(offline_client(handler))
    form.set_values(action="custom", title="ok")
    assert form.submit() is None
    assert problem(form, "title") == "<b>bad</b> title"  # data: the front end sets it with textContent
    assert "refused" in form.error_title
    assert "Traceback" not in form.error


def test_auth_error_is_shown_in_the_form() -> None:
    form = song_pane(offline_client(lambda r: httpx.Response(401, json={"message": "invalid api key"})))
    form.set_values(style="x")
    assert form.submit() is None
    assert form.error_title == "API key problem" and "invalid api key" in form.error
    # "Make songs" waits while the error stands: dismissing it (or changing the request) is the decision
    assert not form.state()["can_submit"] and form.status == "nothing was started"
    form.dismiss()
    assert form.state()["can_submit"] and not form.state()["error"]
    form.submit()
    form.set_values(style="y")
    assert form.state()["can_submit"] and not form.error


def test_no_credits_error_is_shown_as_plain_text() -> None:
    handler: Handler = lambda r: envelope(None, 400, "insufficient credits <script>x</script>")  # noqa: E731
    form = song_pane(offline_client(handler))
    form.set_values(style="x")
    form.submit()
    assert form.error_title == "No credits left"
    assert "<script>x</script>" in form.error  # kept as text; never parsed as HTML by the view


def test_unexpected_exceptions_never_escape_the_button() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("boom <x>")

    form = song_pane(offline_client(handler))
    form.set_values(style="x")
    form.submit()  # must not raise
    assert "boom <x>" in form.error


# -- the v2 pane -----------------------------------------------------------------------------------------


def test_v2_is_auto_switches_the_visible_fields() -> None:
    form = v2_pane(offline_client())
    assert shown(form) == {"is_auto", "model_version", "prompt"}
    form.set_values(is_auto=0)
    assert shown(form) == set(form.fields)
    form.type("is_auto", 1)
    assert shown(form) == {"is_auto", "model_version", "prompt"}
    assert form.fields["prompt"]["required"]
    assert not form.fields["lyrics"]["required"]


def test_v2_prompt_count_and_bounds() -> None:
    form = v2_pane(offline_client())
    assert not form.valid  # required, empty
    form.set_values(prompt="calm piano")
    assert form.fields["prompt"]["count"] == f"10 of {PROMPT_MAX} characters"
    assert form.valid
    form.set_values(prompt="x" * 181)
    assert "at most 180" in problem(form, "prompt")
    assert not form.valid


def test_v2_auto_mode_sends_only_what_applies() -> None:
    form = v2_pane(offline_client())
    form.set_values(is_auto=0, prompt="p", lyrics="words", title="T")
    assert form.values()["lyrics"] == "words"
    form.set_values(is_auto=1)
    assert form.values() == {"is_auto": 1, "model_version": "v4.5-plus", "prompt": "p"}


def test_v2_extension_rule_is_the_models() -> None:
    form = v2_pane(offline_client())
    form.set_values(is_auto=0, prompt="p", continue_song_id="s", continue_at=0)
    assert "more than 0" in problem(form, "continue_at")
    form.set_values(model_version="v3.0", continue_at=500)
    assert "at most 120" in problem(form, "continue_at")
    form.set_values(continue_at=60)
    assert problem(form, "continue_at") == "" and form.valid


def test_v2_submit_returns_song_ids() -> None:
    songs = [{"song_id": "s1", "status": "RUNNING"}, {"song_id": "s2", "status": "RUNNING"}]
    form = v2_pane(offline_client(lambda r: envelope(songs)))
    got: list[list[str]] = []
    form.on_submitted(lambda result: got.append([song.id for song in result]))
    form.set_values(prompt="p")
    form.submit()
    assert got == [["s1", "s2"]] and form.ids == ["s1", "s2"]
    assert repr(form).startswith("V2Pane(")


# -- the lyrics pane -------------------------------------------------------------------------------------


def test_lyrics_are_kept_as_text_and_handed_to_the_song_pane() -> None:
    text = "[Verse]\n<b>rain</b> & sun"
    client = offline_client(lambda r: envelope({"text": text, "title": "Weather"}))
    target = song_pane(client)
    form = lyrics_pane(client, target=target)
    assert not form.valid  # empty prompt
    form.set_values(prompt="weather")
    form.submit()
    assert form.state()["lyrics"] == {"title": "Weather", "text": text}
    form.use_in_song()
    assert target.studio.tab == "song"
    assert target.values()["action"] == "custom"
    assert target.values()["lyrics"] == text
    assert target.values()["title"] == "Weather"
    assert "lyrics" in shown(target)


def test_lyrics_without_target_fill_their_own_studios_song_pane() -> None:
    form = lyrics_pane(offline_client(lambda r: envelope({"text": "la la"})))
    form.set_values(prompt="p")
    form.submit()
    form.use_in_song()
    assert form.studio.song.values()["lyrics"] == "la la"

"""Forms without a browser: fields per action, markers, live counts, problems, errors from the service."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.models.schema import ACTIONS, PROMPT_MAX, TITLE_MAX, shape_fields
from ipymusicgen.widgets import GenerateForm, LyricsForm, V2Form

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


@pytest.fixture
def form() -> GenerateForm:
    return GenerateForm(client=offline_client())


def shown(form: GenerateForm | V2Form) -> set[str]:
    return {name for name, row in form.fields.items() if row.layout.display != "none"}


@pytest.mark.parametrize("action", ACTIONS)
def test_fields_shown_per_action_match_the_shape(form: GenerateForm, action: str) -> None:
    form.set_values(action=action)
    shape = shape_fields(action)
    assert shown(form) == {"action", *shape}
    for name, row in form.fields.items():
        if name in shape:
            assert row.control.description.endswith(" *") == shape[name], name
    assert form.fields["action"].control.description.endswith("*")


def test_required_marker_follows_the_action(form: GenerateForm) -> None:
    form.set_values(action="extend")
    assert form.fields["continue_song_id"].control.description == "continue_song_id"
    form.set_values(action="concat")
    assert form.fields["continue_song_id"].control.description == "continue_song_id *"


def test_title_count_is_live_against_80(form: GenerateForm) -> None:
    form.set_values(action="custom")
    form.fields["title"].control.value = "Rain"
    assert form.fields["title"].count == f"4 / {TITLE_MAX}"
    assert "4 / 80" in form.fields["title"]._count.value


def test_lyrics_word_count_against_the_model_limit(form: GenerateForm) -> None:
    form.set_values(action="custom", mv="MFV3.0", lyrics="one two three")
    assert form.fields["lyrics"].count == "3 / 5,000 words"
    form.set_values(mv="MFV1.0")
    assert form.fields["lyrics"].count == "3 / 3,000 words"
    assert "4 min" in form.fields["mv"].count and "3,000" in form.fields["mv"].count


def test_model_picker_shows_each_models_limits(form: GenerateForm) -> None:
    labels = dict((value, label) for label, value in form.fields["mv"].control.options)
    assert "8 min" in labels["MFV3.0"] and "5,000" in labels["MFV3.0"]
    assert "4 min" in labels["MFV1.0"] and "3,000" in labels["MFV1.0"]


def test_invalid_title_is_shown_next_to_it_and_blocks_submit(form: GenerateForm) -> None:
    form.set_values(action="custom", title="x" * 81)
    assert "at most 80 characters" in form.fields["title"].problem
    assert form.submit_button.disabled
    assert form.submit() is None  # nothing sent: the transport would fail the test
    form.set_values(title="x" * 80)
    assert form.fields["title"].problem == ""
    assert not form.submit_button.disabled


def test_required_field_missing_is_shown(form: GenerateForm) -> None:
    form.set_values(action="concat")
    assert form.fields["continue_song_id"].problem == "required"
    assert form.submit_button.disabled
    form.set_values(continue_song_id="song-1")
    assert form.fields["continue_song_id"].problem == ""
    assert not form.submit_button.disabled


def test_non_number_continue_at_is_refused_by_the_models(form: GenerateForm) -> None:
    form.set_values(action="extend", continue_song_id="s", continue_at="soon")
    assert form.fields["continue_at"].problem
    assert form.submit_button.disabled
    form.set_values(continue_at=12.5)
    assert form.values()["continue_at"] == 12.5
    assert not form.submit_button.disabled


def test_too_many_lyrics_words_for_the_model(form: GenerateForm) -> None:
    form.set_values(action="custom", mv="MFV1.0", lyrics="la " * 3001)
    assert "3000 words" in form.fields["lyrics"].problem
    assert form.submit_button.disabled


def test_instrumental_disables_lyrics_and_leaves_them_out(form: GenerateForm) -> None:
    form.set_values(action="custom", lyrics="hello world")
    assert form.values()["lyrics"] == "hello world"
    form.fields["instrumental"].control.value = True
    assert form.fields["lyrics"].control.disabled
    assert "lyrics" not in form.values()
    assert form.values()["instrumental"] == 1


def test_values_hold_only_the_shape_of_the_action(form: GenerateForm) -> None:
    form.set_values(action="custom", style="jazz", title="T", singer_id="x", audio_url="https://a/b.mp3")
    assert form.values() == {"action": "custom", "style": "jazz", "title": "T", "instrumental": 0}
    form.set_values(action="upload")
    assert form.values() == {"action": "upload", "audio_url": "https://a/b.mp3"}


def test_set_values_refuses_unknown_fields(form: GenerateForm) -> None:
    with pytest.raises(TypeError, match="prompt"):
        form.set_values(prompt="x")


def test_unknown_model_follows_the_clients_setting() -> None:
    strict = GenerateForm(client=offline_client())
    strict.set_values(mv="MFV9.9")
    assert "unknown model" in strict.fields["mv"].problem
    lenient = offline_client()
    lenient.settings = lenient.settings.with_changes(allow_unknown_models=True)
    form = GenerateForm(client=lenient)
    form.set_values(mv="MFV9.9")
    assert form.fields["mv"].problem == "" and form.values()["mv"] == "MFV9.9"


def test_form_repr_is_short_text(form: GenerateForm) -> None:
    form.set_values(action="custom", title="x" * 81)
    text = repr(form)
    assert text.startswith("GenerateForm(action='custom'") and "[invalid]" in text
    assert "title: at most 80 characters" in text


# -- submitting, and what the service says ---------------------------------------------------------------


def envelope(data: object, status: int = 200, message: str = "Success") -> httpx.Response:
    return httpx.Response(200, json={"status": status, "message": message, "data": data})


def test_submit_sends_once_and_calls_back_with_ids() -> None:
    bodies: list[dict[str, object]] = []
    seen_disabled: list[bool] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        seen_disabled.append(form.submit_button.disabled)
        return envelope({"ids": ["t1", "t2"]})

    form = GenerateForm(client=offline_client(handler))
    got: list[list[str]] = []
    form.on_submitted(got.append)
    form.set_values(action="auto", style="lo-fi")
    form.submit_button.click()
    assert bodies == [{"action": "auto", "style": "lo-fi", "instrumental": 0}]
    assert seen_disabled == [True]  # disabled while the request is in flight
    assert got == [["t1", "t2"]]
    assert not form.submit_button.disabled
    assert "t1" in form._status.value


def test_server_422_lands_on_the_field_escaped() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        detail = [{"loc": ["body", "custom", "title"], "msg": "<b>bad</b> title", "type": "value_error"}]
        return httpx.Response(422, json={"detail": detail})

    form = GenerateForm(client=offline_client(handler))
    form.set_values(action="custom", title="ok")
    assert form.submit() is None
    assert form.fields["title"].problem == "<b>bad</b> title"
    assert "&lt;b&gt;bad&lt;/b&gt;" in form.fields["title"]._problem.value
    assert "<b>bad" not in form.fields["title"]._problem.value
    assert "refused" in form.error
    assert "Traceback" not in form.error


def test_auth_error_is_shown_in_the_form() -> None:
    form = GenerateForm(client=offline_client(lambda r: httpx.Response(401, json={"message": "invalid api key"})))
    form.set_values(style="x")
    assert form.submit() is None
    assert "API key problem" in form.error and "invalid api key" in form.error
    assert not form.submit_button.disabled


def test_no_credits_error_is_shown_escaped() -> None:
    handler: Handler = lambda r: envelope(None, 400, "insufficient credits <script>x</script>")  # noqa: E731
    form = GenerateForm(client=offline_client(handler))
    form.set_values(style="x")
    form.submit_button.click()
    assert "No credits left" in form.error
    assert "&lt;script&gt;" in form.error and "<script>" not in form.error


def test_unexpected_exceptions_never_escape_the_button() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("boom <x>")

    form = GenerateForm(client=offline_client(handler))
    form.set_values(style="x")
    form.submit_button.click()  # must not raise
    assert "boom &lt;x&gt;" in form.error


# -- V2Form ----------------------------------------------------------------------------------------------


def test_v2_is_auto_switches_the_visible_fields() -> None:
    form = V2Form(client=offline_client())
    assert shown(form) == {"is_auto", "model_version", "prompt"}
    form.set_values(is_auto=0)
    assert shown(form) == set(form.fields)
    form.fields["is_auto"].control.value = 1
    assert shown(form) == {"is_auto", "model_version", "prompt"}
    assert form.fields["prompt"].control.description == "prompt *"
    assert form.fields["lyrics"].control.description == "lyrics"


def test_v2_prompt_count_and_bounds() -> None:
    form = V2Form(client=offline_client())
    assert form.fields["prompt"].problem  # required, empty
    assert form.submit_button.disabled
    form.set_values(prompt="calm piano")
    assert form.fields["prompt"].count == f"10 / {PROMPT_MAX}"
    assert not form.submit_button.disabled
    form.set_values(prompt="x" * 181)
    assert "at most 180" in form.fields["prompt"].problem
    assert form.submit_button.disabled


def test_v2_auto_mode_sends_only_what_applies() -> None:
    form = V2Form(client=offline_client())
    form.set_values(is_auto=0, prompt="p", lyrics="words", title="T")
    assert form.values()["lyrics"] == "words"
    form.set_values(is_auto=1)
    assert form.values() == {"is_auto": 1, "model_version": "v4.5-plus", "prompt": "p"}


def test_v2_extension_rule_is_the_models() -> None:
    form = V2Form(client=offline_client())
    form.set_values(is_auto=0, prompt="p", continue_song_id="s", continue_at=0)
    assert "more than 0" in form.fields["continue_at"].problem
    form.set_values(model_version="v3.0", continue_at=500)
    assert "at most 120" in form.fields["continue_at"].problem
    form.set_values(continue_at=60)
    assert form.fields["continue_at"].problem == "" and not form.submit_button.disabled


def test_v2_submit_returns_song_ids() -> None:
    songs = [{"song_id": "s1", "status": "RUNNING"}, {"song_id": "s2", "status": "RUNNING"}]
    form = V2Form(client=offline_client(lambda r: envelope(songs)))
    got: list[list[str]] = []
    form.on_submitted(got.append)
    form.set_values(prompt="p")
    form.submit_button.click()
    assert got == [["s1", "s2"]]
    assert repr(form).startswith("V2Form(")


# -- LyricsForm ------------------------------------------------------------------------------------------


def test_lyrics_are_shown_escaped_and_handed_to_a_generate_form() -> None:
    text = "[Verse]\n<b>rain</b> & sun"
    client = offline_client(lambda r: envelope({"text": text, "title": "Weather"}))
    target = GenerateForm(client=client)
    form = LyricsForm(client=client, target=target)
    assert form.submit_button.disabled  # empty prompt
    form.set_values(prompt="weather")
    form.submit_button.click()
    assert "&lt;b&gt;rain&lt;/b&gt; &amp; sun" in form.lyrics_html and "<b>rain" not in form.lyrics_html
    used: list[GenerateForm] = []
    form.on_used(used.append)
    form._use.click()
    assert used == [target]
    assert target.values()["action"] == "custom"
    assert target.values()["lyrics"] == text
    assert target.values()["title"] == "Weather"
    assert "lyrics" in shown(target)


def test_lyrics_without_target_open_a_new_form() -> None:
    form = LyricsForm(client=offline_client(lambda r: envelope({"text": "la la"})))
    form.set_values(prompt="p")
    form.submit()
    made = form.use_in_song()
    assert isinstance(made, GenerateForm) and made.values()["lyrics"] == "la la"
    assert made in form._slot.children

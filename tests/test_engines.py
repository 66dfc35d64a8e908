"""Each engine's wire rules (engines/) and the capability table (models/providers.py): a request an engine cannot
honour is refused before anything is sent, in one line naming the provider and the field; requests and answers
have the engines' own shapes; the money rules are the client's."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest

from ipymusicgen.engines import ENGINES, elevenlabs, lyria, musicful
from ipymusicgen.engines.wire import AnswerError, Charge, charge_of_status, scrub
from ipymusicgen.errors import RequestValidationError
from ipymusicgen.models.providers import CAPABILITIES, build_engine_request, stanzas

LYRICS = "first line\nsecond line\n\n\nthird line\n  \nfourth line\nfifth line\n"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"provider": "lyria", "prompt": "folk", "seconds": 90}, "seconds", "30 s"),
        ({"provider": "lyria", "model": "lyria-3-clip-preview", "prompt": "folk", "seconds": 29.5}, "seconds", "30 s"),
        ({"provider": "lyria", "model": "lyria-3-pro-preview", "prompt": "folk", "seconds": 600}, "seconds", "180"),
        ({"provider": "elevenlabs", "prompt": "folk", "seconds": 2.999}, "seconds", "3 s or more"),
        ({"provider": "elevenlabs", "prompt": "folk", "seconds": 600.001}, "seconds", "at most 600"),
        ({"provider": "elevenlabs", "prompt": "folk", "seconds": float("nan")}, "seconds", "finite"),
        ({"provider": "lyria", "prompt": "folk", "extend": "some-song"}, "extend", "cannot extend"),
        ({"provider": "elevenlabs", "prompt": "folk", "extend": "some-song"}, "extend", "cannot extend"),
        ({"provider": "elevenlabs", "prompt": "folk", "seed": 7}, "seed", "only with lyrics"),
        ({"provider": "lyria", "prompt": "folk", "seed": 7}, "seed", "takes no seed"),
        ({"provider": "elevenlabs", "lyrics": LYRICS, "instrumental": True}, "instrumental", "instrumental"),
        ({"provider": "elevenlabs", "model": "music_v9", "prompt": "folk"}, "model", "no model"),
        ({"provider": "elevenlabs", "model": "music_v2", "lyrics": LYRICS}, "lyrics", "no lyrics"),
        ({"provider": "elevenlabs", "prompt": "  "}, "prompt", "needs a prompt"),
        ({"provider": "elevenlabs", "lyrics": LYRICS, "seconds": 5}, "seconds", "each stanza"),
        ({"provider": "elevenlabs", "lyrics": "x" * 201}, "lyrics", "200 characters"),
        ({"provider": "lyria", "prompt": "folk", "timestamps": True}, "timestamps", "no word timestamps"),
        ({"provider": "elevenlabs", "lyrics": "la\n\n" * 21}, "lyrics", "21 stanzas of 30 s"),
        ({"provider": "lyria", "prompt": "folk", "tempo": 120}, "tempo", "not a field"),
        ({"provider": "elevenlabs", "prompt": "folk", "seed": -1, "lyrics": LYRICS}, "seed", "greater than"),
    ],
)
def test_a_request_an_engine_cannot_honour_is_refused_in_one_line_naming_provider_and_field(
    fields: dict, field: str, words: str
) -> None:
    with pytest.raises(RequestValidationError) as refused:
        build_engine_request(**fields)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{field}: {fields['provider']}"), message
    assert words in message and "nothing was sent" in message


def test_an_unknown_provider_is_refused_naming_the_field() -> None:
    with pytest.raises(RequestValidationError, match=r"^provider: must be one of musicful, elevenlabs, lyria"):
        build_engine_request(provider="suno", prompt="x")


@pytest.mark.parametrize(
    "fields",
    [
        {"provider": "elevenlabs", "prompt": "folk", "seconds": 3},
        {"provider": "elevenlabs", "prompt": "folk", "seconds": 600},
        {"provider": "elevenlabs", "prompt": "folk", "instrumental": True, "seconds": 90},
        {"provider": "elevenlabs", "lyrics": LYRICS, "seed": 0, "seconds": 90},
        {"provider": "lyria", "prompt": "folk"},
        {"provider": "lyria", "prompt": "folk", "seconds": 30},
        {"provider": "LYRIA ", "model": "lyria-3-pro-preview", "prompt": "folk", "seconds": 90},
    ],
)
def test_what_an_engine_can_do_is_accepted(fields: dict) -> None:
    assert build_engine_request(**fields).provider == fields["provider"].strip().lower()


def test_every_capability_row_says_what_seconds_means() -> None:
    assert all(row.seconds_meaning for row in CAPABILITIES.values())
    assert CAPABILITIES[("lyria", "lyria-3-clip-preview")].fixed_seconds == 30


def test_lyrics_become_a_composition_plan_one_section_per_stanza() -> None:
    request = build_engine_request(provider="elevenlabs", lyrics=LYRICS, prompt="sad piano", seconds=91, seed=5)
    wire = elevenlabs.build(request)
    assert wire.url_path == "/v1/music" and wire.endpoint.paid and wire.params == {}
    plan = wire.json["composition_plan"]
    assert [s["lines"] for s in plan["sections"]] == [["first line", "second line"], ["third line"],
                                                      ["fourth line", "fifth line"]]  # fmt: skip
    assert sum(s["duration_ms"] for s in plan["sections"]) == 91_000
    assert plan["positive_global_styles"] == ["sad piano"]
    assert wire.json["seed"] == 5 and "prompt" not in wire.json and "music_length_ms" not in wire.json


def test_a_prompt_goes_with_its_length_and_the_detailed_variant_asks_for_timestamps() -> None:
    request = build_engine_request(
        provider="elevenlabs", prompt="lo-fi", seconds=90, instrumental=True, timestamps=True,
        output_format="mp3_44100_128",
    )  # fmt: skip
    wire = elevenlabs.build(request)
    assert wire.url_path == "/v1/music/detailed"
    assert wire.json == {"model_id": "music_v1", "prompt": "lo-fi", "music_length_ms": 90_000,
                         "force_instrumental": True, "with_timestamps": True}  # fmt: skip
    assert wire.params == {"output_format": "mp3_44100_128"}


def test_lyria_asks_generate_content_for_audio_and_text() -> None:
    request = build_engine_request(provider="lyria", model="lyria-3-pro-preview", prompt="folk", seconds=95,
                                   lyrics="la la\n\nlo lo")  # fmt: skip
    wire = lyria.build(request)
    assert wire.url_path == "/v1beta/models/lyria-3-pro-preview:generateContent"
    assert lyria.model_of_path(wire.url_path) == "lyria-3-pro-preview"
    assert wire.json["generationConfig"] == {"responseModalities": ["AUDIO", "TEXT"]}
    text = wire.json["contents"][0]["parts"][0]["text"]
    assert "about 95 seconds" in text and "la la\n\nlo lo" in text
    clip = lyria.build(build_engine_request(provider="lyria", prompt="folk", seconds=30))
    assert "seconds" not in clip.json["contents"][0]["parts"][0]["text"]  # a clip is always 30 s: not asked


def test_stanzas_split_on_blank_lines_only() -> None:
    assert stanzas("a\n b \n\n\n c\n") == [["a", "b"], ["c"]]
    assert stanzas("\n\n") == []


def test_answers_are_read_in_each_engines_shape() -> None:
    song = elevenlabs.parse_answer("audio/mpeg", b"ID3mp3")
    assert song.audio == b"ID3mp3" and song.suffix == ".mp3"
    metadata = {
        "composition_plan": {"sections": [{"lines": ["one two"]}, {"lines": ["three"]}]},
        "song_metadata": {"title": "Rain", "genres": [], "languages": []},
        "words_timestamps": [{"word": "one", "start_ms": 0, "end_ms": 400}, {"word": "two", "start_ms": 400,
                                                                              "end_ms": 900}],
    }  # fmt: skip
    body = (
        b"--XyZ\r\nContent-Type: application/json\r\n\r\n" + json.dumps(metadata).encode()
        + b"\r\n--XyZ\r\nContent-Type: audio/mpeg\r\nContent-Disposition: attachment; filename=\"s.mp3\"\r\n\r\n"
        + b"\xff\xfbAUDIO\r\n--XyZ--\r\n"
    )  # fmt: skip
    detailed = elevenlabs.parse_answer("multipart/mixed; boundary=XyZ", body)
    assert detailed.audio == b"\xff\xfbAUDIO" and detailed.title == "Rain"
    assert detailed.lyrics == "one two\n\nthree"
    assert [(w.word, w.start_ms, w.end_ms) for w in detailed.timestamps] == [("one", 0, 400), ("two", 400, 900)]
    answer = {"candidates": [{"content": {"parts": [
        {"text": "[Verse]\nla la"},
        {"inlineData": {"mimeType": "audio/mpeg", "data": base64.b64encode(b"MP3").decode()}},
    ]}}]}  # fmt: skip
    clip = lyria.parse_answer("application/json", json.dumps(answer).encode())
    assert clip.audio == b"MP3" and clip.lyrics == "[Verse]\nla la" and clip.media_type == "audio/mpeg"


@pytest.mark.parametrize(
    ("parse", "content_type", "body", "charge"),
    [
        (elevenlabs.parse_answer, "application/json", b'{"ok": true}', Charge.UNKNOWN),
        (elevenlabs.parse_answer, "audio/mpeg", b"", Charge.UNKNOWN),
        (elevenlabs.parse_answer, "multipart/mixed; boundary=q", b"--q\r\n\r\n{}\r\n--q--", Charge.UNKNOWN),
        (lyria.parse_answer, "application/json", b'{"candidates": [{"finishReason": "OTHER"}]}', Charge.UNKNOWN),
        (lyria.parse_answer, "application/json", b"[1, 2", Charge.UNKNOWN),
        (
            lyria.parse_answer,
            "application/json",
            b'{"candidates": [{"content": {"parts": [{"inlineData": {"data": "%%%"}}]}}]}',
            Charge.UNKNOWN,
        ),
        (lyria.parse_answer, "application/json", b'{"promptFeedback": {"blockReason": "SAFETY"}}', Charge.NOT_CHARGED),
    ],
)
def test_an_answer_holding_no_song_says_what_it_means_for_money(parse, content_type, body, charge) -> None:
    with pytest.raises(AnswerError) as failed:
        parse(content_type, body)
    assert failed.value.charge is charge


@pytest.mark.parametrize(
    ("status", "charge"),
    [(200, Charge.CHARGED), (401, Charge.NOT_CHARGED), (403, Charge.NOT_CHARGED), (422, Charge.NOT_CHARGED),
     (429, Charge.NOT_CHARGED), (400, Charge.NOT_CHARGED), (500, Charge.UNKNOWN), (502, Charge.UNKNOWN),
     (504, Charge.UNKNOWN), (408, Charge.UNKNOWN), (303, Charge.UNKNOWN), (307, Charge.UNKNOWN),
     (599, Charge.UNKNOWN), (501, Charge.NOT_CHARGED)],
)  # fmt: skip
def test_what_a_status_means_for_money_is_the_clients_rule(status: int, charge: Charge) -> None:
    assert charge_of_status(status) is charge


def test_an_echoed_key_is_scrubbed_in_every_form_the_client_catches() -> None:
    key = "sk_Ab/cd+EF=="
    echoes = [key, urllib.parse.quote(key, safe=""), key.replace("/", "\\/"), key.upper(), urllib.parse.quote_plus(key)]
    for echo in echoes:
        assert "***" in scrub(f"bad key {echo}!", key) and echo not in scrub(f"bad key {echo}!", key)


@pytest.mark.parametrize(
    ("rules", "body", "said"),
    [
        (elevenlabs.RULES, {"detail": {"status": "invalid_api_key", "message": "Invalid API key"}}, "Invalid API key"),
        (elevenlabs.RULES, {"detail": [{"loc": ["body", "music_length_ms"], "msg": "too long"}]}, "music_length_ms"),
        (elevenlabs.RULES, {"detail": "quota"}, "quota"),
        (
            lyria.RULES,
            {"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}},
            "INVALID_ARGUMENT: API key not valid",
        ),
        (musicful.RULES, {"status": 401, "message": "invalid key"}, "invalid key"),
    ],
)
def test_each_engine_reads_its_own_error_shape(rules, body, said) -> None:
    assert said in rules.error_text(body)


def test_each_engine_names_its_auth_header_environment_and_paid_paths() -> None:
    assert {p: (r.key_header, r.env_key, r.env_base_url) for p, r in ENGINES.items()} == {
        "musicful": ("x-api-key", "MUSICGEN_API_KEY", "MUSICGEN_BASE_URL"),
        "elevenlabs": ("xi-api-key", "ELEVENLABS_API_KEY", "MUSICGEN_ELEVENLABS_BASE_URL"),
        "lyria": ("x-goog-api-key", "GEMINI_API_KEY", "MUSICGEN_GEMINI_BASE_URL"),
    }
    assert elevenlabs.RULES.paid_paths() == {"/v1/music", "/v1/music/detailed", "/v1/music/stem-separation"}
    assert "/v1/music/generate" in musicful.RULES.paid_paths() and "/v1/music/tasks" not in musicful.RULES.paid_paths()


def test_the_services_created_ids_are_read_from_every_answer_shape() -> None:
    assert musicful.created_ids(b'{"status": 200, "message": "ok", "data": {"ids": ["a", "b"]}}') == ["a", "b"]
    assert musicful.created_ids(b'{"status": 200, "message": "ok", "data": [{"song_id": "s"}]}') == ["s"]
    assert musicful.created_ids(b'{"task_ids": ["t"]}') == ["t"]
    assert musicful.created_ids(b'{"status": 200, "message": "ok", "data": {"task_id": "one"}}') == ["one"]
    assert musicful.created_ids(b"[1, ") == []

"""Request and response models against the interface document (music-service.md) and observed-behaviour.md."""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timezone

import pytest
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from ipymusicgen.errors import IgnoredFieldsWarning, RequestValidationError
from ipymusicgen.models.schema import (
    GenerateRequest,
    GenerateResult,
    KeyInfo,
    LyricsResult,
    TaskRecord,
    V2Song,
    build_generate_request,
    build_lyrics_request,
    build_v2_request,
    shape_fields,
)
from ipymusicgen.models.tasks import TaskState, v1_state, v2_state

# ---------------------------------------------------------------------------------------------------
# The spec's "Fields per shape" table, copied by hand (R = required, O = optional, - = not part of it).

ACTIONS = ["auto", "custom", "extend", "concat", "upload", "upload_extend", "artist_consistency"]
SPEC_TABLE = {
    #                  auto custom extend concat upload upload_extend artist_consistency
    "mv": "O O O - - O O",
    "instrumental": "O O O - - O O",
    "style": "O O O - - O O",
    "lyrics": "- O O - - O O",
    "title": "- O O - - O O",
    "gender": "O O O - - O O",
    "continue_at": "- - O - - O -",
    "continue_song_id": "- - O R - O -",
    "audio_url": "- - - - R O -",
    "singer_id": "- - - - - - R",
}
MARKS = {field: dict(zip(ACTIONS, row.split(), strict=True)) for field, row in SPEC_TABLE.items()}
VALID_VALUE = {
    "mv": "MFV3.0",
    "instrumental": 1,
    "style": "lo-fi rain",
    "lyrics": "la la la",
    "title": "A title",
    "gender": "female",
    "continue_at": 30,
    "continue_song_id": "song-1",
    "audio_url": "https://example.com/a.mp3",
    "singer_id": "singer-1",
}
V1_MODELS = {"MFV3.0": 5000, "MFV2.0": 5000, "MFV1.5X": 5000, "MFV1.5": 5000, "MFV1.0": 3000}
V2_MODELS = {  # name: (max seconds, max lyrics words)
    "v4.5-plus": (480, 5000),
    "v4.5": (480, 5000),
    "v4.0": (240, 3000),
    "v3.5": (240, 3000),
    "v3.0": (120, 1000),
}


def required_fields(action: str) -> dict[str, object]:
    return {f: VALID_VALUE[f] for f, marks in MARKS.items() if marks[action] == "R"}


def cells(mark: str) -> list[tuple[str, str]]:
    return [(action, field) for field, marks in MARKS.items() for action in ACTIONS if marks[action] == mark]


def shapes_with(field: str) -> list[str]:
    return [a for a in ACTIONS if MARKS[field][a] != "-"]


def v1(**fields):
    return build_generate_request(**fields)


def v2(**fields):
    body = {"is_auto": 0, "model_version": "v4.5", "prompt": "dreamy synth pop"}
    body.update(fields)
    return build_v2_request(body)


def refused(call, *args, **kwargs) -> RequestValidationError:
    with pytest.raises(RequestValidationError) as info:
        call(*args, **kwargs)
    return info.value


def words(n: int) -> str:
    return " ".join(["word"] * n)


@pytest.fixture(autouse=True)
def _no_stray_warnings():
    """A warning nobody asked for is a test failure (pytest.warns blocks still catch theirs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", IgnoredFieldsWarning)
        yield


# ---------------------------------------------------------------------------------------------------
# The per-shape table, cell by cell.


@pytest.mark.parametrize("action", ACTIONS)
def test_shape_fields_match_the_spec_table(action):
    expected = {f: marks[action] == "R" for f, marks in MARKS.items() if marks[action] != "-"}
    assert shape_fields(action) == expected


@pytest.mark.parametrize(("action", "field"), cells("-"))
def test_field_not_in_shape_is_refused(action, field):
    error = refused(v1, action=action, **required_fields(action), **{field: VALID_VALUE[field]})
    assert [p.field for p in error.problems] == [field]
    assert f"not part of the '{action}' action" in str(error)
    assert str(error).startswith(f"{field}: ")


@pytest.mark.parametrize(("action", "field"), cells("R"))
def test_required_field_missing_is_refused(action, field):
    body = required_fields(action)
    del body[field]
    error = refused(v1, action=action, **body)
    assert str(error) == f"{field}: required"


@pytest.mark.parametrize(("action", "field"), cells("O"))
def test_optional_field_is_accepted_and_sent(action, field):
    request = v1(action=action, **required_fields(action), **{field: VALID_VALUE[field]})
    payload = request.to_payload()
    assert payload["action"] == action
    assert payload[field] == VALID_VALUE[field]


@pytest.mark.parametrize("action", ACTIONS)
def test_only_required_fields_is_enough(action):
    payload = v1(action=action, **required_fields(action)).to_payload()
    assert payload["action"] == action
    for field, value in required_fields(action).items():
        assert payload[field] == value


def test_action_is_required_by_the_discriminated_union():
    with pytest.raises(PydanticValidationError):
        TypeAdapter(GenerateRequest).validate_python({"style": "x"})


def test_build_generate_request_defaults_to_auto():
    assert v1(style="rain").to_payload() == {"action": "auto", "instrumental": 0, "style": "rain"}


@pytest.mark.parametrize("action", ["", "Auto", "remix", None])
def test_unknown_action_is_refused_with_the_list_of_actions(action):
    error = refused(v1, action=action)
    assert error.problems[0].field == "action"
    for name in ACTIONS:
        assert name in str(error)


def test_several_problems_are_all_reported():
    error = refused(v1, action="custom", title="x" * 81, gender="robot", instrumental=2)
    assert {p.field for p in error.problems} == {"title", "gender", "instrumental"}


# ---------------------------------------------------------------------------------------------------
# Defaults and payloads.


@pytest.mark.parametrize("action", shapes_with("instrumental"))
def test_v1_defaults(action):
    payload = v1(action=action, **required_fields(action)).to_payload()
    assert payload["instrumental"] == 0
    if "title" in shape_fields(action):
        assert payload["title"] == ""
    else:
        assert "title" not in payload


def test_v2_defaults():
    payload = v2().to_payload()
    assert payload == {
        "is_auto": 0,
        "model_version": "v4.5",
        "prompt": "dreamy synth pop",
        "lyrics": "",
        "title": "",
        "instrumental": 0,
        "continue_at": 0,
        "continue_song_id": "",
    }


def test_to_payload_leaves_out_none_fields():
    payload = v1(action="upload_extend", audio_url="https://x/a.mp3", title=None, instrumental=None).to_payload()
    assert payload == {"action": "upload_extend", "audio_url": "https://x/a.mp3"}
    assert None not in payload.values()
    assert "lyrics" not in v2(lyrics=None).to_payload()


def test_to_payload_is_json_serialisable():
    payload = v1(action="extend", continue_song_id="s", continue_at=12.5, lyrics="a b").to_payload()
    assert json.loads(json.dumps(payload)) == payload


# ---------------------------------------------------------------------------------------------------
# Bounds, valid and invalid at the edges.


@pytest.mark.parametrize("action", shapes_with("title"))
def test_v1_title_80_ok_81_refused(action):
    base = {"action": action, **required_fields(action)}
    assert v1(**base, title="t" * 80).to_payload()["title"] == "t" * 80
    error = refused(v1, **base, title="t" * 81)
    assert str(error) == "title: at most 80 characters (got 81)"


def test_v2_title_80_ok_81_refused():
    assert v2(title="t" * 80).title == "t" * 80
    assert str(refused(v2, title="t" * 81)) == "title: at most 80 characters (got 81)"


@pytest.mark.parametrize("action", shapes_with("instrumental"))
@pytest.mark.parametrize("value", [0, 1])
def test_v1_instrumental_in_range(action, value):
    assert v1(action=action, **required_fields(action), instrumental=value).to_payload()["instrumental"] == value


@pytest.mark.parametrize("action", shapes_with("instrumental"))
@pytest.mark.parametrize("value", [2, -1, "1", 1.0, "true", 0.5])
def test_v1_instrumental_out_of_range_or_wrong_type(action, value):
    error = refused(v1, action=action, **required_fields(action), instrumental=value)
    assert [p.field for p in error.problems] == ["instrumental"]


@pytest.mark.parametrize("value", [0, 1])
def test_v2_instrumental_in_range(value):
    assert v2(instrumental=value).instrumental == value


@pytest.mark.parametrize("value", [2, -1, "1", "true"])
def test_v2_instrumental_refused(value):
    assert [p.field for p in refused(v2, instrumental=value).problems] == ["instrumental"]


@pytest.mark.parametrize(("value", "sent"), [(True, 1), (False, 0)])
def test_a_yes_no_field_takes_a_bool_as_1_or_0(value, sent):
    """A DataFrame's bool column (numpy's bool too) or `True` in Python means 1: the spec's flags are 0/1."""
    import numpy as np

    for flag in (value, np.bool_(value)):
        assert v1(action="auto", style="x", instrumental=flag).to_payload()["instrumental"] == sent
        assert v2(instrumental=flag).to_payload()["instrumental"] == sent
        assert v2(is_auto=flag).to_payload()["is_auto"] == sent


@pytest.mark.parametrize("action", shapes_with("gender"))
@pytest.mark.parametrize("value", ["male", "female", ""])
def test_gender_allowed(action, value):
    assert v1(action=action, **required_fields(action), gender=value).to_payload()["gender"] == value


@pytest.mark.parametrize("value", ["other", "Male", "FEMALE", " ", 1])
def test_gender_refused(value):
    error = refused(v1, action="custom", gender=value)
    assert [p.field for p in error.problems] == ["gender"]
    assert "male" in str(error) and "female" in str(error)


@pytest.mark.parametrize("action", shapes_with("mv"))
@pytest.mark.parametrize("mv", list(V1_MODELS))
def test_every_known_mv_accepted(action, mv):
    assert v1(action=action, **required_fields(action), mv=mv).to_payload()["mv"] == mv


@pytest.mark.parametrize("mv", ["MFV4.0", "mfv3.0", "v4.5", ""])
def test_unknown_mv_refused_with_the_known_list(mv):
    error = refused(v1, action="custom", mv=mv)
    assert error.problems[0].field == "mv"
    for known in V1_MODELS:
        assert known in str(error)


def test_unknown_mv_accepted_when_allowed():
    request = build_generate_request(action="custom", mv="MFV9.9", lyrics=words(9000), allow_unknown_models=True)
    assert request.to_payload()["mv"] == "MFV9.9"


@pytest.mark.parametrize(("mv", "limit"), list(V1_MODELS.items()))
def test_v1_lyrics_word_limit_per_model(mv, limit):
    assert v1(action="custom", mv=mv, lyrics=words(limit)).lyrics == words(limit)
    error = refused(v1, action="custom", mv=mv, lyrics=words(limit + 1))
    assert error.problems[0].field == "lyrics"
    assert str(limit) in str(error) and str(limit + 1) in str(error)


@pytest.mark.parametrize("action", shapes_with("lyrics"))
def test_v1_lyrics_limit_applies_to_every_shape_with_lyrics(action):
    base = {"action": action, **required_fields(action), "mv": "MFV1.0"}
    v1(**base, lyrics=words(3000))
    assert refused(v1, **base, lyrics=words(3001)).problems[0].field == "lyrics"


def test_v1_lyrics_without_mv_uses_the_largest_limit():
    v1(action="custom", lyrics=words(5000))
    refused(v1, action="custom", lyrics=words(5001))


@pytest.mark.parametrize(("model", "limit"), [(m, w) for m, (_, w) in V2_MODELS.items()])
def test_v2_lyrics_word_limit_per_model(model, limit):
    assert v2(model_version=model, lyrics=words(limit)).lyrics == words(limit)
    error = refused(v2, model_version=model, lyrics=words(limit + 1))
    assert error.problems[0].field == "lyrics"
    assert str(limit) in str(error)


@pytest.mark.parametrize("value", [0, 1])
def test_v2_is_auto_in_range(value):
    assert v2(is_auto=value).is_auto == value


@pytest.mark.parametrize("value", [2, -1, "1", None])
def test_v2_is_auto_refused(value):
    assert [p.field for p in refused(v2, is_auto=value).problems] == ["is_auto"]


@pytest.mark.parametrize("field", ["is_auto", "model_version", "prompt"])
def test_v2_required_fields(field):
    body = {"is_auto": 0, "model_version": "v4.5", "prompt": "x"}
    del body[field]
    assert str(refused(build_v2_request, body)) == f"{field}: required"


@pytest.mark.parametrize("model", list(V2_MODELS))
def test_v2_every_known_model_accepted(model):
    assert v2(model_version=model).to_payload()["model_version"] == model


@pytest.mark.parametrize("model", ["v5.0", "MFV3.0", "V4.5", ""])
def test_v2_unknown_model_refused_with_the_known_list(model):
    error = refused(v2, model_version=model)
    assert error.problems[0].field == "model_version"
    for known in V2_MODELS:
        assert known in str(error)


def test_v2_unknown_model_accepted_when_allowed():
    body = {"is_auto": 0, "model_version": "v5.0", "prompt": "x"}
    assert build_v2_request(body, allow_unknown_models=True).model_version == "v5.0"


@pytest.mark.parametrize("length", [1, 180])
def test_v2_prompt_length_ok(length):
    assert len(v2(prompt="p" * length).prompt) == length


@pytest.mark.parametrize("length", [0, 181])
def test_v2_prompt_length_refused(length):
    error = refused(v2, prompt="p" * length)
    assert [p.field for p in error.problems] == ["prompt"]
    assert f"(got {length})" in str(error)


@pytest.mark.parametrize("at", [0, None, -5])
def test_v2_continue_at_must_be_positive_when_extending(at):
    error = refused(v2, continue_song_id="song-1", continue_at=at)
    assert error.problems[0].field == "continue_at"


@pytest.mark.parametrize(("model", "max_seconds"), [(m, s) for m, (s, _) in V2_MODELS.items()])
def test_v2_continue_at_bounded_by_model_length(model, max_seconds):
    assert v2(model_version=model, continue_song_id="s", continue_at=1).continue_at == 1
    assert v2(model_version=model, continue_song_id="s", continue_at=max_seconds).continue_at == max_seconds
    error = refused(v2, model_version=model, continue_song_id="s", continue_at=max_seconds + 1)
    assert error.problems[0].field == "continue_at"
    assert str(max_seconds) in str(error)


def test_v2_continue_at_zero_fine_when_not_extending():
    assert v2(continue_at=0).continue_at == 0


def test_lyrics_request_needs_a_prompt():
    assert build_lyrics_request("a song about rain").to_payload() == {"prompt": "a song about rain"}
    assert refused(build_lyrics_request, "").problems[0].field == "prompt"


def test_request_models_are_frozen():
    request = v1(action="custom", title="a")
    with pytest.raises(PydanticValidationError):
        request.title = "b" * 200


def test_build_from_a_model_instance_revalidates():
    request = v1(action="custom", title="a", style="s")
    again = build_generate_request(request)
    assert again.to_payload() == request.to_payload()


# ---------------------------------------------------------------------------------------------------
# Ignored-fields warnings.


@pytest.mark.parametrize("action", shapes_with("lyrics"))
def test_v1_lyrics_with_instrumental_warns(action):
    with pytest.warns(IgnoredFieldsWarning, match="lyrics"):
        request = v1(action=action, **required_fields(action), lyrics="la", instrumental=1)
    assert request.to_payload()["lyrics"] == "la"  # still sent; only the user is told


def test_v1_lyrics_without_instrumental_does_not_warn():
    v1(action="custom", lyrics="la", instrumental=0)  # the autouse fixture turns a warning into an error


def test_v2_lyrics_with_instrumental_warns():
    with pytest.warns(IgnoredFieldsWarning, match="lyrics"):
        v2(lyrics="la", instrumental=1)


def test_v2_is_auto_1_warns_naming_the_extra_fields():
    with pytest.warns(IgnoredFieldsWarning) as record:
        v2(is_auto=1, title="t", lyrics="l", continue_song_id="s")
    message = str(record[0].message)
    for name in ("title", "lyrics", "continue_song_id"):
        assert name in message
    assert "prompt" not in message.split(":")[0]


def test_v2_is_auto_1_with_only_applied_fields_does_not_warn():
    v2(is_auto=1)


def test_v2_is_auto_1_skips_extension_checks():
    with pytest.warns(IgnoredFieldsWarning):
        request = v2(is_auto=1, continue_song_id="s", continue_at=0)
    assert request.is_auto == 1


# ---------------------------------------------------------------------------------------------------
# Responses.


@pytest.mark.parametrize(("duration", "seconds"), [(123456, 123.456), (1000, 1.0), (0, 0.0), (-1, None), (None, None)])
def test_task_record_duration_in_seconds(duration, seconds):
    record = TaskRecord.model_validate({"id": "t", "duration": duration})
    assert record.duration_seconds == seconds


@pytest.mark.parametrize(
    ("status", "fail_code", "fail_reason", "state"),
    [
        (2, None, None, TaskState.PREVIEW),
        (2, 0, "", TaskState.PREVIEW),
        (0, None, None, TaskState.COMPLETE),
        (0, 0, "", TaskState.COMPLETE),
        (3, None, None, TaskState.FAILED),
        (-1, None, None, TaskState.FAILED),
        (-7, 0, "", TaskState.FAILED),
        (0, 1001, None, TaskState.FAILED),
        (2, 5, None, TaskState.FAILED),
        (1, None, "content policy", TaskState.FAILED),
        (0, None, "boom", TaskState.FAILED),
        (1, None, None, TaskState.PROCESSING),
        (None, None, None, TaskState.PROCESSING),
        (4, None, None, TaskState.PROCESSING),
    ],
)
def test_v1_state(status, fail_code, fail_reason, state):
    assert v1_state(status, fail_code, fail_reason) is state
    record = TaskRecord.model_validate(
        {"id": "t", "status": status, "fail_code": fail_code, "fail_reason": fail_reason}
    )
    assert record.state is state


@pytest.mark.parametrize(
    ("status", "audio", "state"),
    [
        ("RUNNING", None, TaskState.PROCESSING),
        ("running", "", TaskState.PROCESSING),
        ("FINISHED", "https://x/a.mp3", TaskState.COMPLETE),
        ("finished", None, TaskState.COMPLETE),
        ("stream", "https://x/a.mp3", TaskState.PREVIEW),
        ("STREAM", None, TaskState.PREVIEW),
        ("complete", "https://x/a.mp3", TaskState.COMPLETE),
        ("Complete", None, TaskState.COMPLETE),
        ("error", None, TaskState.FAILED),
        ("ERROR", "https://x/a.mp3", TaskState.FAILED),
        (None, None, TaskState.PROCESSING),
        ("", None, TaskState.PROCESSING),
    ],
)
def test_v2_state(status, audio, state):
    assert v2_state(status, audio) is state
    assert V2Song.model_validate({"song_id": "s", "status": status, "audio": audio}).state is state


@pytest.mark.parametrize("state", list(TaskState))
def test_finished_means_complete_or_failed(state):
    assert state.finished is (state in (TaskState.COMPLETE, TaskState.FAILED))


def test_task_record_keeps_unknown_fields_and_tolerates_missing_ones():
    record = TaskRecord.model_validate({"id": 42, "status": 0, "brand_new": {"x": 1}})
    assert record.id == "42"
    assert record.model_extra == {"brand_new": {"x": 1}}
    assert record.audio_url is None
    assert record.model_dump()["brand_new"] == {"x": 1}


def test_v2_song_keeps_unknown_fields_and_maps_names():
    song = V2Song.model_validate(
        {
            "song_id": "s",
            "status": "FINISHED",
            "audio": "https://a",
            "image": "https://i",
            "tags": "pop",
            "audio_duration": 61500,  # milliseconds, as the service sends
            "model": "v4.5",
        }
    )
    assert (song.id, song.audio_url, song.cover_url, song.style, song.duration_seconds) == (
        "s",
        "https://a",
        "https://i",
        "pop",
        61.5,
    )
    assert song.model_extra == {"model": "v4.5"}
    assert V2Song.model_validate({"song_id": "s", "audio_duration": -1}).duration_seconds is None


def test_key_info_parses_iso_dates():
    info = KeyInfo.model_validate(
        {
            "x_api_key": "k",
            "key_status": 1,
            "key_music_counts": 98,
            "key_created_at": "2024-05-01T12:00:00Z",
            "key_updated_at": "2024-05-02T08:30:00+02:00",
            "key_recently_used_at": "",
            "unknown": "kept",
        }
    )
    assert info.key_created_at == datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert info.key_updated_at == datetime(2024, 5, 2, 6, 30, tzinfo=timezone.utc)
    assert info.key_recently_used_at is None
    assert info.key_music_counts == 98
    assert info.model_extra == {"unknown": "kept"}


def test_key_info_never_shows_the_key():
    canary = "sk-CANARY-d41d8cd98f00b204"
    info = KeyInfo.model_validate({"x_api_key": canary, "key_name": "main", "email": "a@b.c"})
    for text in (repr(info), str(info), info.model_dump_json(), repr(info.model_dump()), f"{info}", f"{info!r}"):
        assert canary not in text
    assert "main" in repr(info)
    assert info.x_api_key is not None and info.x_api_key.get_secret_value() == canary


@pytest.mark.parametrize(
    "data",
    [
        {"text": "[Verse]\nrain", "title": "Rain"},
        {"lyrics": "[Verse]\nrain", "title": "Rain"},
        {"lyric": "[Verse]\nrain", "title": "Rain"},
    ],
)
def test_lyrics_result_shapes(data):
    result = LyricsResult.model_validate(data)
    assert result.text == "[Verse]\nrain"
    assert str(result) == "[Verse]\nrain"
    assert result.title == "Rain"


def test_lyrics_result_bare_string():
    assert LyricsResult.model_validate("[Verse]\nrain").text == "[Verse]\nrain"


def test_lyrics_result_without_text_is_refused():
    with pytest.raises(PydanticValidationError):
        LyricsResult.model_validate({"title": "only a title"})


@pytest.mark.parametrize(
    ("data", "ids"),
    [
        ({"ids": ["a", "b"]}, ["a", "b"]),
        ({"ids": [1, 2]}, ["1", "2"]),
        (["a", "b"], ["a", "b"]),
        ({"task_ids": ["a"]}, ["a"]),
        ({"id": "a"}, ["a"]),
        ("a", ["a"]),
    ],
)
def test_generate_result_shapes(data, ids):
    assert GenerateResult.model_validate(data).ids == ids


def test_generate_result_without_ids_is_refused():
    with pytest.raises(PydanticValidationError):
        GenerateResult.model_validate({"message": "ok"})

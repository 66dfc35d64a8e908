"""Every v1 action and the v2 extension rules, through the real client against the sandbox."""

from __future__ import annotations

import base64

import httpx
import pytest
from audio_utils import make_wav, mp3_duration

from ipymusicgen import MusicClient, TaskFailedError, TaskState
from ipymusicgen.errors import EnvelopeError, IgnoredFieldsWarning
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.sandbox import Sandbox


def finished(client: MusicClient, ids: list[str]) -> list[TaskRecord]:
    return client.wait(ids, interval=0.05, timeout=10)  # type: ignore[return-value]


def make_song(client: MusicClient, **fields: object) -> TaskRecord:
    fields.setdefault("action", "auto")
    fields.setdefault("style", "indie pop")
    return finished(client, client.generate(**fields).ids)[0]


def data_url(audio: bytes, media_type: str = "audio/wav") -> str:
    return f"data:{media_type};base64,{base64.b64encode(audio).decode()}"


def assert_failed(records: list[TaskRecord], code: int, reason: str) -> None:
    assert len(records) == 2
    for record in records:
        assert record.state is TaskState.FAILED and record.status == 3
        assert record.fail_code == code and reason in (record.fail_reason or "")


def test_custom_uses_the_given_lyrics_and_title(client: MusicClient) -> None:
    song = make_song(client, action="custom", title="Paper Boats", lyrics="[Verse]\nfloat away", style="folk")
    assert (song.title, song.lyric, song.style) == ("Paper Boats", "[Verse]\nfloat away", "folk")


def test_instrumental_has_no_lyric(client: MusicClient) -> None:
    assert make_song(client, action="auto", instrumental=1).lyric == ""


@pytest.mark.slow
def test_extend_a_made_song_then_concat(client: MusicClient) -> None:
    song = make_song(client)
    extension = finished(client, client.generate(action="extend", continue_song_id=song.song_id, continue_at=2).ids)
    assert [e.duration for e in extension] == [4000, 4000]  # the new segment
    whole = finished(client, client.generate(action="concat", continue_song_id=extension[0].song_id).ids)[0]
    assert whole.state is TaskState.COMPLETE and whole.duration == 6000  # 2 s kept + 4 s new
    assert mp3_duration(httpx.get(whole.audio_url or "").content) == pytest.approx(6.0, abs=0.2)


@pytest.mark.slow
def test_extend_accepts_the_task_id_and_defaults_to_the_end(client: MusicClient) -> None:
    song = make_song(client)
    extension = finished(client, client.generate(action="extend", continue_song_id=song.id).ids)[0]
    whole = finished(client, client.generate(action="concat", continue_song_id=extension.id).ids)[0]
    assert whole.duration == 8000


def test_extend_of_an_unknown_song_fails_with_404(client: MusicClient) -> None:
    ids = client.generate(action="extend", continue_song_id="not-made-here", continue_at=10).ids
    records = finished(client, ids)
    assert_failed(records, 404, "was not made by this sandbox")
    with pytest.raises(TaskFailedError, match="code 404"):
        client.wait(ids, interval=0.05, timeout=5, raise_on_failure=True)


@pytest.mark.slow
def test_extend_beyond_the_song_fails(client: MusicClient) -> None:
    song = make_song(client)
    records = finished(client, client.generate(action="extend", continue_song_id=song.song_id, continue_at=30).ids)
    assert_failed(records, 400, "at most the song's duration")


def test_concat_of_an_unknown_song_fails(client: MusicClient) -> None:
    assert_failed(finished(client, client.generate(action="concat", continue_song_id="nope").ids), 404, "nope")


@pytest.mark.slow
def test_upload_of_a_sandbox_file(client: MusicClient) -> None:
    song = make_song(client)
    uploaded = finished(client, client.generate(action="upload", audio_url=song.audio_url).ids)
    assert [u.state for u in uploaded] == [TaskState.COMPLETE] * 2 and uploaded[0].duration == song.duration


def test_upload_of_a_data_url(client: MusicClient) -> None:
    uploaded = finished(client, client.generate(action="upload", audio_url=data_url(make_wav(3.0))).ids)[0]
    assert uploaded.state is TaskState.COMPLETE and uploaded.duration == 3000


def test_upload_from_the_internet_is_refused(client: MusicClient) -> None:
    records = finished(client, client.generate(action="upload", audio_url="https://example.com/song.mp3").ids)
    assert_failed(records, 400, "never fetches from the internet")


def test_upload_of_garbage_data_is_refused(client: MusicClient) -> None:
    records = finished(client, client.generate(action="upload", audio_url="data:audio/wav;base64,aGVsbG8=").ids)
    assert_failed(records, 400, "Could not read the uploaded audio")


def test_upload_extend_refuses_more_than_eight_minutes(client: MusicClient) -> None:
    long_audio = data_url(make_wav(8 * 60 + 1))
    records = finished(client, client.generate(action="upload_extend", audio_url=long_audio, style="rock").ids)
    assert_failed(records, 400, "at most 8 minutes")


@pytest.mark.slow
def test_upload_extend_of_an_uploaded_song(client: MusicClient) -> None:
    uploaded = finished(client, client.generate(action="upload", audio_url=data_url(make_wav(5.0))).ids)[0]
    extension = finished(
        client, client.generate(action="upload_extend", continue_song_id=uploaded.song_id, continue_at=3).ids
    )[0]
    assert extension.state is TaskState.COMPLETE and extension.duration == 4000
    whole = finished(client, client.generate(action="concat", continue_song_id=extension.song_id).ids)[0]
    assert whole.duration == 7000


@pytest.mark.slow
def test_upload_extend_needs_an_uploaded_song(client: MusicClient) -> None:
    song = make_song(client)
    records = finished(client, client.generate(action="upload_extend", continue_song_id=song.song_id).ids)
    assert_failed(records, 400, "must be a song made by the upload action")


@pytest.mark.slow
def test_artist_consistency_with_a_singer_from_generate_vibe(client: MusicClient) -> None:
    song = make_song(client)
    singer_id = client.generate_vibe(song.song_id or "")
    assert singer_id.startswith("singer-")
    made = finished(client, client.generate(action="artist_consistency", singer_id=singer_id, lyrics="oh oh").ids)
    assert [m.state for m in made] == [TaskState.COMPLETE] * 2 and made[0].lyric == "oh oh"


def test_artist_consistency_with_an_unknown_singer_fails(client: MusicClient) -> None:
    records = finished(client, client.generate(action="artist_consistency", singer_id="singer-nobody").ids)
    assert_failed(records, 404, "generate-vibe")


def test_generate_vibe_of_an_unknown_song_is_an_envelope_error(client: MusicClient) -> None:
    with pytest.raises(EnvelopeError, match="Song not found") as caught:
        client.generate_vibe("no-such-song")
    assert caught.value.status_code == 404


# -- v2 ------------------------------------------------------------------------------------------------


def v2_song(client: MusicClient):
    songs = client.submit_v2(is_auto=1, model_version="v4.5", prompt="a song to extend")
    return client.wait(v2_ids=[s.id for s in songs], interval=0.05, timeout=10)[0]


@pytest.mark.slow
def test_v2_extension_within_the_song(client: MusicClient) -> None:
    song = v2_song(client)
    extension = client.submit_v2(
        is_auto=0, model_version="v4.5", prompt="more", continue_song_id=song.id, continue_at=2, lyrics="la"
    )
    done = client.wait(extension, interval=0.05, timeout=10)  # the songs: their lyric outlives the query's blank
    assert [s.state for s in done] == [TaskState.COMPLETE] * 2 and done[0].lyric == "la"


def test_v2_continue_at_beyond_the_song_is_a_failed_request(sandbox: Sandbox, client: MusicClient) -> None:
    song = v2_song(client)
    before = sandbox.credits()
    with pytest.raises(EnvelopeError, match="at most the song's duration") as caught:
        client.submit_v2(is_auto=0, model_version="v4.5", prompt="more", continue_song_id=song.id, continue_at=10)
    assert caught.value.status_code == 400 and sandbox.credits() == before  # a refused request costs nothing


def test_v2_continue_at_zero_is_a_failed_request(sandbox: Sandbox, client: MusicClient) -> None:
    song = v2_song(client)
    body = {"is_auto": 0, "model_version": "v4.5", "prompt": "more", "continue_song_id": song.id, "continue_at": 0}
    answer = httpx.post(f"{sandbox.v2_base_url}/v2/submit", json=body, headers={"x-api-key": sandbox.api_key})
    assert answer.status_code == 200
    assert answer.json()["status"] == 400 and "continue_at" in answer.json()["message"]


def test_v2_extension_of_an_unknown_song_is_a_failed_request(client: MusicClient) -> None:
    with pytest.raises(EnvelopeError, match="not made by this sandbox"):
        client.submit_v2(is_auto=0, model_version="v4.5", prompt="x", continue_song_id="nope", continue_at=5)


def test_v2_is_auto_uses_the_prompt_only(client: MusicClient) -> None:
    with pytest.warns(IgnoredFieldsWarning):
        songs = client.submit_v2(
            is_auto=1, model_version="v4.5", prompt="sea shanty", lyrics="ignored words", continue_song_id="nope"
        )
    assert len(songs) == 2 and all(s.lyric != "ignored words" and s.tags == "sea shanty" for s in songs)

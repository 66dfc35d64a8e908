"""The sandbox end to end through the real clients: task lifecycle, files, envelopes, v2, async."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest
from audio_utils import mp3_duration, wav_duration
from helpers import ManualClock

from ipymusicgen import MusicClient, TaskState
from ipymusicgen.errors import EnvelopeError
from ipymusicgen.models.schema import TaskRecord
from ipymusicgen.sandbox import Sandbox


def finished(client: MusicClient, ids: list[str]) -> list[TaskRecord]:
    records = client.wait(ids, interval=0.05, timeout=10)
    assert all(isinstance(r, TaskRecord) for r in records)
    return records  # type: ignore[return-value]


def test_v1_lifecycle_processing_preview_complete(sandbox: Sandbox, client: MusicClient, clock: ManualClock) -> None:
    ids = client.generate(action="auto", style="lo-fi beat with rain").ids
    assert len(ids) == 2 and len(set(ids)) == 2

    first = client.tasks(ids)
    assert [t.id for t in first] == ids
    for task in first:
        assert (task.status, task.duration, task.audio_url, task.state) == (1, -1, "", TaskState.PROCESSING)
        assert task.fail_code == 0 and task.fail_reason == ""

    clock.stages(1)
    preview = client.tasks(ids)[0]
    assert (preview.status, preview.duration, preview.state) == (2, -1, TaskState.PREVIEW)
    assert preview.audio_url and preview.audio_url.startswith(sandbox.base_url + "/files/")
    assert preview.audio_url.endswith("-preview.mp3")
    final_url = preview.audio_url.replace("-preview.mp3", ".mp3")
    assert httpx.get(final_url).status_code == 404  # no final file before the song is complete
    answer = httpx.get(preview.audio_url)
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/mpeg"
    assert mp3_duration(answer.content) == pytest.approx(2.0, abs=0.15)  # a preview: the first half

    clock.stages(1)
    done = client.tasks(ids)
    for task in done:
        assert (task.status, task.duration, task.state) == (0, 4000, TaskState.COMPLETE)
        assert task.duration_seconds == 4.0
        assert task.audio_url == f"{sandbox.base_url}/files/{task.id}.mp3"
        assert task.cover_url == f"{sandbox.base_url}/files/{task.id}.svg"
        assert task.lyric and "[Chorus]" in task.lyric and task.title
        assert task.song_id and task.song_id != task.id


@pytest.mark.slow
def test_preview_url_is_404_before_the_preview_exists(
    sandbox: Sandbox, client: MusicClient, clock: ManualClock
) -> None:
    task_id = client.generate(action="auto", style="ambient").ids[0]
    url = f"{sandbox.base_url}/files/{task_id}-preview.mp3"
    assert httpx.get(url).status_code == 404
    clock.advance(0.25)
    assert httpx.get(url).status_code == 200


@pytest.mark.slow
def test_download_is_a_decodable_mp3_of_the_right_length(client: MusicClient, tmp_path: Path) -> None:
    task = finished(client, client.generate(action="custom", title="Rain Song", lyrics="[Verse]\nla la").ids)[0]
    path = client.download(task, tmp_path)
    assert path.name == "Rain Song.mp3"
    assert mp3_duration(path.read_bytes()) == pytest.approx(4.0, abs=0.15)
    again = httpx.get(task.audio_url or "")  # served from the cache the second time: same bytes
    assert again.content == path.read_bytes()


def test_cover_is_svg_and_files_need_no_key(client: MusicClient) -> None:
    task = finished(client, client.generate(action="auto", style="synthwave").ids)[0]
    answer = httpx.get(task.cover_url or "")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("image/svg+xml")
    assert ET.fromstring(answer.content).tag.endswith("svg")


@pytest.mark.slow
def test_generate_wav_serves_a_real_wav(client: MusicClient) -> None:
    task = finished(client, client.generate(action="auto", style="piano").ids)[0]
    url = client.generate_wav(task.song_id or "")
    assert url.endswith(".wav")
    answer = httpx.get(url)
    assert answer.headers["content-type"] == "audio/wav"
    assert wav_duration(answer.content) == pytest.approx(4.0, abs=0.01)


def test_generate_wav_of_an_unfinished_song_is_refused(client: MusicClient, clock: ManualClock) -> None:
    """The clock stands still: the song is certainly unfinished (its 0.1 s could pass first on a busy machine)."""
    task_id = client.generate(action="auto", style="piano").ids[0]
    with pytest.raises(EnvelopeError, match="not finished"):
        client.generate_wav(task_id)


def test_mp4_is_not_supported(client: MusicClient) -> None:
    task = finished(client, client.generate(action="auto", style="piano").ids)[0]
    with pytest.raises(EnvelopeError, match="MP4 export is not supported in the sandbox") as caught:
        client.generate_mp4(task.song_id or "")
    assert caught.value.status_code == 501


def test_tasks_bare_array_by_default_and_envelope_on_switch(sandbox: Sandbox, client: MusicClient) -> None:
    ids = client.generate(action="auto", style="folk").ids
    headers = {"x-api-key": sandbox.api_key}
    bare = httpx.get(f"{sandbox.base_url}/v1/music/tasks", params={"ids": ",".join(ids)}, headers=headers).json()
    assert isinstance(bare, list) and [t["id"] for t in bare] == ids

    answer = httpx.post(f"{sandbox.base_url}/_sandbox/settings", json={"envelope_tasks": True})
    assert answer.json()["envelope_tasks"] is True and sandbox.envelope_tasks
    wrapped = httpx.get(f"{sandbox.base_url}/v1/music/tasks", params={"ids": ",".join(ids)}, headers=headers).json()
    assert wrapped["status"] == 200 and wrapped["message"] == "Success"
    assert [t["id"] for t in wrapped["data"]] == ids  # same records (their stage may have moved on)
    assert [t.id for t in client.tasks(ids)] == ids  # the client reads both shapes

    sandbox.envelope_tasks = False
    assert isinstance(httpx.get(f"{sandbox.base_url}/v1/music/tasks", headers=headers).json(), list)


def test_tasks_leave_out_unknown_ids_and_other_keys_tasks() -> None:
    with (
        Sandbox(stage_seconds=0.2, song_seconds=4, keys={"a": 10, "b": 10}, faults="") as two,
        two.client(api_key="a") as a,
        two.client(api_key="b") as b,
    ):
        ids = a.generate(action="auto", style="x").ids
        assert [t.id for t in a.tasks([*ids, "no-such-task"])] == ids
        assert b.tasks(ids) == []


def test_v2_submit_and_query_lifecycle(sandbox: Sandbox, client: MusicClient, clock: ManualClock) -> None:
    songs = client.submit_v2(is_auto=1, model_version="v4.5", prompt="upbeat city pop")
    assert len(songs) == 2
    for song in songs:
        assert (song.status, song.audio, song.audio_duration) == ("RUNNING", "", -1)
        assert song.state is TaskState.PROCESSING and song.tags == "upbeat city pop" and song.title

    clock.stages(1)
    preview = client.query_v2(songs[0].id)
    assert preview.status == "RUNNING" and preview.state is TaskState.PREVIEW
    assert (preview.audio or "").endswith("-preview.mp3") and preview.audio_duration == -1

    clock.stages(1)
    done = client.query_v2(songs[0].id)
    assert done.status == "FINISHED" and done.state is TaskState.COMPLETE
    assert done.audio == f"{sandbox.base_url}/files/{done.id}.mp3" and done.audio_duration == 4000  # milliseconds
    assert (done.image or "").endswith(".svg") and (done.title, done.lyric) == ("", "")  # the query blanks them
    assert mp3_duration(httpx.get(done.audio).content) == pytest.approx(4.0, abs=0.15)


def test_v2_query_of_an_unknown_song_is_an_envelope_error(client: MusicClient) -> None:
    with pytest.raises(EnvelopeError, match="No song") as caught:
        client.query_v2("no-such-song")
    assert caught.value.status_code == 404


def test_v2_model_limits_song_length() -> None:
    with Sandbox(stage_seconds=0.05, song_seconds=200, faults="") as long_songs, long_songs.client() as client:
        songs = client.submit_v2(is_auto=1, model_version="v3.0", prompt="short")
        done = client.wait(v2_ids=[s.id for s in songs], interval=0.05, timeout=10)
        assert [s.duration_seconds for s in done] == [120.0, 120.0]  # v3.0 makes at most 2 minutes


def test_lyrics(client: MusicClient) -> None:
    result = client.lyrics("a song about the first snow")
    assert "[Verse" in result.text and "[Chorus]" in result.text and result.title
    assert client.lyrics("a song about the first snow").text == result.text  # reproducible


@pytest.mark.slow
def test_async_client_end_to_end(sandbox: Sandbox, tmp_path: Path) -> None:
    async def scenario() -> tuple[int, float, int]:
        async with sandbox.async_client(max_retries=1) as client:
            ids = (await client.generate(action="auto", style="bossa nova")).ids
            records = await client.wait(ids, interval=0.05, timeout=10)
            path = await client.download(records[0], tmp_path)
            songs = await client.submit_v2(is_auto=1, model_version="v4.0", prompt="drum and bass")
            await client.wait(v2_ids=[s.id for s in songs], interval=0.05, timeout=10)
            info = await client.key_info()
            return len(records), mp3_duration(path.read_bytes()), info.key_music_counts or 0

    count, seconds, credits = asyncio.run(scenario())
    assert count == 2 and seconds == pytest.approx(4.0, abs=0.15) and credits == 96

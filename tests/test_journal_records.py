"""Records merge and durations as the real service sends them: a later answer with an empty title, lyric,
image or audio never erases what an earlier one said (TaskSet and journal), and durations are milliseconds.

Runs against the sandbox, whose v2 query blanks title and lyric as the real one does (observed-behaviour.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ManualClock

from ipymusicgen import MusicClient
from ipymusicgen.models.schema import TaskRecord, V2Song
from ipymusicgen.models.tasks import TaskSet, TaskState, merge_record
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

LYRICS = "[Verse]\nlights on the harbour\n[Chorus]\nla la la"


def test_the_v2_query_blanks_title_and_lyric_and_the_task_set_keeps_them(
    sandbox: Sandbox, client: MusicClient, clock: ManualClock
) -> None:
    songs = client.submit_v2(
        is_auto=0, model_version="v4.5", prompt="harbour pop", title="Harbour Lights", lyrics=LYRICS
    )
    assert [(s.title, s.lyric) for s in songs] == [("Harbour Lights", LYRICS)] * 2  # the submit answer has them
    tasks = TaskSet()
    tasks.add_records(songs)
    assert tasks.unfinished() == ([], [s.id for s in songs])  # seeded as v2

    clock.stages(2)
    raw = client.query_v2(songs[0].id)
    assert (raw.title, raw.lyric, raw.state) == ("", "", TaskState.COMPLETE)  # as the real service answers
    assert raw.audio_duration == 4000 and raw.duration_seconds == 4.0  # milliseconds

    changed = client.poll(tasks)
    assert {r.id for r in changed} == {s.id for s in songs}
    for record in tasks.records():
        assert (record.title, record.lyric, record.style) == ("Harbour Lights", LYRICS, "harbour pop")
        assert record.state is TaskState.COMPLETE and (record.audio or "").endswith(".mp3")
        assert (record.image or "").endswith(".svg") and record.duration_seconds == 4.0
    assert client.poll(tasks) == []  # nothing new: a blank title is not a change


def test_the_journal_keeps_the_title_the_v2_query_leaves_empty(
    sandbox: Sandbox, clock: ManualClock, tmp_path: Path
) -> None:
    with Journal(tmp_path / "journal.sqlite3") as journal, sandbox.client(journal=journal) as client:
        songs = client.submit_v2(is_auto=0, model_version="v4.5", prompt="tide", title="Low Tide", lyrics=LYRICS)
        clock.stages(2)
        for song in songs:
            assert client.query_v2(song.id).title == ""
        entries = journal.history()
        assert {e.id for e in entries} == {s.id for s in songs}
        for entry in entries:
            assert (entry.state, entry.title, entry.style) == ("complete", "Low Tide", "tide")
            assert (entry.audio_url or "").endswith(".mp3") and (entry.cover_url or "").endswith(".svg")


def test_an_empty_field_in_a_later_observation_never_erases_the_journal(tmp_path: Path) -> None:
    with Journal(tmp_path / "journal.sqlite3") as journal:
        journal.submitted(journal.begin("generate", "https://api.example", {"style": "s"}), ["t"])
        journal.observe(
            [TaskRecord(id="t", status=2, title="First", audio_url="https://x/t-preview.mp3", cover_url="https://x/c")]
        )
        journal.observe([TaskRecord(id="t", status=1, title="", audio_url="", cover_url="", song_id="", style="")])
        (entry,) = journal.history()
        assert (entry.title, entry.audio_url, entry.cover_url, entry.style, entry.state) == (
            "First",
            "https://x/t-preview.mp3",
            "https://x/c",
            "s",
            "processing",
        )
        journal.observe([TaskRecord(id="t", status=3, fail_code=1, fail_reason="boom")])
        journal.observe([TaskRecord(id="t", status=3, fail_code=1, fail_reason="")])
        assert journal.history()[0].state == "failed"


def test_merge_record_keeps_earlier_fields_for_both_kinds() -> None:
    earlier = V2Song(song_id="s", status="RUNNING", title="T", lyric="L", image="https://i", tags="pop", audio="")
    later = V2Song(song_id="s", status="FINISHED", title="", lyric="", image="", tags="", audio="https://a.mp3")
    merged = merge_record(earlier, later)
    assert (merged.title, merged.lyric, merged.image, merged.tags, merged.audio, merged.status) == (
        "T",
        "L",
        "https://i",
        "pop",
        "https://a.mp3",
        "FINISHED",
    )
    assert merge_record(None, later) is later
    v1_earlier = TaskRecord(id="t", status=2, title="A", audio_url="https://p.mp3", lyric="words")
    v1_later = TaskRecord(id="t", status=0, title="", audio_url="https://final.mp3", lyric=None)
    v1 = merge_record(v1_earlier, v1_later)
    assert (v1.title, v1.audio_url, v1.lyric, v1.state) == ("A", "https://final.mp3", "words", TaskState.COMPLETE)
    assert merge_record(v1_earlier, later) is later  # different kinds are never mixed


@pytest.mark.parametrize(
    ("value", "seconds"), [(138280, 138.28), (-1, None), (None, None), (0, 0.0), ("138280", 138.28)]
)
def test_durations_are_milliseconds_for_both_versions(value: object, seconds: float | None) -> None:
    assert V2Song.model_validate({"song_id": "s", "audio_duration": value}).duration_seconds == seconds
    assert TaskRecord.model_validate({"id": "t", "duration": value}).duration_seconds == seconds


def test_the_sandbox_sends_v1_durations_in_milliseconds(client: MusicClient, clock: ManualClock) -> None:
    ids = client.generate(action="auto", style="ms").ids
    assert {r.duration for r in client.tasks(ids)} == {-1}
    clock.stages(2)
    assert {(r.duration, r.duration_seconds) for r in client.tasks(ids)} == {(4000, 4.0)}


def test_waiting_on_the_submitted_songs_keeps_their_title_and_lyrics(client: MusicClient, clock: ManualClock) -> None:
    songs = client.submit_v2(is_auto=0, model_version="v4.5", prompt="dusk", title="Dusk Song", lyrics=LYRICS)
    clock.stages(2)
    done = client.wait(songs, interval=0.05, timeout=30)
    assert [(s.title, s.lyric, s.state) for s in done] == [("Dusk Song", LYRICS, TaskState.COMPLETE)] * 2


def test_resume_after_a_restart_keeps_the_journalled_v2_title(
    sandbox: Sandbox, clock: ManualClock, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite3"
    with Journal(path) as journal, sandbox.client(journal=journal) as first:
        songs = first.submit_v2(is_auto=0, model_version="v4.5", prompt="after", title="After Restart", lyrics=LYRICS)
    clock.stages(2)
    with Journal(path) as journal, sandbox.client(journal=journal) as later:
        found = later.resume(wait=True, timeout=30, interval=0.05)
    assert sorted(r.id for r in found.records) == sorted(s.id for s in songs)
    assert {(r.title, r.style, r.state) for r in found.records} == {("After Restart", "after", TaskState.COMPLETE)}

"""v2 titles and lyrics survive waiting by bare ids and resuming after a restart: the real v2 query answers
them blank, the submit answer carried them, and the journal keeps them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ipymusicgen import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.journal import Journal

KEY = "v2-titles-key"
LYRICS = "[Verse]\nneon rain on the window\nwe drive until the dawn"


def submit(service: Sandbox, journal_path: Path) -> list[str]:
    with MusicClient(
        KEY, base_url=service.base_url, v2_base_url=service.v2_base_url, journal=Journal(journal_path), archive=False
    ) as client:
        songs = client.submit_v2(
            is_auto=0, model_version="v4.5", prompt="synthwave", title="Night Drive", lyrics=LYRICS
        )
        return [s.id for s in songs]


def test_waiting_by_bare_v2_ids_in_a_new_client_keeps_titles_and_lyrics(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={KEY: 50}) as service:
        ids = submit(service, path)
        with MusicClient(
            KEY, base_url=service.base_url, v2_base_url=service.v2_base_url, journal=Journal(path), archive=False
        ) as fresh:  # a new client (a restarted kernel) that only has the ids
            assert all(not s.title for s in [fresh.query_v2(i) for i in ids])  # the query blanks them, as the service
            songs = fresh.wait(v2_ids=ids, interval=0.05)
    assert [s.title for s in songs] == ["Night Drive", "Night Drive"]
    assert all(s.lyrics and "neon rain" in s.lyrics for s in songs)


def test_resume_after_a_restart_keeps_v2_titles_and_lyrics(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={KEY: 50}) as service:
        ids = submit(service, path)
        with MusicClient(
            KEY, base_url=service.base_url, v2_base_url=service.v2_base_url, journal=Journal(path), archive=False
        ) as fresh:
            resumed = fresh.resume(wait=True, interval=0.05)
    songs = [r for r in resumed.records if r.id in ids]
    assert len(songs) == 2 and {s.title for s in songs} == {"Night Drive"}
    assert all(s.lyrics and "neon rain" in s.lyrics for s in songs)


@pytest.mark.slow
def test_a_v2_song_is_archived_with_its_title(tmp_path: Path) -> None:
    from ipymusicgen.archive.archiver import archiver_of

    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={KEY: 50}) as service,
        MusicClient(
            KEY,
            base_url=service.base_url,
            v2_base_url=service.v2_base_url,
            journal=Journal(tmp_path / "journal.sqlite3"),
            archive=tmp_path / "songs",
        ) as client,
    ):
        songs = client.submit_v2(is_auto=0, model_version="v4.5", prompt="synthwave", title="Night Drive")
        client.wait(songs, interval=0.05)
        assert archiver_of(client).join(60)
    names = sorted(p.name for p in (tmp_path / "songs").glob("*.mp3"))
    assert len(names) == 2 and all(name.startswith("Night Drive [") for name in names)

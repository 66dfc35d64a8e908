"""The archive keeps only what is really the song: an expired link's HTML page or an empty body is an archive
error retried with a fresh URL, a cover that is not an image is not kept (and never takes the song's name),
and a crafted file that decodes to hours is archived without peaks instead of filling the kernel's memory."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_server import HostileServer, RawRequest, respond

from benchmarks._audio import flac_bomb
from ipymusicgen import MusicClient
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal

KEY = "archive-key"
PAID_SANDBOX = {"keys": {KEY: 1000}, "stage_seconds": 0.05, "song_seconds": 4}
"""The keyed service (`conftest.paid_sandbox`, its clock running): its songs are journalled and archived."""
EXPIRED = b"<!doctype html><html><body><h1>This link has expired</h1></body></html>"


@pytest.fixture(scope="module")
def files(paid_sandbox: Sandbox) -> Iterator[HostileServer]:
    """A file host that answers each path with a bad body: an expired link's page, nothing, a bomb, a song."""
    bomb = flac_bomb(frames=600)

    def handler(request: RawRequest, sock: Any) -> None:
        name = request.path.rsplit("/", 1)[-1]
        if name == "expired.mp3":
            respond(sock, 200, raw=EXPIRED, headers={"Content-Type": "text/html"})
        elif name == "empty.mp3":
            respond(sock, 200, raw=b"", headers={"Content-Type": "audio/mpeg"})
        elif name == "bomb.flac":
            respond(sock, 200, raw=bomb, headers={"Content-Type": "audio/flac"})
        else:
            respond(sock, 404, {"detail": "no such file"})

    server = HostileServer(handler)
    yield server
    server.stop.set()


def made_song(paid_sandbox: Sandbox, journal: Path, **fields: Any) -> str:
    """One finished song of the keyed service, journalled, not archived yet; its id."""
    urls = {"base_url": paid_sandbox.base_url, "v2_base_url": paid_sandbox.v2_base_url}
    with MusicClient(KEY, **urls, journal=Journal(journal), archive=False) as client:
        ids = client.generate(action="custom", title="Harbour Lights", style="folk", lyrics="la la", **fields).ids
        client.wait(ids, interval=0.05)
    return ids[0]


def set_urls(journal: Path, task_id: str, **urls: str | None) -> None:
    with sqlite3.connect(journal) as db:
        for column, url in urls.items():
            db.execute(f"UPDATE tasks SET {column} = ? WHERE id = ?", (url, task_id))


def archive_now(paid_sandbox: Sandbox, journal: Path, songs: Path) -> MusicClient:
    client = MusicClient(KEY, base_url=paid_sandbox.base_url, v2_base_url=paid_sandbox.v2_base_url,
                         journal=Journal(journal), archive=songs)  # fmt: skip
    archiver = archiver_of(client)
    archiver.retry()
    assert archiver.join(60)
    return client


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["expired.mp3", "empty.mp3"])
def test_what_is_not_the_song_is_an_archive_error_then_a_fresh_url_archives_it(
    paid_sandbox: Sandbox, files: HostileServer, tmp_path: Path, bad: str
) -> None:
    journal, songs = tmp_path / "journal.sqlite3", tmp_path / "songs"
    task_id = made_song(paid_sandbox, journal)
    set_urls(journal, task_id, audio_url=f"{files.url}/files/{bad}")  # the URL the service gave has expired
    client = archive_now(paid_sandbox, journal, songs)
    try:
        with Library(journal) as library:
            failed = {s.id: s.archive_error for s in library.failed_archives()}
        assert task_id in failed and "expired link" in failed[task_id]
        assert not list(songs.glob(f"*{task_id[:8]}*"))  # the page was not kept as the song
        archiver_of(client).retry()  # a resume or a library open: a fresh URL from a new task query
        assert archiver_of(client).join(60)
    finally:
        client.close()
    with Library(journal) as library:
        song = library.song(task_id)
    assert song.archive_path and Path(song.archive_path).name == f"Harbour Lights [{task_id[:8]}].mp3"
    assert Path(song.archive_path).read_bytes()[:3] == b"ID3" and len(song.peaks) == 400


@pytest.mark.slow
def test_a_cover_that_is_audio_is_not_kept_and_never_takes_the_songs_name(
    paid_sandbox: Sandbox, tmp_path: Path
) -> None:
    journal, songs = tmp_path / "journal.sqlite3", tmp_path / "songs"
    task_id = made_song(paid_sandbox, journal)
    with sqlite3.connect(journal) as db:
        (audio,) = db.execute("SELECT audio_url FROM tasks WHERE id = ?", (task_id,)).fetchone()
    set_urls(journal, task_id, cover_url=audio)  # a "cover" served as audio/mpeg: the song's own bytes
    archive_now(paid_sandbox, journal, songs).close()
    names = sorted(p.name for p in songs.iterdir() if task_id[:8] in p.name)  # (the other take is archived too)
    assert names == [f"Harbour Lights [{task_id[:8]}].mp3"]


@pytest.mark.slow
def test_the_cover_is_named_by_what_its_bytes_are(paid_sandbox: Sandbox, tmp_path: Path) -> None:
    journal, songs = tmp_path / "journal.sqlite3", tmp_path / "songs"
    task_id = made_song(paid_sandbox, journal)
    archive_now(paid_sandbox, journal, songs).close()
    names = sorted(p.name for p in songs.iterdir() if task_id[:8] in p.name)
    assert names == [f"Harbour Lights [{task_id[:8]}].mp3", f"Harbour Lights [{task_id[:8]}].svg"]


@pytest.mark.slow
def test_a_crafted_file_that_decodes_to_hours_is_archived_without_peaks(
    paid_sandbox: Sandbox, files: HostileServer, tmp_path: Path
) -> None:
    journal, songs = tmp_path / "journal.sqlite3", tmp_path / "songs"
    task_id = made_song(paid_sandbox, journal)
    set_urls(journal, task_id, audio_url=f"{files.url}/files/bomb.flac", cover_url=None)
    archive_now(paid_sandbox, journal, songs).close()
    with Library(journal) as library:
        song = library.song(task_id)
    assert song.archive_path and song.archive_path.endswith(".flac")  # the paid bytes are kept...
    assert song.peaks == [] and "no waveform" in (song.archive_error or "")  # ...drawn without peaks, with why
    with Library(journal) as library:
        assert task_id not in {s.id for s in library.failed_archives()}

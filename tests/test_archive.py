"""Archive: finished songs saved to the archive directory with their tags, off the polling thread, retried."""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from mutagen.id3 import ID3

from ipymusicgen import Journal, MusicClient
from ipymusicgen.archive.archiver import (
    SongInfo,
    archive_dir_for,
    archive_of,
    archive_wav,
    archiver_of,
    write_tags,
)
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library

LYRICS = "[Verse]\nthe lighthouse keeper hums\n[Chorus]\nsalt and thunder"


@pytest.fixture
def archived_client(sandbox: Sandbox, tmp_path: Path) -> Iterator[MusicClient]:
    with sandbox.client(journal=Journal(tmp_path / "journal.sqlite3"), archive=tmp_path / "songs") as client:
        yield client


def _make_song(client: MusicClient, **fields: object) -> list[str]:
    request = {"action": "custom", "title": "Harbour Lights", "style": "sea shanty, folk", "lyrics": LYRICS}
    ids = client.generate({**request, **fields}).ids
    client.wait(ids)
    archiver = archiver_of(client)
    assert archiver is not None and archiver.join(30)
    return ids


@pytest.mark.slow
def test_finished_songs_are_archived_with_their_tags(archived_client: MusicClient, tmp_path: Path) -> None:
    ids = _make_song(archived_client, mv="MFV2.0")
    songs = tmp_path / "songs"
    for task_id in ids:
        path = songs / f"Harbour Lights [{task_id[:8]}].mp3"
        assert path.is_file(), sorted(p.name for p in songs.iterdir())
        tags = ID3(path)
        assert tags.version[:2] == (2, 4)
        assert str(tags["TIT2"]) == "Harbour Lights"
        assert str(tags["TCON"]) == "sea shanty, folk"
        assert tags.getall("USLT")[0].text == LYRICS
        assert str(tags["TDRC"]).startswith("20")
        assert str(tags["TXXX:ipymusicgen:task_id"]) == task_id
        assert str(tags["TXXX:ipymusicgen:model"]) == "MFV2.0"
        assert str(tags["TXXX:ipymusicgen:action"]) == "custom"
        request = json.loads(str(tags["TXXX:ipymusicgen:request"]))
        assert request["lyrics"] == LYRICS and request["mv"] == "MFV2.0"
        assert "sandbox-demo-key" not in path.read_bytes().decode("latin-1")
        assert not tags.getall("APIC")  # the sandbox's covers are SVG: kept beside the song, not embedded
        assert (songs / f"Harbour Lights [{task_id[:8]}].svg").is_file()
    assert not [p for p in songs.iterdir() if p.name.startswith(".")]  # no staging left behind
    with Library(tmp_path / "journal.sqlite3") as library:
        song = library.song(ids[0])
        assert song.archive_path == str(songs / f"Harbour Lights [{ids[0][:8]}].mp3")
        assert song.archive_size == Path(song.archive_path).stat().st_size
        assert len(song.peaks) == 400 and song.archive_error is None


@pytest.mark.slow
def test_a_failed_archive_is_recorded_and_retried_without_duplicates(
    archived_client: MusicClient, sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.set_faults("server_error:count=2:path=/files")  # both takes' downloads fail once
    ids = _make_song(archived_client)
    songs = tmp_path / "songs"
    assert not list(songs.glob("*.mp3"))
    with Library(tmp_path / "journal.sqlite3") as library:
        failed = library.failed_archives()
        assert {s.id for s in failed} == set(ids)
        assert all("500" in (s.archive_error or "") for s in failed)
    archiver = archiver_of(archived_client)
    assert archiver is not None
    archiver.retry()
    assert archiver.join(30)
    archiver.retry()  # a second retry finds nothing to do: idempotent
    assert archiver.join(30)
    assert sorted(p.name for p in songs.glob("*.mp3")) == sorted(f"Harbour Lights [{i[:8]}].mp3" for i in ids)
    with Library(tmp_path / "journal.sqlite3") as library:
        assert not library.failed_archives()
        assert all(library.song(i).archive_path for i in ids)


@pytest.mark.slow
def test_a_new_client_retries_what_an_earlier_one_could_not_archive(sandbox: Sandbox, tmp_path: Path) -> None:
    journal_path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(journal_path), archive=False) as first:
        old = first.generate(action="auto", style="ambient").ids
        first.wait(old)
    with sandbox.client(journal=Journal(journal_path), archive=tmp_path / "later") as second:
        new = second.generate(action="auto", style="drone").ids
        second.wait(new)  # its first polling round also retries what the journal holds unarchived
        archiver = archiver_of(second)
        assert archiver is not None and archiver.join(30)
    archived = sorted(p.name[-14:-4] for p in (tmp_path / "later").glob("*.mp3"))
    assert archived == sorted(f"[{i[:8]}]" for i in old + new)


def test_archive_off_and_sandbox_identity(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "user-archive"))
    with sandbox.client(archive=False) as off:
        assert archiver_of(off) is None
    with sandbox.client() as demo:  # the sandbox's demo key: its own temp directory, never the user's
        home = archive_of(demo)  # its wiring's archive (a client made by hand: the default wiring's)
        assert home is not None and archive_dir_for(demo) == home.sandbox_dir()
    real = MusicClient("a-real-looking-key", base_url="https://api.example.invalid")
    assert archive_dir_for(real) == tmp_path / "user-archive"
    monkeypatch.setenv("MUSICGEN_ARCHIVE", "off")
    assert archive_dir_for(real) is None
    real.close()


@pytest.mark.slow
def test_the_wav_is_archived_beside_the_mp3(archived_client: MusicClient, tmp_path: Path) -> None:
    ids = _make_song(archived_client)
    wav = archive_wav(ids[0], client=archived_client)
    assert wav == tmp_path / "songs" / f"Harbour Lights [{ids[0][:8]}].wav"
    assert wav.read_bytes()[:4] == b"RIFF"
    with Library(tmp_path / "journal.sqlite3") as library:
        assert library.song(ids[0]).wav_path == str(wav)


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0\0\0\0")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def test_a_raster_cover_is_embedded(tmp_path: Path) -> None:
    from ipymusicgen.sandbox.audio import render_song

    song_path = tmp_path / "song.mp3"
    song_path.write_bytes(render_song("cover test", seconds=1, vocal=False)[0])
    cover = tmp_path / "cover.png"
    cover.write_bytes(_png())
    info = SongInfo("task-1", "T", "S", None, None, None, 0.0, None, "auto", {}, None)
    write_tags(song_path, info, cover)
    frames = ID3(song_path).getall("APIC")
    assert len(frames) == 1 and frames[0].mime == "image/png" and frames[0].data == cover.read_bytes()
    assert os.path.getsize(song_path) > len(cover.read_bytes())


@pytest.mark.slow
def test_a_hostile_title_stays_inside_the_archive(archived_client: MusicClient, tmp_path: Path) -> None:
    ids = _make_song(archived_client, title="../../outside/..\\evil\x07 name")
    names = sorted(p.name for p in (tmp_path / "songs").glob("*.mp3"))
    assert len(names) == 2 and all(name.endswith(f"[{i[:8]}].mp3") for name, i in zip(names, sorted(ids), strict=True))
    assert not (tmp_path / "outside").exists() and all("/" not in n and "\x07" not in n for n in names)


@pytest.mark.slow
def test_the_async_client_archives_too(sandbox: Sandbox, tmp_path: Path) -> None:
    import asyncio

    async def make() -> list[str]:
        async with sandbox.async_client(journal=Journal(tmp_path / "journal.sqlite3"), archive=tmp_path / "a") as c:
            ids = (await c.generate(action="auto", style="async folk")).ids
            await c.wait(ids)
            archiver = archiver_of(c)
            assert archiver is not None and await asyncio.to_thread(archiver.join, 30)
            return ids

    ids = asyncio.run(make())
    assert sorted(p.name[-14:-4] for p in (tmp_path / "a").glob("*.mp3")) == sorted(f"[{i[:8]}]" for i in ids)


@pytest.mark.slow
def test_library_open_retries_a_failed_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyed session (a sandbox with its own key stands in for the real service): opening the library retries."""
    from ipymusicgen import library
    from ipymusicgen.workspace import session

    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="", keys={"mg-live-key-for-test": 20}) as server:
        session.configure(api_key="mg-live-key-for-test", base_url=server.base_url, v2_base_url=server.v2_base_url,
                          journal_path=str(tmp_path / "journal.sqlite3"), poll_interval=0.05)  # fmt: skip
        try:
            client = session.get_client()
            server.set_faults("server_error:count=2:path=/files")
            ids = client.generate(action="auto", style="retry me").ids
            client.wait(ids)
            archiver = archiver_of(client)
            assert archiver is not None and archiver.join(30) and set(archiver.errors) == set(ids)
            assert not list((tmp_path / "archive").glob("*.mp3"))
            opened = library()  # retries on open
            assert archiver.join(30)
            assert len(list((tmp_path / "archive").glob("*.mp3"))) == 2
            assert all(opened.song(i).archive_path for i in ids) and not opened.failed_archives()
            opened.close()
        finally:
            session.shutdown()
            session.configure(api_key=None, base_url=None, v2_base_url=None, journal_path=None, poll_interval=None)


@pytest.mark.slow
def test_a_process_that_archived_and_exits_leaves_only_the_journal_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ipymusicgen import Journal, library\n"
        "from ipymusicgen.sandbox import Sandbox\n"
        "with Sandbox(stage_seconds=0.1, song_seconds=2, faults='') as box:\n"
        "    client = box.client(journal=Journal(sys.argv[1]), archive=sys.argv[2])\n"
        "    client.wait(client.generate(action='auto', style='exit').ids)\n"
        "    lib = library(sys.argv[1]); lib.songs(text='exit')\n"  # a library left open, and the archiver busy
        "print('done')\n"
    )
    journal = tmp_path / "journal.sqlite3"
    out = subprocess.run([sys.executable, "-c", code, str(journal), str(tmp_path / "songs")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.glob("journal.sqlite3*")) == ["journal.sqlite3"]


def test_file_names_keep_the_id_whatever_the_title_and_never_leave_the_folder() -> None:
    def name(title: str | None, task_id: str) -> str:
        return SongInfo(task_id, title, None, None, None, None, 0.0, None, None, {}, None).file_name(".mp3")

    assert name("Rain", "e3e70682-c209") == "Rain [e3e70682].mp3"
    long = name("é🎵" * 300, "abcdef0123")
    assert long.endswith(" [abcdef01].mp3") and len(long.encode()) <= 255
    assert name("../..", "../../x") == "untitled [______x].mp3"
    assert name(None, "CON") == "untitled [CON].mp3"


@pytest.mark.slow
def test_v2_songs_are_archived_with_their_model(archived_client: MusicClient, tmp_path: Path) -> None:
    songs = archived_client.submit_v2(is_auto=0, model_version="v4.0", prompt="cello at dawn", lyrics="[Verse]\nmist")
    ids = [s.id for s in songs]
    archived_client.wait(v2_ids=ids)
    archiver = archiver_of(archived_client)
    assert archiver is not None and archiver.join(30)
    with Library(tmp_path / "journal.sqlite3") as library:
        for task_id in ids:
            song = library.song(task_id)
            assert song.archive_path and song.model == "v4.0", song
            tags = ID3(song.archive_path)
            assert str(tags["TXXX:ipymusicgen:model"]) == "v4.0" and str(tags["TXXX:ipymusicgen:task_id"]) == task_id
        assert {s.id for s in library.songs(text="cello")} == set(ids)  # the v2 prompt is searchable

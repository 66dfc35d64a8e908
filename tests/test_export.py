"""Export: songs of a real sandbox run, archived into a temporary journal, written out as folders (tagged MP3,
cover, lyrics, a JSON sidecar) whose sidecar says what the library says, with names that server text cannot
steer outside the folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mutagen.id3 import ID3

import ipymusicgen
from ipymusicgen import MusicClient, Settings
from ipymusicgen.archive.archiver import archiver_of, song_info
from ipymusicgen.archive.export import SIDECAR, export_songs, exports_dir_beside, task_ids
from ipymusicgen.batch.drivers import run_batch
from ipymusicgen.models.costs import estimate_credits
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.storage.journal import Journal
from ipymusicgen.widgets.offered import REFUSED

KEY = "export-key"
LYRICS = "[Verse]\nthe lighthouse keeper hums\n[Chorus]\nsalt and thunder"
TRAVERSAL = "../../../escaped/../..\\evil"
MEASURES = {"bpm": 118.0, "key": "A minor", "lufs": -14.2, "true_peak_db": -1.1, "silence_start_s": 0.0,
            "silence_end_s": 0.3}  # fmt: skip


@dataclass
class Run:
    journal: Path
    archive: Path
    batch_ids: list[str]
    single_ids: list[str]
    client: MusicClient


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A measured batch of one call (two takes) with a hostile title, and one more call outside any batch."""
    home = tmp_path_factory.mktemp("export")
    journal, archive = home / "journal.sqlite3", home / "songs"
    settings = Settings.from_env().with_changes(poll_interval=0.05)
    service = Sandbox(stage_seconds=0.05, song_seconds=3, faults="", keys={KEY: 500})
    with service, MusicClient(KEY, base_url=service.base_url, v2_base_url=service.v2_base_url,
                              journal=Journal(journal), archive=archive, settings=settings) as client:  # fmt: skip
        request = {"action": "custom", "title": TRAVERSAL, "style": "sea shanty", "lyrics": LYRICS, "mv": "MFV2.0"}
        batch = run_batch(client, [request], name="album", concurrency=1)
        assert [r.state for r in batch.rows] == ["complete"]
        single = list(client.generate(action="custom", title="Harbour Lights", style="folk", lyrics="la la").ids)
        client.wait(single, interval=0.05)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
        with Library(journal) as library:
            batch_ids = [s.id for s in library.songs(batch="album")]
        assert len(batch_ids) == 2 and len(single) == 2
        yield Run(journal, archive, batch_ids, single, client)  # the client stays open: the views' tests poll it


@pytest.fixture
def library(run: Run) -> Iterator[Library]:
    with Library(run.journal) as opened:
        yield opened


@pytest.mark.slow  # a sandbox run on real time (its stages, the archive's worker)
def test_an_exported_folder_holds_the_files_and_a_sidecar_matching_the_library(
    run: Run, library: Library, tmp_path: Path
) -> None:
    first, second = run.batch_ids
    library.rate(first, 4)
    library.favourite(first)
    library.keep(first)
    library.note(first, "the keeper")
    library.vote(first, second)
    library.store.analysed(first, MEASURES)
    out = tmp_path / "out"

    (folder,) = export_songs(library, first, out)

    song = library.song(first)
    assert folder.parent == out and folder.name.endswith(f"[{first[:8]}]")
    names = sorted(p.name for p in folder.iterdir())
    mp3 = f"{folder.name}.mp3"
    assert names == sorted([mp3, "cover.svg", "lyrics.txt", SIDECAR]), names
    assert (folder / mp3).read_bytes() == Path(song.archive_path).read_bytes()  # the tagged MP3 itself
    assert str(ID3(folder / mp3)["TXXX:ipymusicgen:task_id"]) == first
    assert (folder / "cover.svg").read_bytes() == Path(song.cover_path).read_bytes()
    assert (folder / "lyrics.txt").read_text(encoding="utf-8") == LYRICS + "\n"

    sidecar = json.loads((folder / SIDECAR).read_text(encoding="utf-8"))
    assert sidecar["id"] == first and sidecar["title"] == TRAVERSAL == song.title
    assert (sidecar["style"], sidecar["model"], sidecar["action"]) == (song.style, song.model, song.action)
    assert (sidecar["batch"], sidecar["call"], sidecar["take"]) == ("album", song.call, song.take)
    request = song_info(library.store, first).request
    assert sidecar["request"] == request and request["lyrics"] == LYRICS and request["mv"] == "MFV2.0"
    assert sidecar["lineage"] == library.lineage(first)
    album = {r["batch"]: r for r in library.spend("batch").rows}["album"]
    assert album["credits_measured"] is not None  # the batch read the key's counts before and after
    assert sidecar["cost"] == {
        "call_credits_estimated": estimate_credits(request),
        "songs_in_call": 2,
        "batch_credits_estimated": album["credits_estimated"],
        "batch_credits_measured": album["credits_measured"],
    }  # estimated and measured side by side: no field adds them
    ratings = sidecar["ratings"]
    assert (ratings["stars"], ratings["favourite"], ratings["kept"], ratings["note"]) == (4, True, True, "the keeper")
    assert (ratings["votes_won"], ratings["votes_lost"]) == (1, 0) and ratings["votes"][0]["against"] == second
    analysis = sidecar["analysis"]
    assert (analysis["bpm"], analysis["key"], analysis["lufs"]) == (song.bpm, song.musical_key, song.lufs)
    assert (analysis["bpm"], analysis["key"], analysis["lufs"]) == (118.0, "A minor", -14.2)
    assert sidecar["files"] == {"audio": mp3, "wav": None, "mp4": None, "cover": "cover.svg", "lyrics": "lyrics.txt"}


@pytest.mark.slow  # a sandbox run on real time
def test_a_hostile_title_cannot_place_a_file_outside_the_folder(run: Run, library: Library, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "out"
    folders = export_songs(library, run.batch_ids, out)
    assert [f.parent for f in folders] == [out, out]
    everything = sorted(p for p in tmp_path.rglob("*"))
    assert all(p == out.parent or p.is_relative_to(out) for p in everything), everything
    for folder in folders:
        assert folder.name not in (".", "..") and "/" not in folder.name and "\\" not in folder.name
        assert not folder.name.startswith(".") and folder.name.endswith("]")  # one visible component, id kept
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


@pytest.mark.slow  # a sandbox run on real time
def test_exporting_again_refreshes_the_same_folders_and_never_writes_into_a_stranger(
    run: Run, library: Library, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = export_songs(library, run.single_ids, out)
    again = export_songs(library, [library.song(i) for i in run.single_ids], out)
    assert again == first and len(list(out.iterdir())) == 2
    stranger = out / "elsewhere"
    stranger.mkdir()
    theirs = first[0].name
    (out / theirs).rename(stranger / theirs)
    (out / theirs).mkdir()
    (out / theirs / "holiday.jpg").write_bytes(b"not ours")
    (moved,) = export_songs(library, run.single_ids[0], out)
    assert moved != out / theirs and moved.name.startswith(theirs)
    assert sorted(p.name for p in (out / theirs).iterdir()) == ["holiday.jpg"]


@pytest.mark.slow  # a sandbox run on real time
def test_an_unknown_id_writes_nothing(run: Run, library: Library, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(KeyError):
        export_songs(library, [run.single_ids[0], "no-such-task"], out)
    assert not out.exists()


@pytest.mark.slow  # a sandbox run on real time
def test_the_package_export_reads_the_library_it_is_given(run: Run, tmp_path: Path) -> None:
    folders = ipymusicgen.export(run.single_ids, tmp_path / "out", journal_path=run.journal)
    assert len(folders) == 2 and all((f / SIDECAR).is_file() for f in folders)
    sidecar = json.loads((folders[0] / SIDECAR).read_text(encoding="utf-8"))
    assert sidecar["batch"] is None and sidecar["cost"]["batch_credits_measured"] is None
    assert sidecar["cost"]["call_credits_estimated"] == estimate_credits(sidecar["request"])


def test_what_export_takes() -> None:
    assert task_ids("abc") == ["abc"]
    assert task_ids(["a", "b", "a"]) == ["a", "b"]
    with pytest.raises(TypeError):
        task_ids(42)
    with pytest.raises(TypeError):
        task_ids([None])
    with pytest.raises(ValueError, match="nothing to export"):
        task_ids([])
    assert exports_dir_beside(Path("/data/ipymusicgen/songs")) == Path("/data/ipymusicgen/songs-exports")


# --- the card's Export: free, one press, written beside the archive and said where ----------------------------


@pytest.mark.slow  # a sandbox run on real time
def test_the_card_export_asks_nothing_and_says_where_it_wrote(run: Run) -> None:
    from helpers import wait_until

    from ipymusicgen.models.tasks import TaskState
    from ipymusicgen.widgets import TaskWatcher
    from ipymusicgen.widgets.watch_actions import PAID_ASKS

    assert "export" not in PAID_ASKS
    assert run.client.settings.needs_confirm(None)  # a real key: a paid action would ask first
    watcher = TaskWatcher(run.single_ids, client=run.client)
    try:
        wait_until(lambda: all(c.state is TaskState.COMPLETE for c in map(watcher.card, run.single_ids)), "complete")
        card = watcher.card(run.single_ids[0])
        assert "export" in card.data()["actions"]
        folder = card.run_action("export")  # one press
        beside = exports_dir_beside(run.archive)
        assert folder is not None and folder.parent == beside and (folder / SIDECAR).is_file()
        assert card.note == f"Exported to {folder}"
        sidecar = json.loads((folder / SIDECAR).read_text(encoding="utf-8"))
        assert sidecar["id"] == run.single_ids[0]
    finally:
        watcher.close()


@pytest.mark.slow  # a sandbox run on real time
def test_the_library_view_exports_a_song_and_says_where(run: Run) -> None:
    from ipymusicgen.widgets.library import LibraryView

    with Library(run.journal) as opened:
        view = LibraryView(opened)
        try:
            ready = [c for c in view.cards if c["id"] == run.batch_ids[1]]
            assert ready and "export" in ready[0]["actions"]
            view._on_msg(view, {"kind": "export", "id": run.batch_ids[1]}, [])
            folder = exports_dir_beside(run.archive)
            (written,) = [p for p in folder.iterdir() if p.name.endswith(f"[{run.batch_ids[1][:8]}]")]
            assert view.status == f"Exported to {written}"
            view._on_msg(view, {"kind": "export", "id": "../../no-such-task"}, [])
            assert view.status == REFUSED  # not a card of this view (issue 43): nothing exported
        finally:
            view.close()


@pytest.mark.slow  # a sandbox run on real time
def test_a_made_wav_and_mp4_travel_with_the_song(run: Run, tmp_path: Path) -> None:
    from ipymusicgen.archive.archiver import archive_wav

    task_id = run.single_ids[1]
    wav = archive_wav(task_id, client=run.client)  # the WAV rendering, archived beside the MP3 and recorded
    with Library(run.journal) as library:
        mp3 = Path(library.song(task_id).archive_path)
        mp4 = mp3.with_suffix(".mp4")  # an MP4 archived beside the MP3 under its name
        mp4.write_bytes(b"\x00\x00\x00\x18ftypmp42 a video")
        try:
            (folder,) = export_songs(library, task_id, tmp_path / "out")
        finally:
            mp4.unlink()
    sidecar = json.loads((folder / SIDECAR).read_text(encoding="utf-8"))
    assert sidecar["files"]["wav"] == f"{folder.name}.wav" and sidecar["files"]["mp4"] == f"{folder.name}.mp4"
    assert (folder / f"{folder.name}.wav").read_bytes() == wav.read_bytes()
    assert (folder / f"{folder.name}.mp4").read_bytes().startswith(b"\x00\x00\x00\x18ftyp")


@pytest.mark.slow  # a sandbox run on real time
def test_a_link_named_like_the_song_folder_is_passed_by(run: Run, library: Library, tmp_path: Path) -> None:
    """A symlink where the song's folder would go (planted, or left by another tool) is not followed."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    name = song_info(library.store, run.single_ids[0]).file_name("")
    (out / name).symlink_to(elsewhere, target_is_directory=True)
    (out / f"{name} (2)").symlink_to(tmp_path / "nowhere", target_is_directory=True)  # dangling: "does not exist"
    (folder,) = export_songs(library, run.single_ids[0], out)
    assert folder.parent == out and not folder.is_symlink() and (folder / SIDECAR).is_file()
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "nowhere").exists()


@pytest.mark.slow  # a sandbox run on real time
def test_a_song_without_its_file_is_exported_with_what_is_known(run: Run, library: Library, tmp_path: Path) -> None:
    task_id = run.single_ids[0]
    archived = Path(library.song(task_id).archive_path)
    kept = archived.read_bytes()
    archived.unlink()
    try:
        (folder,) = export_songs(library, task_id, tmp_path / "out")
    finally:
        archived.write_bytes(kept)
    sidecar = json.loads((folder / SIDECAR).read_text(encoding="utf-8"))
    assert sidecar["files"]["audio"] is None and sidecar["missing"]
    assert sidecar["request"]["title"] == "Harbour Lights" and (folder / "lyrics.txt").is_file()

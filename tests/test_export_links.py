"""An export folder holds one folder per song, whenever it was exported, and what another program planted there is
replaced, never written through: an export made before the song was final (no title yet) is renamed to the final
title and updated, not left beside it; a hard link, a symlink or a FIFO at a file's name is not followed. A keyed
sandbox on a fake clock makes the songs; the export reads the journal and the archive only."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import ipymusicgen
from ipymusicgen.archive.export import SIDECAR
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library

KEY = "k-export-links-2c7a"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
"""The paid sandbox (`conftest.paid_sandbox`): this module's own key and credits."""


def export(tmp_path: Path, ids: str | list[str], out: Path) -> list[Path]:
    return ipymusicgen.export(ids, out, journal_path=tmp_path / "journal.sqlite3")


def finish(client: MusicClient, service: Sandbox, ids: list[str]) -> None:
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)


def ours(out: Path, task_id: str) -> list[Path]:
    """Every folder under `out` whose sidecar names the song."""
    found = []
    for path in out.iterdir():
        sidecar = path / SIDECAR
        if path.is_dir() and sidecar.is_file() and json.loads(sidecar.read_text())["id"] == task_id:
            found.append(path)
    return found


def test_a_song_exported_before_it_was_final_ends_in_one_folder_under_its_final_title(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="auto", style="night ferry").ids)  # the service gives the title when done
    out = tmp_path / "out"
    (early,) = export(tmp_path, ids[0], out)
    assert early.name.startswith("untitled [") and not list(early.glob("*.mp3"))
    (early / "my notes.txt").write_text("keep me")  # the person's own file in the early folder
    export(tmp_path, ids[1], out)
    finish(client, service, ids)
    with Library(tmp_path / "journal.sqlite3") as library:
        title = library.song(ids[0]).title
        archived = Path(library.song(ids[0]).archive_path).read_bytes()
    (final,) = export(tmp_path, ids[0], out)
    assert title and final.name.startswith(title) and final.name.endswith(f"[{ids[0][:8]}]")
    assert ours(out, ids[0]) == [final] and not early.exists()
    assert (final / "my notes.txt").read_text() == "keep me"  # the folder was renamed, not copied and dropped
    (mp3,) = final.glob("*.mp3")
    assert mp3.read_bytes() == archived and json.loads((final / SIDECAR).read_text())["files"]["audio"] == mp3.name
    assert len(ours(out, ids[1])) == 1  # the other take, exported early and not again, is left as it was
    export(tmp_path, ids, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in ours(out, ids[0]) + ours(out, ids[1]))
    assert len(list(out.iterdir())) == 2


def test_an_early_export_whose_final_name_is_taken_keeps_one_numbered_folder(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="auto", style="tram bells").ids)
    out = tmp_path / "out"
    (early,) = export(tmp_path, ids[0], out)
    finish(client, service, ids)
    with Library(tmp_path / "journal.sqlite3") as library:
        final_name = f"{library.song(ids[0]).title} [{ids[0][:8]}]"
    (out / final_name).mkdir()
    (out / final_name / "holiday.jpg").write_bytes(b"not ours")  # someone else's folder of that name
    (first,) = export(tmp_path, ids[0], out)
    (again,) = export(tmp_path, ids[0], out)
    assert first == again == out / f"{final_name} (2)" and ours(out, ids[0]) == [first] and not early.exists()
    assert sorted(p.name for p in (out / final_name).iterdir()) == ["holiday.jpg"]
    assert list(first.glob("*.mp3"))


def test_a_second_folder_left_by_an_earlier_export_is_cleared_of_our_files(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    """Two folders of the song (as exports before this fix left them): ours is kept, the other loses our files
    and goes when nothing else is in it."""
    client = paid_clients()
    ids = list(client.generate(action="auto", style="quarry echo").ids)
    out = tmp_path / "out"
    (early,) = export(tmp_path, ids[0], out)
    early_copy = out / f"draft [{ids[0][:8]}]"
    early_copy.mkdir()
    for path in early.iterdir():
        (early_copy / path.name).write_bytes(path.read_bytes())
    finish(client, service, ids)
    (final,) = export(tmp_path, ids[0], out)
    assert ours(out, ids[0]) == [final] and not early.exists() and not early_copy.exists()


def plant_links(folder: Path, victims: Path, *, hard: bool) -> dict[Path, bytes]:
    """Replace every file of an exported folder by a link to a file outside it; what each outside file held."""
    victims.mkdir(exist_ok=True)
    held: dict[Path, bytes] = {}
    for number, path in enumerate(sorted(folder.iterdir())):
        victim = victims / f"precious-{number}{path.suffix}"
        victim.write_bytes(f"precious {number}".encode())
        held[victim] = victim.read_bytes()
        path.unlink()
        if hard:
            os.link(victim, path)
        else:
            path.symlink_to(victim)
    return held


@pytest.mark.parametrize("hard", [True, False], ids=["hard-links", "symlinks"])
def test_links_planted_in_an_export_folder_are_replaced_never_written_through(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path, hard: bool
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="custom", title="Lantern", style="folk", lyrics="[Verse]\nsmall light").ids)
    finish(client, service, ids)
    out = tmp_path / "out"
    (folder,) = export(tmp_path, ids[0], out)
    names = sorted(p.name for p in folder.iterdir())
    assert {SIDECAR, "lyrics.txt"} <= set(names) and any(n.endswith(".mp3") for n in names)
    held = plant_links(folder, tmp_path / "elsewhere", hard=hard)
    (again,) = export(tmp_path, ids[0], out)
    assert again == folder and sorted(p.name for p in folder.iterdir()) == names
    assert {victim: victim.read_bytes() for victim in held} == held  # nothing written through
    for path in folder.iterdir():
        assert not path.is_symlink() and path.stat().st_nlink == 1, path
    with Library(tmp_path / "journal.sqlite3") as library:
        archived = Path(library.song(ids[0]).archive_path).read_bytes()
    (mp3,) = folder.glob("*.mp3")
    assert mp3.read_bytes() == archived and json.loads((folder / SIDECAR).read_text())["id"] == ids[0]
    assert (folder / "lyrics.txt").read_text() == "[Verse]\nsmall light\n"


def test_a_link_between_two_files_of_the_folder_does_not_overwrite_one_with_the_other(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="custom", title="Weir", style="folk", lyrics="[Verse]\nwater").ids)
    finish(client, service, ids)
    out = tmp_path / "out"
    (folder,) = export(tmp_path, ids[0], out)
    (mp3,) = folder.glob("*.mp3")
    song = mp3.read_bytes()
    (folder / "lyrics.txt").unlink()
    (folder / "lyrics.txt").symlink_to(mp3.name)  # written after the MP3: would overwrite the song with its words
    (folder / SIDECAR).unlink()
    os.link(mp3, folder / SIDECAR)
    export(tmp_path, ids[0], out)
    assert mp3.read_bytes() == song and (folder / "lyrics.txt").read_text() == "[Verse]\nwater\n"
    assert json.loads((folder / SIDECAR).read_text())["id"] == ids[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_planted_as_the_sidecar_is_not_waited_on(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="custom", title="Sluice", style="folk", lyrics="la").ids)
    finish(client, service, ids)
    out = tmp_path / "out"
    (folder,) = export(tmp_path, ids[0], out)
    (folder / SIDECAR).unlink()
    os.mkfifo(folder / SIDECAR)  # reading it would wait for a writer forever
    done: list[Path] = []
    worker = threading.Thread(target=lambda: done.extend(export(tmp_path, ids[0], out)), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive() and len(done) == 1
    assert (done[0] / SIDECAR).is_file() and json.loads((done[0] / SIDECAR).read_text())["id"] == ids[0]


def test_a_symlink_planted_at_an_archived_path_is_not_copied_into_the_export(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    """The archive's MP3 swapped for a link to a file outside (a key file, the kernel's environment): the export
    says the audio is missing and copies nothing through the link."""
    client = paid_clients()
    ids = list(client.generate(action="custom", title="Keel", style="folk", lyrics="la").ids)
    finish(client, service, ids)
    with Library(tmp_path / "journal.sqlite3") as library:
        archived = Path(library.song(ids[0]).archive_path)
    secret = tmp_path / "secret.env"
    secret.write_text("MUSICGEN_API_KEY=k-not-for-export")
    archived.unlink()
    archived.symlink_to(secret)
    (folder,) = export(tmp_path, ids[0], tmp_path / "out")
    assert not list(folder.glob("*.mp3")) and json.loads((folder / SIDECAR).read_text())["files"]["audio"] is None
    assert all(b"k-not-for-export" not in p.read_bytes() for p in folder.iterdir())


def test_a_re_export_removes_files_of_an_old_title_and_keeps_what_the_archive_lost(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="custom", title="Tidewater", style="folk", lyrics="la").ids)
    finish(client, service, ids)
    out = tmp_path / "out"
    (folder,) = export(tmp_path, ids[0], out)
    (mp3,) = folder.glob("*.mp3")
    old = folder / f"Old Name [{ids[0][:8]}].mp3"  # as an export under an earlier title left it
    mp3.rename(old)
    sidecar = json.loads((folder / SIDECAR).read_text())
    sidecar["files"]["audio"] = old.name
    (folder / SIDECAR).write_text(json.dumps(sidecar))
    (folder / "my mix.mp3").write_bytes(b"mine")  # not ours: never listed, never removed
    export(tmp_path, ids[0], out)
    assert mp3.is_file() and not old.exists() and (folder / "my mix.mp3").read_bytes() == b"mine"
    with Library(tmp_path / "journal.sqlite3") as library:
        archived = Path(library.song(ids[0]).archive_path)
    kept = archived.read_bytes()
    archived.unlink()  # the archive lost the song: the export folder may be the only copy left
    try:
        export(tmp_path, ids[0], out)
    finally:
        archived.write_bytes(kept)
    assert mp3.read_bytes() == kept and json.loads((folder / SIDECAR).read_text())["files"]["audio"] == mp3.name


def test_a_second_folder_keeps_the_only_copy_of_a_file_the_song_folder_lacks(
    paid_clients: Callable[..., MusicClient], service: Sandbox, tmp_path: Path
) -> None:
    client = paid_clients()
    ids = list(client.generate(action="custom", title="Millrace", style="folk", lyrics="la").ids)
    finish(client, service, ids)
    out = tmp_path / "out"
    (folder,) = export(tmp_path, ids[0], out)
    draft = out / f"draft [{ids[0][:8]}]"
    draft.mkdir()
    for path in folder.iterdir():
        (draft / path.name).write_bytes(path.read_bytes())
    (mp3,) = folder.glob("*.mp3")
    mp3.unlink()
    with Library(tmp_path / "journal.sqlite3") as library:
        archived = Path(library.song(ids[0]).archive_path)
    kept = archived.read_bytes()
    archived.unlink()
    try:
        export(tmp_path, ids[0], out)
    finally:
        archived.write_bytes(kept)
    assert (draft / mp3.name).read_bytes() == kept and (draft / SIDECAR).is_file()  # the only copy left stays
    assert not (draft / "lyrics.txt").exists()  # what the song's folder holds is not kept twice

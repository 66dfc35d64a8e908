"""Where a song card's player reads its audio is Python's decision (widgets/card_audio.py), and the kernel hands
a card's bytes over the widget channel when the page cannot fetch them; forged requests get a refusal, no bytes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers import AudioPage

from ipymusicgen import Journal
from ipymusicgen.archive.archiver import archiver_of
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library
from ipymusicgen.widgets import card_audio
from ipymusicgen.widgets.card_audio import REFUSAL, CardAudio, FilesApi, files_apis
from ipymusicgen.widgets.song_data import song_card

MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 256
DAY = 86_400.0


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A server root with a song under it (a space in its name), and a song archived outside it."""
    root = tmp_path / "root"
    (root / "songs").mkdir(parents=True)
    inside = root / "songs" / "rain song.mp3"
    outside = tmp_path / "data" / "archive" / "tide.mp3"
    outside.parent.mkdir(parents=True)
    inside.write_bytes(MP3)
    outside.write_bytes(MP3 + b"\x00" * 100)
    return root, inside, outside


def test_python_picks_files_url_under_a_files_api_root_then_a_known_good_url_then_the_kernel(
    files: tuple[Path, Path, Path],
) -> None:
    root, inside, outside = files
    page = AudioPage()
    audio = CardAudio(page, apis=[FilesApi(root.resolve(), "/user/ann/")])
    remote = "https://cdn.example.com/a.mp3"
    now = time.time()

    under = audio.fields("a", path=str(inside), url=remote, created_at=now)
    assert under["play_url"] == "/user/ann/files/songs/rain%20song.mp3" and under["play_source"]
    fresh = audio.fields("b", path=str(outside), url=remote, created_at=now - DAY)
    assert fresh["play_url"] == remote and fresh["play_source"]  # tried first; the kernel's bytes if it fails
    expired = audio.fields("c", path=str(outside), url=remote, created_at=now - 20 * DAY)
    assert expired["play_url"] is None and expired["play_source"]  # the service no longer keeps it: kernel only
    assert audio.fields("d", path=str(outside), url=None)["play_url"] is None
    assert audio.fields("e", path=None, url="javascript:alert(1)") == {"play_url": None, "play_source": ""}
    assert audio.fields("f", path=str(root / "gone.mp3"), url=None) == {"play_url": None, "play_source": ""}

    for name in ("a#b?c%d.mp3", "é ü.mp3"):  # names a URL would misread are quoted
        odd = root / "songs" / name
        odd.write_bytes(MP3)
        expected = "/user/ann/files/songs/" + quote(name)
        assert audio.fields(name, path=str(odd), url=None)["play_url"] == expected and "#" not in expected
    hidden = root / ".local" / "share" / "ipymusicgen" / "song.mp3"  # a server started in the home folder
    hidden.parent.mkdir(parents=True)
    hidden.write_bytes(MP3)
    assert audio.fields("h", path=str(hidden), url=None)["play_url"] is None  # Jupyter serves no hidden file

    no_api = CardAudio(page, apis=[])  # marimo, VS Code, Colab, a remote kernel: no files/ at all
    assert no_api.fields("a", path=str(inside), url=None)["play_url"] is None
    names = {under["play_source"], fresh["play_source"], expired["play_source"]}
    assert len(names) == 3 and not any(part in name for name in names for part in ("tide", "rain", "/", "."))
    assert audio.fields("a", path=str(inside), url=remote, created_at=now)["play_source"] == under["play_source"]
    assert audio.fields("a", path=str(outside), url=remote)["play_source"] != under["play_source"]


def test_the_host_has_a_files_api_only_through_the_server_that_started_this_kernel(
    files: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, inside, _ = files
    from jupyter_server import serverapp

    servers = [{"pid": 4242, "root_dir": str(root), "base_url": "/base/"}]
    monkeypatch.setattr(serverapp, "list_running_servers", lambda: iter(servers))
    monkeypatch.delenv(card_audio.ENV_SERVER_ROOT, raising=False)
    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    assert files_apis() == []  # a server runs on this machine, but this kernel is not its (marimo, VS Code)
    monkeypatch.setenv("JPY_PARENT_PID", "999")
    assert files_apis() == []
    monkeypatch.setenv("JPY_PARENT_PID", "4242")
    assert files_apis() == [FilesApi(root.resolve(), "/base/")]
    assert (
        CardAudio(AudioPage()).fields("a", path=str(inside), url=None)["play_url"]
        == "/base/files/songs/rain%20song.mp3"
    )
    monkeypatch.delenv("JPY_PARENT_PID")
    monkeypatch.setenv(card_audio.ENV_SERVER_ROOT, str(root))  # the user says so
    assert files_apis() == [FilesApi(root.resolve(), "/")]


def test_a_played_card_gets_its_archived_bytes_once_and_only_when_asked(files: tuple[Path, Path, Path]) -> None:
    _, _, outside = files
    page = AudioPage()
    audio = CardAudio(page, apis=[])
    name = audio.fields("a", path=str(outside), url="http://127.0.0.1:9/gone.mp3")["play_source"]
    audio.fields("b", path=str(outside), url=None)
    assert page.sent == []  # drawing a card sends no bytes
    assert audio.handle({"kind": "audio", "source": name})
    content, buffers = page.answer(name)
    assert buffers == [outside.read_bytes()] and content["type"] == "audio/mpeg" and content["size"] == len(buffers[0])
    assert len(page.sent) == 1  # only the card played
    assert not audio.handle({"kind": "page", "page": 2})  # not audio: the view's own intent


@pytest.mark.parametrize(
    "forged", ["", "/etc/passwd", "../../data/archive/tide.mp3", "files/songs/rain%20song.mp3", "x" * 5000]
)
def test_a_source_the_view_never_offered_or_a_path_gets_a_one_line_refusal_and_no_bytes(
    files: tuple[Path, Path, Path], forged: str
) -> None:
    _, inside, outside = files
    page = AudioPage()
    audio = CardAudio(page, apis=[])
    audio.fields("a", path=str(outside), url=None)
    assert audio.handle({"kind": "audio", "source": forged})
    content, buffers = page.answer(forged)
    assert buffers == [] and content["error"] == REFUSAL and "\n" not in content["error"]
    assert str(inside) not in str(page.sent) and len(content["source"]) <= 100


def test_non_string_sources_and_closed_views_are_refused(files: tuple[Path, Path, Path]) -> None:
    _, _, outside = files
    page = AudioPage()
    audio = CardAudio(page, apis=[])
    name = audio.fields("a", path=str(outside), url=None)["play_source"]
    for forged in ({"path": str(outside)}, ["x"], 7, None):
        assert audio.handle({"kind": "audio", "source": forged})
    assert all(not buffers and content["error"] == REFUSAL for content, buffers in page.sent)
    audio.close()  # the view is gone: its names answer no more
    page.sent.clear()
    audio.handle({"kind": "audio", "source": name})
    assert page.answer(name) == ({"kind": "audio", "source": name, "error": REFUSAL}, [])


def test_a_card_above_the_download_cap_is_refused_without_bytes(files: tuple[Path, Path, Path]) -> None:
    _, _, outside = files
    page = AudioPage()
    audio = CardAudio(page, apis=[])
    audio.channel.limit = lambda: 100
    name = audio.fields("a", path=str(outside), url=None)["play_source"]
    audio.handle({"kind": "audio", "source": name})
    content, buffers = page.answer(name)
    assert buffers == [] and "above the limit" in content["error"] and "max_download_mb" in content["error"]


def test_a_card_dict_carries_only_safe_player_sources() -> None:
    card = song_card(None, id="t", audio_url="https://cdn.example.com/a.mp3")
    assert card["play_url"] == "https://cdn.example.com/a.mp3" and card["play_source"] == ""  # a view that decides
    for bad in ("javascript:alert(1)", "//evil.example/x.mp3", "/files/a b.mp3", "/x\x00y", 7):
        assert song_card(None, id="t", play_url=bad)["play_url"] is None
    assert song_card(None, id="t", play_url="/files/a%20b.mp3")["play_url"] == "/files/a%20b.mp3"
    assert song_card(None, id="t", play_source="../etc/passwd")["play_source"] == ""
    assert song_card(None, id="t", play_source="Ab_9-x")["play_source"] == "Ab_9-x"


@pytest.fixture
def archived(sandbox: Sandbox, tmp_path: Path) -> Iterator[tuple[Library, list[str]]]:
    """Two songs of the sandbox archived outside any server root."""
    path = tmp_path / "journal.sqlite3"
    with sandbox.client(journal=Journal(path), archive=tmp_path / "outside") as client:
        ids = list(client.generate(action="custom", style="harp", title="Tide", lyrics="la").ids)
        client.wait(ids)
        archiver = archiver_of(client)
        assert archiver is not None and archiver.join(30)
    with Library(path) as library:
        yield library, ids


def test_library_cards_outside_the_root_play_from_the_kernel(
    archived: tuple[Library, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.widgets.library import LibraryView

    monkeypatch.delenv(card_audio.ENV_SERVER_ROOT, raising=False)
    library, ids = archived
    page = AudioPage()
    view = LibraryView(library)
    monkeypatch.setattr(view, "send", page.send)
    try:
        card = next(c for c in view.cards if c["id"] == ids[0])
        assert card["play_url"] == library.song(ids[0]).audio_url  # the service's URL while fresh, no files/
        assert card["play_source"] and ids[0] not in card["play_source"]
        assert "only on disk" not in card["archived_path_label"]
        view.refresh(everything=True)
        assert next(c for c in view.cards if c["id"] == ids[0])["play_source"] == card["play_source"]  # kept
        view._on_msg(view, {"kind": "audio", "source": card["play_source"]}, [])
        content, buffers = page.answer(card["play_source"])
        song = library.song(ids[0])
        assert buffers == [Path(song.archive_path or "").read_bytes()] and content["type"] == "audio/mpeg"
        view._on_msg(view, {"kind": "audio", "source": song.archive_path}, [])
        assert page.answer(song.archive_path or "")[1] == [] and view.status.startswith("1–2")
    finally:
        view.close()


def test_watcher_cards_offer_the_kernel_for_an_archived_song(
    archived: tuple[Library, list[str]], sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ipymusicgen.widgets.watcher import TaskWatcher

    library, ids = archived
    with sandbox.client(journal=False, archive=False) as client:
        watcher = TaskWatcher(ids, client=client, autostart=False)
        page = AudioPage()
        monkeypatch.setattr(watcher, "send", page.send)
        try:
            song = library.song(ids[0])
            watcher.show(client.tasks(ids[0]))
            watcher.annotate(ids[0], archived_path=song.archive_path)
            card = watcher.card(ids[0]).data()
            assert card["play_url"] == song.audio_url and card["play_source"]  # a fresh URL first
            watcher._on_msg(watcher, {"kind": "audio", "source": card["play_source"]}, [])
            assert page.answer(card["play_source"])[1] == [Path(song.archive_path or "").read_bytes()]
            watcher._on_msg(watcher, {"kind": "audio", "source": "/etc/passwd"}, [])
            assert page.answer("/etc/passwd") == ({"kind": "audio", "source": "/etc/passwd", "error": REFUSAL}, [])
        finally:
            watcher.close()

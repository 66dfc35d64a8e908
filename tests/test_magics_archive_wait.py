"""`--wait` in the magics and the CLI waits for the songs' archive too (bounded by the same timeout, only when the
client archives), so `ipymusicgen.waveform(id)` / `analyze(id)` in the next cell find the file."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import WAIT
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from ipymusicgen.archive import archiver as archiver_module
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace import session

pytestmark = pytest.mark.slow  # a sandbox's stages and a real archive: real time

RESET = dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval"))


@pytest.fixture
def ip(sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.delenv("MUSICGEN_API_KEY", raising=False)
    session.shutdown()
    session.configure(
        api_key=sandbox.api_key,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=str(tmp_path / "journal.sqlite3"),
        poll_interval=0.05,
    )
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    shell.run_line_magic("config", "MusicGen.auto_watch = False")
    yield shell
    shell.run_line_magic("unload_ext", "ipymusicgen")
    shell.config.pop("MusicGen", None)
    for name in ("songs", "peaks"):
        shell.user_ns.pop(name, None)
    session.configure(**RESET)


def _slow_archive(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Each song's archive lands `seconds` later than it would (a busy machine)."""
    real = archiver_module.archive_song
    monkeypatch.setattr(archiver_module, "archive_song", lambda *a: (time.sleep(seconds), real(*a))[1])


@pytest.mark.parametrize("delay", [0.0, 1.5])
def test_waveform_in_the_next_cell_finds_a_song_the_line_magic_waited_for(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    _slow_archive(monkeypatch, delay)
    result = ip.run_cell("songs = %musicgen --wait --timeout 60 a tune to draw")
    assert result.success, result.error_in_exec
    songs = ip.user_ns["songs"]
    assert [s.state for s in songs] == [TaskState.COMPLETE] * 2
    kept = session.current_workspace().songs
    assert all(kept.archived_path(s.id) is not None for s in songs)  # no waiting here: --wait waited
    result = ip.run_cell("import ipymusicgen\npeaks = [ipymusicgen.waveform(s.id) for s in songs]")
    assert result.success, result.error_in_exec
    assert all(p.shape[1] == 2 for p in ip.user_ns["peaks"])


def test_the_cell_magic_waits_for_the_archive_too(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_archive(monkeypatch, 1.5)
    result = ip.run_cell('%%musicgen --title "Rain" --style folk --wait --timeout 60\n[Verse]\nrain on the roof')
    assert result.success, result.error_in_exec
    ids = [s.id for s in result.result]
    found = session.current_workspace().songs
    assert all(found.archived_path(i) is not None for i in ids)  # no waiting here: --wait waited


def test_an_archive_not_done_within_the_timeout_is_said_not_waited_for(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = threading.Event()
    real = archiver_module.archive_song
    monkeypatch.setattr(archiver_module, "archive_song", lambda *a: (held.wait(WAIT), real(*a))[1])
    try:
        with capture_output() as out:
            songs = ip.run_line_magic("musicgen", "--wait --timeout 8 a held tune")
        assert [s.state for s in songs] == [TaskState.COMPLETE] * 2  # the songs are still handed back
        assert "not archived" in out.stdout
    finally:
        held.set()


def test_a_failed_archive_is_said(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> Path:
        raise OSError("disk full")

    monkeypatch.setattr(archiver_module, "archive_song", broken)
    with capture_output() as out:
        songs = ip.run_line_magic("musicgen", "--wait --timeout 60 a tune with nowhere to go")
    assert [s.state for s in songs] == [TaskState.COMPLETE] * 2
    assert "disk full" in out.stdout


def test_generate_on_the_command_line_returns_with_the_songs_archived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ipymusicgen.__main__ import main
    from ipymusicgen.config import Settings
    from ipymusicgen.song_library import Library
    from ipymusicgen.workspace.workspace import Workspace

    _slow_archive(monkeypatch, 1.5)
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={"cli-key": 100}) as service:
        settings = Settings.from_env().with_changes(
            api_key="cli-key", base_url=service.base_url, v2_base_url=service.v2_base_url, poll_interval=0.05
        )
        workspace = Workspace(settings, journal_path=tmp_path / "journal.sqlite3")
        try:
            assert (
                main(
                    ["generate", "rain", "--interval", "0.05", "--download", str(tmp_path / "songs")],
                    workspace=workspace,
                )
                == 0
            )
            with Library(workspace.path) as opened:  # no waiting here: generate waited for the archive
                ids = [song.id for song in opened.songs()]
                assert len(ids) == 2 and all(opened.archived_path(i) is not None for i in ids)
        finally:
            workspace.close()
    assert "archived" not in capsys.readouterr().out  # nothing failed, nothing to say


def test_the_batch_magic_waits_for_the_archive_too(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_archive(monkeypatch, 1.5)
    result = ip.run_cell("%%musicgen_batch --name drawn --no-watch --wait -o made\n--style folk a song to draw\n")
    assert result.success, result.error_in_exec
    made = ip.user_ns.pop("made")
    assert [r.state for r in made.rows] == ["complete"]
    result = ip.run_cell(f"import ipymusicgen\npeaks = [ipymusicgen.waveform(i) for i in {made.ids!r}]")
    assert result.success, result.error_in_exec


@pytest.mark.parametrize("measure", ["waveform", "analyze"])
def test_a_song_being_archived_is_waited_for_by_waveform_and_analyze(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, measure: str
) -> None:
    """Right after a plain `client.wait()` (no archived=True) the archive is still on its way: the call by id waits
    for it, briefly, instead of raising FileNotFoundError."""
    if measure == "analyze":
        pytest.importorskip("librosa")
    _slow_archive(monkeypatch, 1.5)
    client = session.get_client()
    ids = client.generate(action="auto", style="measured at once").ids
    client.wait(ids)
    result = getattr(session, measure)(ids[0])
    assert result is not None


def test_an_unknown_id_is_still_refused_at_once(ip: InteractiveShell) -> None:
    with pytest.raises(FileNotFoundError, match="archived"):
        session.waveform("no-such-song")


@pytest.mark.parametrize("line", ["--v2 --wait --timeout 60 a v2 tune to draw", "--wait --timeout 60 a watched tune"])
def test_v2_and_the_watcher_path_wait_for_the_archive_too(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, line: str
) -> None:
    if "watched" in line:
        ip.run_line_magic("config", "MusicGen.auto_watch = True")  # the wait goes through the watcher
    _slow_archive(monkeypatch, 1.5)
    songs = ip.run_line_magic("musicgen", line)
    assert songs and all(s.state is TaskState.COMPLETE for s in songs)
    kept = session.current_workspace().songs
    assert all(kept.archived_path(s.id) is not None for s in songs)  # no waiting here: --wait waited
    result = ip.run_cell(f"import ipymusicgen\npeaks = [ipymusicgen.waveform(i) for i in {[s.id for s in songs]!r}]")
    assert result.success, result.error_in_exec

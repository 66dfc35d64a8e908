"""What a `get_songs` costs besides its one query: songs already archived and measured are neither archived
nor measured again, however often an agent asks, in this process or in a new one over the same journal.
(Every call measured both songs again in the background: the agent server's ~14 ms a call, figure 13.)"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

import ipymusicgen.archive.archiver as archiver_module
import ipymusicgen.lab.analyst as analyst
import ipymusicgen.song_library as song_library
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.lab.analysis import available
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace.workspace import Workspace

pytestmark = pytest.mark.skipif(not available(), reason="the analysis extra is not installed")

KEY = "k-agent-work-3b8d"


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, keys={KEY: 100}, faults="") as server:
        yield server


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """Every file the background analysis measures (the archive in this test's folder)."""
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    monkeypatch.setenv("MUSICGEN_ANALYZE", "on")
    seen: list[Path] = []
    real = analyst.analyze_file

    def counting(path: Path) -> Any:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(analyst, "analyze_file", counting)
    return seen


@contextlib.contextmanager
def workspace_for(sandbox: Sandbox, tmp_path: Path) -> Iterator[Workspace]:
    """A workspace of the test's own on tmp_path's journal (a second one on the same file is a new process's);
    closed after, which stops its archiver and its analyst."""
    settings = Settings.from_env().with_changes(
        api_key=KEY,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=tmp_path / "journal.sqlite3",
        poll_interval=0.05,  # the sandbox's stages take 0.05 s: a wait need not sleep the default 5 s between reads
    )
    workspace = Workspace(settings)
    try:
        yield workspace
    finally:
        workspace.close()


def get_songs(desk: AgentDesk, ids: list[str], times: int) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        async with Client(build_server(desk)) as client:
            answers = []
            for _ in range(times):
                result = await client.call_tool("get_songs", {"task_ids": ids})
                assert not result.is_error, result.content[0].text
                answers.append(json.loads(result.content[0].text))
            return answers

    return anyio.run(run)


def settle(workspace: Workspace) -> None:
    """The archive and the analysis of the workspace have done all they were given."""
    assert workspace.analysts.join(60)


def test_repeated_get_songs_measure_nothing_again(sandbox: Sandbox, tmp_path: Path, measured: list[Path]) -> None:
    with workspace_for(sandbox, tmp_path) as workspace:
        client = workspace.client
        ids = list(client.generate(action="auto", style="asked often").ids)
        client.wait(ids, timeout=60, archived=True)
        settle(workspace)
        assert len(measured) == 2  # each song measured once, as it was archived
        answers = get_songs(AgentDesk(client), ids, 6)
        settle(workspace)
    assert all(s["state"] == "ready" and s["archived_path"] for a in answers for s in a["songs"])
    assert len(measured) == 2


def test_a_new_process_over_the_same_journal_measures_nothing_again(
    sandbox: Sandbox, tmp_path: Path, measured: list[Path]
) -> None:
    with workspace_for(sandbox, tmp_path) as first_workspace:
        first = first_workspace.client
        ids = list(first.generate(action="auto", style="asked later").ids)
        first.wait(ids, timeout=60, archived=True)
        settle(first_workspace)
    assert len(measured) == 2
    with workspace_for(sandbox, tmp_path) as second_workspace:  # its own archiver, as a new server process has
        second = second_workspace.client
        answers = get_songs(AgentDesk(second), ids, 3)
        settle(second_workspace)
    assert all(s["archived_path"] for a in answers for s in a["songs"])
    assert len(measured) == 2


@pytest.fixture
def archived_calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Every song the archive worker is given to keep (a song kept already costs lookups and an announcement)."""
    monkeypatch.setenv("MUSICGEN_ARCHIVE", str(tmp_path / "archive"))
    calls: list[str] = []
    real = archiver_module.archive_song

    def counting(downloader: Any, store: Any, directory: Path, task_id: str, swept: Any = None) -> Path:
        calls.append(task_id)
        return real(downloader, store, directory, task_id, swept)

    monkeypatch.setattr(archiver_module, "archive_song", counting)
    return calls


def drained(client: MusicClient) -> None:
    archiver = archiver_module.archiver_of(client)
    assert archiver is not None and archiver.join(60)


def test_repeated_get_songs_hand_kept_songs_to_the_archive_once(
    sandbox: Sandbox, tmp_path: Path, archived_calls: list[str]
) -> None:
    with workspace_for(sandbox, tmp_path) as workspace:
        client = workspace.client
        ids = list(client.generate(action="auto", style="kept once").ids)
        client.wait(ids, timeout=60, archived=True)
        drained(client)
        before = len(archived_calls)
        answers = get_songs(AgentDesk(client), ids, 6)
        drained(client)
    assert all(s["state"] == "ready" and s["archived_path"] for a in answers for s in a["songs"])
    assert len(archived_calls) - before <= len(ids)  # the first call's records at most, never every call's


def test_a_listening_view_still_hears_of_a_kept_song_when_it_is_polled_again(
    sandbox: Sandbox, tmp_path: Path, archived_calls: list[str]
) -> None:
    heard: list[str] = []

    def listener(task_id: str, path: Path | None, peaks: Any, error: str | None) -> None:
        heard.append(task_id)

    with workspace_for(sandbox, tmp_path) as workspace:
        client = workspace.client
        ids = list(client.generate(action="auto", style="heard again").ids)
        client.wait(ids, timeout=60, archived=True)
        get_songs(AgentDesk(client), ids, 2)
        drained(client)
        workspace.archive.events.subscribe(listener)  # a watcher opened on old songs: its cards need the word
        get_songs(AgentDesk(client), ids, 1)
        drained(client)
    assert sorted(set(heard)) == sorted(ids)


def test_a_kept_song_whose_file_was_removed_is_archived_again_on_the_next_poll(
    sandbox: Sandbox, tmp_path: Path, archived_calls: list[str]
) -> None:
    with workspace_for(sandbox, tmp_path) as workspace:
        client = workspace.client
        ids = list(client.generate(action="auto", style="removed file").ids)
        client.wait(ids, timeout=60, archived=True)
        get_songs(AgentDesk(client), ids, 2)
        drained(client)
        gone = get_songs(AgentDesk(client), ids[:1], 1)[0]["songs"][0]["archived_path"]
        Path(gone).unlink()
        answer = get_songs(AgentDesk(client), ids[:1], 1)[0]
        drained(client)
        assert Path(gone).is_file()  # kept again
    assert answer["songs"][0]["state"] == "ready"


def test_get_songs_views_decode_no_waveform(
    sandbox: Sandbox, tmp_path: Path, archived_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent is shown no peaks: a view reads the song's row, never decodes its waveform."""
    with workspace_for(sandbox, tmp_path) as workspace:
        client = workspace.client
        ids = list(client.generate(action="auto", style="no peaks").ids)
        client.wait(ids, timeout=60, archived=True)
        drained(client)
        decoded: list[object] = []
        real = song_library.unpack_peaks
        monkeypatch.setattr(song_library, "unpack_peaks", lambda blob: decoded.append(blob) or real(blob))
        answer = get_songs(AgentDesk(client), ids, 1)[0]
    assert [s["id"] for s in answer["songs"]] == ids
    assert all(s["archived_path"] and s["title"] and s["duration_s"] and "model" in s for s in answer["songs"])
    assert decoded == []

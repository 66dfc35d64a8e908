"""What a `get_songs` costs besides its one query: songs already archived and measured are neither archived
nor measured again, however often an agent asks, in this process or in a new one over the same journal.
(Every call measured both songs again in the background: the agent server's ~14 ms a call, figure 13.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

import ipymusicgen.lab.analyst as analyst
from ipymusicgen.app import build_client
from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.lab.analysis import available
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.sandbox import Sandbox

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


def client_for(sandbox: Sandbox, tmp_path: Path) -> MusicClient:
    settings = Settings.from_env().with_changes(
        api_key=KEY,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=tmp_path / "journal.sqlite3",
    )
    return build_client(settings)


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


def settle(client: MusicClient, tmp_path: Path) -> None:
    """The archive and the analysis have done all they were given."""
    assert analyst.analyst_for(tmp_path / "journal.sqlite3").join(60)


def test_repeated_get_songs_measure_nothing_again(sandbox: Sandbox, tmp_path: Path, measured: list[Path]) -> None:
    with client_for(sandbox, tmp_path) as client:
        ids = list(client.generate(action="auto", style="asked often").ids)
        client.wait(ids, timeout=60, archived=True)
        settle(client, tmp_path)
        assert len(measured) == 2  # each song measured once, as it was archived
        answers = get_songs(AgentDesk(client), ids, 6)
        settle(client, tmp_path)
    assert all(s["state"] == "ready" and s["archived_path"] for a in answers for s in a["songs"])
    assert len(measured) == 2


def test_a_new_process_over_the_same_journal_measures_nothing_again(
    sandbox: Sandbox, tmp_path: Path, measured: list[Path]
) -> None:
    with client_for(sandbox, tmp_path) as first:
        ids = list(first.generate(action="auto", style="asked later").ids)
        first.wait(ids, timeout=60, archived=True)
        settle(first, tmp_path)
    assert len(measured) == 2
    with client_for(sandbox, tmp_path) as second:  # a new client: its own archiver, as a new server process has
        answers = get_songs(AgentDesk(second), ids, 3)
        settle(second, tmp_path)
    assert all(s["archived_path"] for a in answers for s in a["songs"])
    assert len(measured) == 2

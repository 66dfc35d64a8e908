"""Ids an agent gets wrong: `wait_for_songs` and `get_songs` check every id before anything is read, answer
with one line naming the bad one, still report the good ones, and never wait (or poll) on a bad id. The
SDK's own client, in process, over a keyed sandbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client import Client

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace.workspace import build_client

KEY = "k-agent-ids-41d0"
PAID_SANDBOX = {"keys": {KEY: 100}, "stage_seconds": 0.05, "song_seconds": 2}
"""The keyed service (`conftest.paid_sandbox`, its clock running)."""
TASKS = "/v1/music/tasks"
LONG = "x" * 100_000
BAD_IDS = {
    "comma": ("a,b", "comma"),
    "empty": ("", "empty"),
    "blank": ("   ", "empty"),
    "long": (LONG, "too long"),
    "control": ("ab\x1b[31mc", "control"),
    "newline": ("ab\ncd", "control"),
}


@pytest.fixture
def desk(paid_sandbox: Sandbox, tmp_path: Path) -> Iterator[AgentDesk]:
    paid_sandbox.reset()
    settings = Settings.from_env().with_changes(
        api_key=KEY,
        base_url=paid_sandbox.base_url,
        v2_base_url=paid_sandbox.v2_base_url,
        journal_path=tmp_path / "journal.sqlite3",
        poll_interval=0.05,
    )
    client: MusicClient = build_client(settings)
    yield AgentDesk(client)
    client.close()


def call(desk: AgentDesk, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    async def run() -> types.CallToolResult:
        with anyio.fail_after(60):
            async with Client(build_server(desk)) as client:
                return await client.call_tool(tool, arguments)

    return anyio.run(run)


def ready_ids(desk: AgentDesk) -> list[str]:
    ids = list(desk.client.generate(action="auto", style="ids test").ids)
    desk.client.wait(ids, timeout=60)
    return ids


def polls(paid_sandbox: Sandbox) -> int:
    return paid_sandbox.request_counts().get(TASKS, 0)


WAIT_LONG = 300.0
"""A wait_for_songs timeout no test may reach: a call that looped on a bad id would hit the test's limit."""


@pytest.mark.parametrize("tool", ["wait_for_songs", "get_songs"])
@pytest.mark.parametrize("case", list(BAD_IDS))
def test_a_bad_id_alone_is_one_line_naming_it_and_nothing_is_read(
    desk: AgentDesk, paid_sandbox: Sandbox, tool: str, case: str
) -> None:
    bad, words = BAD_IDS[case]
    before = polls(paid_sandbox)
    arguments: dict[str, Any] = {"task_ids": [bad]}
    if tool == "wait_for_songs":
        arguments["timeout_s"] = WAIT_LONG
    result = call(desk, tool, arguments)
    assert result.is_error
    (block,) = result.content
    assert "\n" not in block.text and "task_ids[0]" in block.text and words in block.text, block.text
    assert len(block.text) < 400  # a 100 KB id is not echoed
    assert polls(paid_sandbox) == before  # nothing was queried


@pytest.mark.parametrize("tool", ["wait_for_songs", "get_songs"])
@pytest.mark.parametrize("case", ["comma", "blank", "long", "control"])
def test_a_bad_id_among_good_ones_is_named_and_the_good_ones_reported(
    desk: AgentDesk, paid_sandbox: Sandbox, tool: str, case: str
) -> None:
    good = ready_ids(desk)
    bad, words = BAD_IDS[case]
    arguments: dict[str, Any] = {"task_ids": [good[0], bad, good[1]]}
    if tool == "wait_for_songs":
        arguments["timeout_s"] = WAIT_LONG
    result = call(desk, tool, arguments)
    assert not result.is_error, result.content[0].text
    answer = json.loads(result.content[0].text)
    assert [s["id"] for s in answer["songs"]] == good and all(s["state"] == "ready" for s in answer["songs"])
    assert answer["still_running"] == [] and answer["all_finished"] is True
    assert answer["invalid_ids"] == [answer["invalid_ids"][0]] and answer["invalid_ids"][0]["index"] == 1
    assert "\n" not in answer["note"] and "task_ids[1]" in answer["note"] and words in answer["note"]
    assert "\x1b" not in result.content[0].text
    assert LONG not in result.content[0].text


def test_wait_for_songs_never_loops_on_a_bad_id(desk: AgentDesk, paid_sandbox: Sandbox) -> None:
    """Before: a comma id read as a passing failure, nothing polled, the song "writing" until the timeout."""
    good = ready_ids(desk)
    before = polls(paid_sandbox)
    result = call(desk, "wait_for_songs", {"task_ids": [f"{good[0]},{good[1]}"], "timeout_s": WAIT_LONG})
    assert result.is_error and "comma" in result.content[0].text
    assert polls(paid_sandbox) == before


def test_ids_with_spaces_around_are_read_as_the_same_id(desk: AgentDesk) -> None:
    good = ready_ids(desk)
    answer = json.loads(call(desk, "get_songs", {"task_ids": [f" {good[0]} ", good[1]]}).content[0].text)
    assert [s["id"] for s in answer["songs"]] == good and "invalid_ids" not in answer

"""The agent server reads an archived song as the page does (issue 43, item 3): a link planted where the song was
archived is not followed into a tool result or a resource, whatever it names; the song's own file still is read."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import anyio
import pytest
from mcp.client import Client

from ipymusicgen import Journal
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.song_library import Library

CANARY = "agent-canary-93be0c"


@pytest.mark.slow
def test_a_link_in_the_archive_never_reaches_the_agent(
    sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_CANARY", CANARY)
    secret = tmp_path / "private.env"
    secret.write_text(f"TOKEN={CANARY}\n")
    with sandbox.client(journal=Journal(tmp_path / "journal.sqlite3"), archive=tmp_path / "songs") as client:
        ids = list(client.generate(action="auto", style="zither, fog").ids)
        client.wait(ids, timeout=60, archived=True)
        with Library(tmp_path / "journal.sqlite3") as library:
            paths = [Path(str(library.archived_path(task_id))) for task_id in ids]
        kept = paths[1].read_bytes()
        paths[0].unlink()
        paths[0].symlink_to(secret)  # where the first song was archived, now a link out of the archive
        desk = AgentDesk(client)

        async def read() -> tuple[list[str], str, str]:
            async with Client(build_server(desk)) as agent:
                result = await agent.call_tool("get_songs", {"task_ids": ids, "include_audio": True})
                said = [getattr(block, "data", "") or getattr(block, "text", "") for block in result.content]
                first = second = ""
                try:
                    got = await agent.read_resource(f"song://{ids[0]}/audio")
                    first = json.dumps([c.model_dump(mode="json") for c in got.contents])
                except Exception as exc:  # refused: said as an error, no bytes
                    first = str(exc)
                got = await agent.read_resource(f"song://{ids[1]}/audio")
                second = json.dumps([c.model_dump(mode="json") for c in got.contents])
                return said, first, second

        said, first, second = anyio.run(read)
    everything = " ".join(map(str, said)) + first
    assert CANARY not in everything and base64.b64encode(f"TOKEN={CANARY}".encode()).decode()[:12] not in everything
    assert "no archived audio" in first
    assert base64.b64encode(kept).decode()[:40] in second  # the song's own file is read as before

"""The agent-host configs the README documents: Jupyter AI's by Jupyter AI's own model, and every one by
starting the server exactly as it says and calling a tool through the SDK's client."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from jupyter_ai_persona_manager.mcp_server_models import McpServerStdio, McpSettings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

README = Path(__file__).resolve().parents[1] / "README.md"
HOSTS = ("Jupyter AI", "Claude Desktop", "VS Code")


def readme_config(host: str) -> dict[str, Any]:
    """The JSON block right after the README's bold `**host**` line in "Use it from an agent"."""
    section = README.read_text(encoding="utf-8").split("## Use it from an agent", 1)[1].split("\n## ", 1)[0]
    found = re.search(rf"\*\*{re.escape(host)}\*\*[^\n]*\n+```json\n(.*?)\n```", section, re.S)
    assert found, f"no config for {host} in the README"
    return json.loads(found.group(1))


def launch(host: str) -> tuple[str, list[str], dict[str, str]]:
    """Command, args and env of the documented server entry, in one shape."""
    config = readme_config(host)
    if host == "Jupyter AI":
        (entry,) = McpSettings(**config).mcp_servers
        assert isinstance(entry, McpServerStdio)
        return entry.command, entry.args, {e.name: e.value for e in entry.env}
    if host == "Claude Desktop":
        entry = config["mcpServers"]["ipymusicgen"]
    else:
        entry = config["servers"]["ipymusicgen"]
        assert entry["type"] == "stdio" and {i["id"] for i in config["inputs"]} == {"musicgen-key"}
    return entry["command"], entry["args"], entry["env"]


def test_the_jupyter_ai_config_is_valid_for_jupyter_ai() -> None:
    settings = McpSettings(**readme_config("Jupyter AI"))
    (server,) = settings.mcp_servers
    assert isinstance(server, McpServerStdio) and server.args[0] == "mcp" and server.name == "ipymusicgen"
    assert [e.name for e in server.env] == ["MUSICGEN_API_KEY"]


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_each_documented_config_starts_a_server_that_answers(host: str, tmp_path: Path) -> None:
    command, args, env = launch(host)
    assert "MUSICGEN_API_KEY" in env  # the one setting a user fills in; left out here: the free sandbox
    executable = Path(sys.executable).with_name(command)  # the console script the package installs
    assert executable.is_file(), executable
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    clean["MUSICGEN_JOURNAL"] = str(tmp_path / "journal.sqlite3")
    params = StdioServerParameters(command=str(executable), args=args, env=clean, cwd=tmp_path)

    async def account() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return json.loads((await session.call_tool("account", {})).content[0].text)

    answer = anyio.run(account)
    assert answer["sandbox"] is True and answer["server_budget"] == 30

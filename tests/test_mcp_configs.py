"""The agent-host configs docs/agents.md documents (the README links it): Jupyter AI's by Jupyter AI's own
model, and every one by starting the server exactly as it says and calling a tool through the SDK's client (over
HTTP, with the token passed the way the config passes it)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import wait_until_serving
from jupyter_ai_persona_manager.mcp_server_models import McpServerHttp, McpServerStdio, McpSettings
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

AGENTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "agents.md"
HOSTS = ("Jupyter AI", "Claude Desktop", "VS Code")
HTTP_HOSTS = ("Jupyter AI over HTTP", "VS Code over HTTP")
TOKEN = "t-readme-config-token-0123456789"
PLACEHOLDERS = ("your-token", "${input:musicgen-mcp-token}")


def readme_config(host: str) -> dict[str, Any]:
    """The JSON block right after the bold `**host**` line of docs/agents.md ("Use it from an agent")."""
    section = AGENTS_PAGE.read_text(encoding="utf-8")
    found = re.search(rf"\*\*{re.escape(host)}\*\*[^\n]*\n+```json\n(.*?)\n```", section, re.S)
    assert found, f"no config for {host} in docs/agents.md"
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
    executable = Path(sys.executable).with_name(Path(command).name)  # the console script of this venv
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


def http_entry(host: str) -> tuple[str, dict[str, str]]:
    """URL and headers of the documented HTTP entry, in one shape (Jupyter AI's checked by its own model)."""
    config = readme_config(host)
    if host == "Jupyter AI over HTTP":
        (entry,) = McpSettings(**config).mcp_servers
        assert isinstance(entry, McpServerHttp) and entry.name == "ipymusicgen"
        return entry.url, {h.name: h.value for h in entry.headers}
    entry = config["servers"]["ipymusicgen"]
    assert entry["type"] == "http" and {i["id"] for i in config["inputs"]} == {"musicgen-mcp-token"}
    assert all(i["password"] for i in config["inputs"])
    return entry["url"], entry["headers"]


@pytest.mark.parametrize("host", HTTP_HOSTS)
def test_each_http_config_passes_the_token_in_a_header_not_the_url(host: str) -> None:
    url, headers = http_entry(host)
    assert url.startswith("http://127.0.0.1:") and "?" not in url and "token" not in url.lower()
    assert list(headers) == ["Authorization"]
    scheme, _, value = headers["Authorization"].partition(" ")
    assert scheme == "Bearer" and value in PLACEHOLDERS


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("host", HTTP_HOSTS)
def test_each_documented_http_config_reaches_a_server_started_with_a_token(host: str, tmp_path: Path) -> None:
    url, headers = http_entry(host)
    port = _free_port()
    url = url.replace(":8000/", f":{port}/")
    headers = {k: v.replace(PLACEHOLDERS[0], TOKEN).replace(PLACEHOLDERS[1], TOKEN) for k, v in headers.items()}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    clean.update(MUSICGEN_JOURNAL=str(tmp_path / "journal.sqlite3"), MUSICGEN_MCP_TOKEN=TOKEN)
    executable = Path(sys.executable).with_name("ipymusicgen")
    command = [str(executable), "mcp", "--http", "--port", str(port), "--budget", "30"]
    server = subprocess.Popen(command, env=clean, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_until_serving(url, server, 60, method="POST").status_code == 401  # up, closed without it

        async def account() -> dict[str, Any]:
            with anyio.fail_after(60):
                async with (
                    create_mcp_http_client(headers=headers) as http,
                    streamable_http_client(url, http_client=http) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    return json.loads((await session.call_tool("account", {})).content[0].text)

        answer = anyio.run(account)
        assert answer["sandbox"] is True and answer["server_budget"] == 30
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()

"""The agent server's own stdio transport (asyncio pipes, no thread hop per line) as a host drives it: the SDK's
client over a real process, a message far past asyncio's 64 KB line default, and the end of stdin ending it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env["MUSICGEN_JOURNAL"] = str(tmp_path / "journal.sqlite3")
    return env


def test_a_message_of_megabytes_is_read_whole(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "ipymusicgen", "mcp"], env=_env(tmp_path))
    rows = [{"action": "no-such-action", "style": "s" * 4000} for _ in range(400)]  # about 1.6 MB on one line

    async def run() -> tuple[bool, str, dict]:
        with anyio.fail_after(120):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                refused = await session.call_tool("run_batch", {"rows": rows, "name": "big"})
                after = await session.call_tool("account", {})  # the wire is still in step
                return refused.is_error, refused.content[0].text, json.loads(after.content[0].text)

    is_error, text, account = anyio.run(run)
    assert is_error and "rows" in text and "\n" not in text
    assert account["sandbox"] is True


def test_the_server_ends_when_its_stdin_closes(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "ipymusicgen", "mcp"],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write((json.dumps(hello) + "\n").encode())
    server.stdin.flush()
    answer = json.loads(server.stdout.readline())
    assert answer["id"] == 1 and "result" in answer
    server.stdin.close()
    assert server.wait(60) == 0
    assert b"Traceback" not in server.stderr.read()


@pytest.mark.parametrize("budget", [[], ["--budget", "0"]], ids=["no budget", "budget 0"])
def test_a_server_given_no_stdin_ends_at_once_without_a_traceback(tmp_path: Path, budget: list[str]) -> None:
    """/dev/null is a character device the event loop cannot watch: the server reads it the SDK's way and ends."""
    with open(os.devnull, "rb") as nothing:
        done = subprocess.run(
            [sys.executable, "-m", "ipymusicgen", "mcp", *budget],
            stdin=nothing,
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Error" not in done.stderr

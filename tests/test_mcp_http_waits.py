"""A wait an HTTP client walked away from: the agent server stops polling the service for it. A real server
process over streamable HTTP, a keyed sandbox whose songs never move on, and a raw HTTP client that reads the
first progress event of `wait_for_songs` and then drops its connection (no DELETE, as a crashed host would)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import wait_until_serving

from ipymusicgen.config import Settings
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace.workspace import build_client

pytestmark = pytest.mark.slow

KEY = "k-agent-waits-77e1"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 4}
"""The keyed service (`conftest.paid_sandbox`); `service` freezes its clock, so songs stay queued."""
TOKEN = "t-agent-waits-token-0123456789abcd"
TASKS = "/v1/music/tasks"
START_WAIT = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server_url(service: Sandbox, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(service.env(), MUSICGEN_API_KEY=KEY, MUSICGEN_JOURNAL=str(tmp_path / "journal.sqlite3"))
    env.update(MUSICGEN_POLL_INTERVAL="0.05", MUSICGEN_MIN_POLL_INTERVAL="0.01", MUSICGEN_MCP_TOKEN=TOKEN)
    command = [sys.executable, "-m", "ipymusicgen", "mcp", "--http", "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until_serving(url, process, START_WAIT)
    yield url
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def _songs(service: Sandbox, tmp_path: Path) -> list[str]:
    settings = Settings.from_env().with_changes(
        api_key=KEY, base_url=service.base_url, v2_base_url=service.v2_base_url, journal_path=tmp_path / "own.sqlite3"
    )
    with build_client(settings) as client:
        return list(client.generate(action="auto", style="left behind").ids)


HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def _rpc(method: str, params: dict, ident: int | None = None) -> dict:
    message: dict = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        message["id"] = ident
    return message


def _polls_settle(service: Sandbox, within: float = 30.0) -> bool:
    """True once a second passes with no task query (the wait stopped); False if it is still polling at `within`."""
    deadline = time.monotonic() + within
    last = service.request_counts().get(TASKS, 0)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = service.request_counts().get(TASKS, 0)
        if now == last:
            return True
        last = now
    return False


def test_a_wait_stops_polling_once_its_client_is_gone(service: Sandbox, server_url: str, tmp_path: Path) -> None:
    ids = _songs(service, tmp_path)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "gone", "version": "1"}}
    with httpx.Client(headers=HEADERS, timeout=30) as http:
        opened = http.post(server_url, json=_rpc("initialize", hello, 1))
        session = opened.headers["mcp-session-id"]
        headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        http.post(server_url, json=_rpc("notifications/initialized", {}), headers=headers)
        call = {
            "name": "wait_for_songs",
            "arguments": {"task_ids": ids, "timeout_s": 600},
            "_meta": {"progressToken": 7},
        }
        before = service.request_counts().get(TASKS, 0)
        with http.stream("POST", server_url, json=_rpc("tools/call", call, 2), headers=headers) as waiting:
            for line in waiting.iter_lines():
                if line.startswith("data:") and "notifications/progress" in line:
                    assert json.loads(line[5:])["params"]["progressToken"] == 7
                    break  # it is waiting now; the connection closes as the block ends
    assert service.request_counts().get(TASKS, 0) > before  # it did poll while the client was there
    assert _polls_settle(service), "the abandoned wait went on polling the service"


def test_a_wait_whose_client_stays_gets_its_answer(service: Sandbox, server_url: str, tmp_path: Path) -> None:
    """The other side of the check: a client still there is never taken for gone."""
    ids = _songs(service, tmp_path)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "stays", "version": "1"}}
    with httpx.Client(headers=HEADERS, timeout=60) as http:
        session = http.post(server_url, json=_rpc("initialize", hello, 1)).headers["mcp-session-id"]
        headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        http.post(server_url, json=_rpc("notifications/initialized", {}), headers=headers)
        before = service.request_counts().get(TASKS, 0)
        call = {"name": "wait_for_songs", "arguments": {"task_ids": ids, "timeout_s": 1.5}}
        answer = None
        with http.stream("POST", server_url, json=_rpc("tools/call", call, 2), headers=headers) as waiting:
            for line in waiting.iter_lines():
                if line.startswith("data:") and '"id":2' in line.replace(" ", ""):
                    answer = json.loads(line[5:])
                    break
    assert answer is not None
    result = json.loads(answer["result"]["content"][0]["text"])
    assert result["still_running"] == ids and result["all_finished"] is False
    assert service.request_counts().get(TASKS, 0) - before >= 2  # it polled through its whole timeout

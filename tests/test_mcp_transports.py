"""`python -m ipymusicgen mcp` as an agent host runs it: a real process, the SDK's `ClientSession` over stdio and
over streamable HTTP, a keyed sandbox (a paid service) in this process, and a server killed with kill -9."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from helpers import ManualClock, wait_until_serving
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from ipymusicgen.sandbox import Sandbox

pytestmark = pytest.mark.slow  # agent server processes

KEY = "k-agent-process-5d21"
GENERATE = "/v1/music/generate"
START_WAIT = 60.0
HTTP_TOKEN = "t-agent-http-token-5d21-0123456789"


@pytest.fixture
def service() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.2, song_seconds=4, keys={KEY: 100}, faults="") as server:
        yield server


def server_env(service: Sandbox | None, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(MUSICGEN_JOURNAL=str(tmp_path / "journal.sqlite3"), MUSICGEN_MIN_POLL_INTERVAL="0.01")
    env["MUSICGEN_POLL_INTERVAL"] = "0.05"
    if service is not None:
        env.update(service.env(), MUSICGEN_API_KEY=KEY)
    return env


def stdio(service: Sandbox | None, tmp_path: Path, *extra: str) -> StdioServerParameters:
    args = ["-m", "ipymusicgen", "mcp", *extra]
    return StdioServerParameters(command=sys.executable, args=args, env=server_env(service, tmp_path), cwd=tmp_path)


@asynccontextmanager
async def stdio_session(params: StdioServerParameters, answer: Any = None) -> AsyncIterator[ClientSession]:
    """The SDK's stdio transport and session, initialized."""
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, elicitation_callback=answer) as session,
    ):
        session.hello = await session.initialize()  # type: ignore[attr-defined]
        yield session


@asynccontextmanager
async def http_session(url: str, answer: Any = None) -> AsyncIterator[ClientSession]:
    """The SDK's streamable HTTP transport and session (with the server's token), initialized."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {HTTP_TOKEN}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=answer) as session,
    ):
        await session.initialize()
        yield session


async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"send": True})


async def decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


def data(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _bounded(body: Any) -> None:
    """Run `body`, failing (not hanging) if a dead server leaves its call waiting."""
    with anyio.fail_after(START_WAIT):
        await body()


def servers_running() -> list[psutil.Process]:
    """The agent servers this test started (children of this process)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "ipymusicgen" in child.cmdline() and "mcp" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def test_stdio_asks_pays_once_and_reports_progress(service: Sandbox, tmp_path: Path) -> None:
    asked: list[str] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def ask(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return await accept(context, params)

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async def run() -> dict[str, Any]:
        async with stdio_session(stdio(service, tmp_path), ask) as session:
            assert "real music service" in (session.hello.instructions or "")
            made = data(await session.call_tool("generate_song", {"style": "tram bells", "idempotency_key": "a"}))
            args = {"task_ids": made["task_ids"], "timeout_s": 60}
            return data(await session.call_tool("wait_for_songs", args, progress_callback=on_progress))

    waited = anyio.run(run)
    assert waited["all_finished"] and len(waited["songs"]) == 2
    assert len(asked) == 1 and asked[0].startswith("Pay about 3 credits (the key has 100 credits left)")
    assert progress and progress[-1][0] == progress[-1][1] == 6
    assert service.request_counts()[GENERATE] == 1
    log = json.dumps(progress) + json.dumps(waited)
    assert KEY not in log


def test_with_no_key_it_runs_on_the_embedded_sandbox_and_says_so(tmp_path: Path) -> None:
    async def run() -> tuple[str, dict[str, Any]]:
        async with stdio_session(stdio(None, tmp_path)) as session:  # no elicitation: the sandbox costs nothing
            made = data(await session.call_tool("generate_song", {"style": "free demo"}))
            return session.hello.instructions or "", made

    instructions, made = anyio.run(run)
    assert "embedded sandbox" in instructions and "cost nothing" in instructions
    assert made["state"] == "sent" and len(made["task_ids"]) == 2


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def http_server(service: Sandbox, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "ipymusicgen", "mcp", "--http", "--port", str(port), "--budget", "4"]
    env = {**server_env(service, tmp_path), "MUSICGEN_MCP_TOKEN": HTTP_TOKEN}
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until_serving(url, process, START_WAIT, said=lambda: process.stderr.read().decode())
    yield url
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()


def test_streamable_http_declines_refuses_over_budget_and_pays_with_consent(http_server: str, service: Sandbox) -> None:
    async def session_call(tool: str, args: dict[str, Any], answer: Any) -> types.CallToolResult:
        async with http_session(http_server, answer) as session:
            return await session.call_tool(tool, args)

    declined = data(anyio.run(session_call, "generate_song", {"style": "x"}, decline))
    assert declined["state"] == "declined" and service.request_counts().get(GENERATE, 0) == 0
    sent = data(anyio.run(session_call, "generate_song", {"style": "x"}, accept))
    assert sent["state"] == "sent" and service.request_counts()[GENERATE] == 1
    over = anyio.run(session_call, "generate_song", {"style": "y"}, accept)
    assert over.is_error and re.search(
        r"budget: this server may spend \d more credit\(s\) of its 4", over.content[0].text
    )
    bad = anyio.run(session_call, "generate_song_v2", {"prompt": ""}, accept)
    assert bad.is_error and "prompt" in bad.content[0].text and "\n" not in bad.content[0].text
    assert service.request_counts()[GENERATE] == 1 and service.request_counts().get("/v2/submit", 0) == 0


def test_a_server_killed_mid_wait_comes_back_with_the_same_songs_paid_once(
    service: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(service.state.stage_seconds)
    monkeypatch.setattr(service.state, "clock", clock)  # the songs wait until the test moves them on
    args = {"action": "custom", "style": "night ferry", "title": "Ferry", "lyrics": "la", "idempotency_key": "ferry"}

    first_ids: list[str] = []
    killed: list[int] = []

    async def first_life() -> None:
        async with stdio_session(stdio(service, tmp_path), accept) as session:
            first_ids.extend(data(await session.call_tool("generate_song", args))["task_ids"])

            async def kill_on_progress(done: float, total: float | None, message: str | None) -> None:
                if not killed:  # it is waiting now: it told us the songs' states
                    (server,) = servers_running()
                    os.kill(server.pid, signal.SIGKILL)
                    killed.append(server.pid)

            waiting = {"task_ids": first_ids, "timeout_s": 120}
            await session.call_tool("wait_for_songs", waiting, progress_callback=kill_on_progress)

    with pytest.raises(BaseException):  # noqa: B017 - the call dies with its server (a transport error or group)
        anyio.run(lambda: _bounded(first_life))
    assert len(first_ids) == 2 and len(killed) == 1
    psutil.wait_procs([p for p in servers_running()], timeout=10)
    assert servers_running() == []
    clock.stages(10)

    async def second_life() -> tuple[dict[str, Any], dict[str, Any]]:
        async with stdio_session(stdio(service, tmp_path), accept) as session:
            again = data(await session.call_tool("generate_song", args))
            waiting = {"task_ids": again["task_ids"], "timeout_s": 60}
            return again, data(await session.call_tool("wait_for_songs", waiting))

    again, waited = anyio.run(second_life)
    assert again["state"] == "replayed" and again["task_ids"] == first_ids
    assert service.request_counts()[GENERATE] == 1  # one paid call across both lives
    assert waited["all_finished"] and {s["title"] for s in waited["songs"]} == {"Ferry"}


def test_the_demo_script_drives_the_server_with_the_sdks_client(tmp_path: Path) -> None:
    env = server_env(None, tmp_path)
    env.update(MUSICGEN_SANDBOX_STAGE_SECONDS="0.2", MUSICGEN_SANDBOX_SONG_SECONDS="4")
    script = Path(__file__).resolve().parents[1] / "docs" / "agent_demo.py"
    done = subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "generate_song, generate_song_v2" in done.stdout and "(about 3 credits, sent)" in done.stdout
    assert done.stdout.count("  ready: ") == 2 and "credits left:" in done.stdout

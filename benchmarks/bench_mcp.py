"""Figure 13: a `get_songs` round trip through the agent server vs the same `client.tasks` call direct.

Both sides read the same two finished tasks from one keyed sandbox in this process. The direct side is
`MusicClient.tasks(ids)`; the server side is the SDK's own `ClientSession` calling `get_songs` on
`python -m ipymusicgen mcp` over stdio (a real process: JSON-RPC framing, pipes, the tool's thread hop,
the library lookup and the result's redaction), and on the server in this process (the SDK's direct
dispatch: the server's own work without the pipes). Sides alternate in rounds; medians are compared. The
details add `stdio_floor`: a tool that refuses at once over the same stdio session (the SDK's own round trip,
no service call), and `stdio_search`: `search_library` answering the same two songs over it (the SDK's round
trip carrying get_songs' payload: lyrics twice, as text and as structured content, checked against the
outputSchema on both ends; no service call), so what get_songs adds over them and over the direct call can be
read apart. `bound_floor` and `bound_search` are the ratios get_songs would have if it cost nothing but that
round trip plus the direct call (`floor + direct` over `direct`): figure 13's ratio cannot go below them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client import Client
from mcp.client.stdio import stdio_client

from ipymusicgen.config import Settings
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.workspace.workspace import build_client

from ._common import Row, child_env, median, ratio, spread

KEY = "k-bench-agent-01"


def _direct(client: Any, ids: list[str], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        client.tasks(ids)
    return (time.perf_counter() - start) / count


async def _floor(session: Any, count: int) -> float:
    """The SDK's own round trip with the server's own framing, and no service call: a tool refusing at once."""
    start = time.perf_counter()
    for _ in range(count):
        await session.call_tool("batch_status", {"name": "no such batch"})
    return (time.perf_counter() - start) / count


async def _search(session: Any, count: int) -> float:
    """The SDK's round trip carrying the same two songs (the library's views), no service call."""
    start = time.perf_counter()
    for _ in range(count):
        result = await session.call_tool("search_library", {"limit": 2})
        if result.is_error:
            raise RuntimeError(result.content[0].text)
    return (time.perf_counter() - start) / count


async def _through(session: Any, ids: list[str], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        result = await session.call_tool("get_songs", {"task_ids": ids})
        if result.is_error:
            raise RuntimeError(result.content[0].text)
    return (time.perf_counter() - start) / count


def run(quick: bool = False) -> list[Row]:
    rounds, count = (3, 5) if quick else (9, 30)
    with (
        Sandbox(stage_seconds=0.05, song_seconds=2, keys={KEY: 1000}, faults="") as sandbox,
        tempfile.TemporaryDirectory() as tmp,
    ):
        journal = Path(tmp) / "journal.sqlite3"
        settings = Settings.from_env().with_changes(
            api_key=KEY, base_url=sandbox.base_url, v2_base_url=sandbox.v2_base_url, journal_path=journal
        )
        with build_client(settings) as client:
            ids = list(client.generate(action="auto", style="bench").ids)
            client.wait(ids, timeout=60)
            desk = AgentDesk(client)
            env = child_env({**sandbox.env(), "MUSICGEN_API_KEY": KEY, "MUSICGEN_JOURNAL": str(journal)})
            env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
            params = StdioServerParameters(command=sys.executable, args=["-m", "ipymusicgen", "mcp"], env=env)

            async def measure() -> dict[str, list[float]]:
                samples: dict[str, list[float]] = {
                    "direct": [], "stdio": [], "in_process": [], "stdio_floor": [], "stdio_search": []
                }  # fmt: skip
                async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    async with Client(build_server(desk)) as local:
                        await _through(session, ids, 2)
                        await _search(session, 2)
                        await _through(local, ids, 2)
                        for index in range(rounds):
                            sides = ["direct", "stdio", "in_process", "stdio_floor", "stdio_search"]
                            for side in sides if index % 2 == 0 else reversed(sides):
                                if side == "direct":
                                    value = await anyio.to_thread.run_sync(lambda: _direct(client, ids, count))
                                elif side == "stdio":
                                    value = await _through(session, ids, count)
                                elif side == "stdio_floor":
                                    value = await _floor(session, count)
                                elif side == "stdio_search":
                                    value = await _search(session, count)
                                else:
                                    value = await _through(local, ids, count)
                                samples[side].append(value)
                return samples

            samples = anyio.run(measure)
    direct, stdio, local = (median(samples[k]) for k in ("direct", "stdio", "in_process"))
    details = {name: spread([v * 1e3 for v in values]) for name, values in samples.items()}
    for name in ("floor", "search"):  # the least figure 13 could be: that round trip plus the direct call
        details[f"bound_{name}"] = round(ratio(median(samples[f"stdio_{name}"]) + direct, direct), 2)
    details["ratio_of_fastest"] = round(ratio(min(samples["stdio"]), min(samples["direct"])), 2)
    details["calls_per_sample"] = count
    details["cpus"] = os.cpu_count()
    return [
        Row(
            13,
            "get_songs through the server (stdio process) vs client.tasks direct",
            round(stdio * 1e3, 2),
            "ms/call",
            baseline=round(direct * 1e3, 2),
            ratio=round(ratio(stdio, direct), 2),
            details=details,
        ),
        Row(
            13,
            "get_songs through the server (in process) vs client.tasks direct",
            round(local * 1e3, 2),
            "ms/call",
            baseline=round(direct * 1e3, 2),
            ratio=round(ratio(local, direct), 2),
        ),
    ]

"""Drive the agent server with the MCP SDK's own client: what an agent host does, in 40 lines.

    .venv/bin/python docs/agent_demo.py

It starts `python -m ipymusicgen mcp` over stdio (on the free embedded sandbox unless MUSICGEN_API_KEY
is set), makes a song with an idempotency key, follows it with progress notifications, and lists it.
With a real key, the consent question is printed and answered "yes" here: a real host asks its user.
"""

from __future__ import annotations

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

SERVER = StdioServerParameters(command=sys.executable, args=["-m", "ipymusicgen", "mcp", "--budget", "10"])


async def ask_user(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
    print(f"server asks: {params.message} -> yes")
    return types.ElicitResult(action="accept", content={"send": True})


async def show_progress(done: float, total: float | None, message: str | None) -> None:
    print(f"  progress {done:g}/{total:g}: {message}")


async def main() -> None:
    async with stdio_client(SERVER) as (read, write), ClientSession(read, write, elicitation_callback=ask_user) as s:
        hello = await s.initialize()
        print(f"server: {hello.instructions}")
        print("tools:", ", ".join(tool.name for tool in (await s.list_tools()).tools))
        made = await s.call_tool("generate_song", {"style": "sea shanty, accordion", "idempotency_key": "demo-1"})
        started = json.loads(made.content[0].text)
        print(f"started: {started['task_ids']} (about {started['credits_estimate']} credits, {started['state']})")
        waited = await s.call_tool(
            "wait_for_songs", {"task_ids": started["task_ids"], "timeout_s": 120}, progress_callback=show_progress
        )
        for song in json.loads(waited.content[0].text)["songs"]:
            print(f"  {song['state']}: {song['title']!r} {song['duration_s']} s {song['audio_url']}")
        account = json.loads((await s.call_tool("account", {})).content[0].text)
        print(f"credits left: {account['credits_left']}, this server spent about {account['server_spent_estimate']}")


if __name__ == "__main__":
    anyio.run(main)

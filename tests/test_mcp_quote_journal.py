"""A consent quote is journalled with its attempt (issue 40): the quote is written when it is made, the attempt row
names the quote that paid it before the call goes out, and a server restarted between the user's Confirm and the
agent's wait still follows the songs, answers a confirm of the old quote with what it paid (nothing is sent again),
and re-issuing the call replays the first ids. Through the official SDK's client against a keyed sandbox."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from mcp import types
from mcp.client import Client, advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage.agent_quotes import attempt_quote, quote_record

KEY = "k-quote-journal-2b9d"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
GENERATE = "/v1/music/generate"
APPS = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})


def in_thread(body: Callable[[], Any]) -> Any:
    """Run an async body on an event loop of its own thread: a worker whose Chromium (Playwright's sync API) is live
    has a running loop on the main thread, where anyio.run would refuse."""
    with anyio.from_thread.start_blocking_portal() as portal:
        return portal.call(body)


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


def refused(result: types.CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def on_card(desk: AgentDesk, *calls: tuple[str, dict[str, Any]]) -> list[types.CallToolResult]:
    """Calls on one Apps host connection to a new server over `desk`; "it" as a quote id is the first answer's."""

    async def body() -> list[types.CallToolResult]:
        results: list[types.CallToolResult] = []
        async with Client(build_server(desk), mode="legacy", extensions=[APPS]) as client:
            for name, arguments in calls:
                if arguments.get("quote_id") == "it":
                    arguments = {**arguments, "quote_id": ok(results[0])["quote"]["id"]}
                results.append(await client.call_tool(name, arguments))
        return results

    return in_thread(body)


def test_a_quote_is_journalled_when_made_and_its_attempt_row_names_it_when_paid(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    desk = AgentDesk(paid_clients())
    quoted, paid = on_card(
        desk, ("generate_song", {"style": "kept", "idempotency_key": "q-1"}), ("confirm_quote", {"quote_id": "it"})
    )
    quote = ok(quoted)["quote"]
    record = quote_record(desk.store, quote["id"])
    assert record is not None and record.attempt == "agent:q-1" and record.tool == "generate_song"
    assert record.state == "confirmed" and record.confirmed_at is not None
    assert record.price["amount"] == 3 and record.expires_at > record.created_at
    assert ok(paid)["state"] == "sent" and attempt_quote(desk.store, "agent:q-1") == quote["id"]
    assert desk.store.rows("agent:q-1")[0].state == "submitted"


def test_an_unconfirmed_quote_is_journalled_as_quoted(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    desk = AgentDesk(paid_clients())
    (quoted,) = on_card(desk, ("run_batch", {"rows": [{"style": "a"}], "name": "nightly"}))
    record = quote_record(desk.store, ok(quoted)["quote"]["id"])
    assert record is not None and record.state == "quoted" and record.tool == "run_batch"
    assert service.request_counts().get(GENERATE, 0) == 0


def test_a_restart_between_confirm_and_wait_loses_nothing_and_pays_once(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """The first server quotes and the user confirms; it stops (its client closed); a new server on the same journal
    (new quotes, new connections) follows the songs, says what the old quote paid, and replays a re-issue."""
    first = AgentDesk(paid_clients())
    quoted, paid = on_card(first, ("generate_song", {"style": "restart"}), ("confirm_quote", {"quote_id": "it"}))
    quote, ids = ok(quoted)["quote"], ok(paid)["task_ids"]
    first.close()
    first.client.close()

    service.clock.stages(10)  # type: ignore[attr-defined]
    after = AgentDesk(paid_clients())
    waited, old, again, unfinished = on_card(
        after,
        ("wait_for_songs", {"task_ids": ids, "timeout_s": 30}),
        ("confirm_quote", {"quote_id": quote["id"]}),
        ("generate_song", {"style": "restart"}),
        ("unfinished", {}),
    )
    assert [s["state"] for s in ok(waited)["songs"]] == ["ready", "ready"]
    text = refused(old)
    assert "confirmed before this server restarted" in text and "nothing was sent again" in text
    assert all(i in text for i in ids)
    assert ok(again)["state"] == "replayed" and ok(again)["task_ids"] == ids and "quote" not in ok(again)
    assert ok(unfinished)["unknown_attempts"] == []
    assert service.request_counts()[GENERATE] == 1


def test_a_quote_never_confirmed_before_a_restart_says_so(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    first = AgentDesk(paid_clients())
    (quoted,) = on_card(first, ("generate_song_v2", {"prompt": "left waiting"}))
    qid = ok(quoted)["quote"]["id"]
    (late,) = on_card(AgentDesk(paid_clients()), ("confirm_quote", {"quote_id": qid}))
    text = refused(late)
    assert (
        "never confirmed" in text and "nothing was sent" in text and service.request_counts().get("/v2/submit", 0) == 0
    )


@pytest.mark.parametrize("forged", ["q-0123456789ab-AAAAAAAAAAAAAAAAAAAAAAAA", "q-' OR 1=1 --", "q-%" * 10])
def test_a_made_up_quote_id_finds_nothing_in_the_journal_either(
    paid_clients: Callable[..., MusicClient], service: Sandbox, forged: str
) -> None:
    desk = AgentDesk(paid_clients())
    on_card(desk, ("generate_song", {"style": "real"}), ("confirm_quote", {"quote_id": "it"}))
    (result,) = on_card(AgentDesk(paid_clients()), ("confirm_quote", {"quote_id": forged}))
    text = refused(result)
    assert "confirmed before" not in text and "nothing was sent" in text and service.request_counts()[GENERATE] == 1


@pytest.mark.slow
def test_a_real_server_restart_between_confirm_and_wait(service: Sandbox, tmp_path: Path) -> None:
    """Two server processes over stdio on one journal: the first quotes and is confirmed, then ends; the second
    follows the songs, answers the old quote from the journal (another process's id), and sends nothing again."""
    from mcp import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(service.env(), MUSICGEN_API_KEY=KEY, MUSICGEN_JOURNAL=str(tmp_path / "journal.sqlite3"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "ipymusicgen", "mcp"], env=env, cwd=tmp_path)

    async def first() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(params, mode="legacy", extensions=[APPS]) as client:
            quote = ok(await client.call_tool("generate_song", {"style": "two processes"}))["quote"]
            return quote, ok(await client.call_tool("confirm_quote", {"quote_id": quote["id"]}))

    quote, paid = in_thread(first)
    service.clock.stages(10)  # type: ignore[attr-defined]

    async def second() -> tuple[types.CallToolResult, ...]:
        async with Client(params, mode="legacy", extensions=[APPS]) as client:
            waited = await client.call_tool("wait_for_songs", {"task_ids": paid["task_ids"], "timeout_s": 60})
            return waited, await client.call_tool("confirm_quote", {"quote_id": quote["id"]})

    waited, old = in_thread(second)
    assert [s["state"] for s in ok(waited)["songs"]] == ["ready", "ready"]
    assert "confirmed before this server restarted" in refused(old) and all(i in refused(old) for i in paid["task_ids"])
    assert service.request_counts()[GENERATE] == 1


def test_a_kill_between_the_press_and_the_send_says_nothing_was_sent_and_asks_again(
    paid_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    """kill -9 right after the press is journalled (`note_confirmed`, written first) and before the attempt is marked
    sending: the journal holds a confirmed quote whose attempt was never sent. After the restart the old quote must
    say that plainly (nothing sent, nothing charged: ask again), not point at songs that do not exist; a re-issue is
    quoted afresh and nothing is sent until it is confirmed."""
    from ipymusicgen.storage.agent_quotes import note_confirmed

    first = AgentDesk(paid_clients())
    (quoted,) = on_card(first, ("generate_song", {"style": "killed"}))
    qid = ok(quoted)["quote"]["id"]
    assert note_confirmed(first.store, qid)  # the press's journal write; the process dies before sending
    first.close()
    first.client.close()

    old, again, unfinished = on_card(
        AgentDesk(paid_clients()),
        ("confirm_quote", {"quote_id": qid}),
        ("generate_song", {"style": "killed"}),
        ("unfinished", {}),
    )
    text = refused(old)
    assert "never sent" in text and "ask again" in text and "unfinished" not in text, text
    assert ok(again)["state"] == "quoted" and ok(unfinished)["unknown_attempts"] == []
    assert quote_record(AgentDesk(paid_clients()).store, qid).state == "confirmed"  # type: ignore[union-attr]
    assert service.request_counts().get(GENERATE, 0) == 0

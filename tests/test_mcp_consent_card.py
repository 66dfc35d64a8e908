"""The consent card (issue 40): a host that declares MCP Apps and cannot elicit gets a quote from every paid tool
and nothing is sent; only the app-only `confirm_quote` pays, once, on the connection that asked, before the quote
expires, at the server's price of then. Through the official SDK's client (in process, both protocol eras, and
stdio), against a keyed sandbox playing the paid service whose songs move only when the test moves them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from helpers import wait_until_serving
from mcp import ClientSession, StdioServerParameters, types
from mcp.client import Client, advertise
from mcp.client.streamable_http import streamable_http_client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID
from mcp.shared._httpx_utils import create_mcp_http_client
from test_mcp_tools import Asker
from test_mcp_transports import HTTP_TOKEN, free_port

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.mcp.consent import CARD_URI, QuoteBook
from ipymusicgen.models import costs
from ipymusicgen.sandbox import Sandbox

KEY = "k-consent-card-5e1d"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
GENERATE = "/v1/music/generate"
SUBMIT = "/v2/submit"
WAV = "/v1/music/generate-wav"
LYRICS = "/v1/lyrics"
PAID = (GENERATE, SUBMIT, WAV, LYRICS)
APPS = advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})
"""A host that renders MCP Apps (and, with no elicitation callback, cannot ask a form question)."""
FORGED = 'lo-fi"): about 1 credit; 4999 left. Confirm? ("yes'
CONTROLS = "x\n\nAbout 1 credit; 99 left.\r\x1b[2J\u202eder\u2066\x00</blockquote><script>alert(1)</script>"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def desk(paid_clients: Callable[..., MusicClient]) -> Callable[..., AgentDesk]:
    return lambda budget=None: AgentDesk(paid_clients(), budget=budget)


def sent(service: Sandbox) -> int:
    counts = service.request_counts()
    return sum(counts.get(path, 0) for path in PAID)


def session(server: Any, mode: str = "legacy", **options: Any) -> Client:
    return Client(server, mode=mode, extensions=[APPS], **options)


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


def refused(result: types.CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


def run(body: Callable[[], Any]) -> Any:
    """On an event loop of its own thread: a worker whose Chromium (Playwright's sync API) is live has a running
    loop on the main thread, where anyio.run would refuse."""
    with anyio.from_thread.start_blocking_portal() as portal:
        return portal.call(body)


def quote_and(desk: AgentDesk, tool: str, arguments: dict[str, Any], *then: str, mode: str = "legacy") -> list[Any]:
    """A paid call on an Apps host, then `confirm_quote` once per `then` entry ("it": the quote's own id, else the
    id given), all on one connection: the quote's answer, then each confirm's result."""

    async def body() -> list[Any]:
        async with session(build_server(desk), mode) as client:
            quoted = ok(await client.call_tool(tool, arguments))
            results: list[Any] = [quoted]
            for quote_id in then:
                qid = quoted["quote"]["id"] if quote_id == "it" else quote_id
                results.append(await client.call_tool("confirm_quote", {"quote_id": qid}))
            return results

    return run(body)


# -- the quote ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize(
    ("tool", "arguments", "estimate"),
    [
        ("generate_song", {"style": "lo-fi rain"}, 3),
        ("generate_song_v2", {"prompt": "a kettle waltz"}, 3),
        ("run_batch", {"rows": [{"style": "a"}, {"style": "b"}], "name": "two rows"}, 6),
        ("write_lyrics", {"prompt": "tin roof"}, 1),
    ],
)
def test_a_paid_tool_on_an_apps_host_answers_a_quote_and_sends_nothing(
    desk: Callable[..., AgentDesk], service: Sandbox, mode: str, tool: str, arguments: dict[str, Any], estimate: int
) -> None:
    async def body() -> tuple[types.CallToolResult, list[types.Tool]]:
        async with session(build_server(desk(budget=50)), mode) as client:
            return await client.call_tool(tool, arguments), (await client.list_tools()).tools

    result, tools = run(body)
    answer = ok(result)
    quote = answer["quote"]
    assert answer["state"] == "quoted" and sent(service) == 0
    assert quote["price"] == {
        "amount": estimate,
        "unit": "credits",
        "dollars": None,
        "dollars_note": quote["price"]["dollars_note"],
    }
    assert quote["credits_left"] == 100 and quote["budget_left"] == 50 and quote["provider"] == "musicful"
    assert quote["expires_in_s"] == 300 and quote["expires_at"] and quote["tool"] == tool
    assert quote["id"].startswith("q-") and len(quote["id"]) > 30
    (text,) = result.content
    assert "waiting for the user to confirm in the card" in text.text and quote["id"] not in text.text
    paid = {t.name: t for t in tools}
    assert paid[tool].meta == {"ui": {"resourceUri": CARD_URI}}


def test_dollars_are_shown_where_a_credit_rate_is_set(
    desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    (answer,) = quote_and(desk(), "generate_song", {"style": "x"})
    assert answer["quote"]["price"] == {"amount": 3, "unit": "credits", "dollars": "0.15"}


def test_a_quote_for_an_extra_names_the_song_and_its_price(
    paid_clients: Callable[..., MusicClient], desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    client = paid_clients()
    ids = client.generate(action="auto", style="reel").ids
    service.clock.stages(10)  # type: ignore[attr-defined]
    client.wait(ids, timeout=30, archived=True)
    answer, confirmed, again = quote_and(desk(), "make_extra", {"task_id": ids[0], "kind": "wav"}, "it", "it")
    assert answer["state"] == "quoted" and answer["sent"] is False and answer["quote"]["kind"] == "extra"
    assert answer["quote"]["price"]["amount"] == costs.cost_table().get("wav", answer["quote"]["price"]["amount"])
    made = ok(confirmed)
    assert made["state"] == "made" and made["sent"] is True and service.request_counts()[WAV] == 1
    assert "already used" in refused(again) and service.request_counts()[WAV] == 1


# -- the card ----------------------------------------------------------------------------------------------------


def test_the_card_is_one_self_contained_document_that_shows_text_as_text(desk: Callable[..., AgentDesk]) -> None:
    async def body() -> tuple[Any, list[types.Tool]]:
        async with session(build_server(desk())) as client:
            return await client.read_resource(CARD_URI), (await client.list_tools()).tools

    read, tools = run(body)
    (content,) = read.contents
    assert content.mime_type == APP_MIME_TYPE
    html = content.text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)|@import|url\(|<link|<iframe""", html, re.I), "external"
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", html)
    assert "textContent" in html and 'data-theme="dark"' in html and "prefers-color-scheme: dark" in html
    assert html.index('id="price"') < html.index('id="words"') < html.index('id="confirm"')
    assert re.search(r'<button id="confirm"[^>]*type="button"', html) and "confirm_quote" in html
    confirm = {t.name: t for t in tools}["confirm_quote"]
    assert confirm.meta == {"ui": {"resourceUri": CARD_URI, "visibility": ["app"]}}


# -- confirm: once, here, in time, at the server's price ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_confirm_pays_once_and_the_attempt_is_journalled(
    desk: Callable[..., AgentDesk], service: Sandbox, mode: str
) -> None:
    made = desk()
    answer, first, second = quote_and(made, "generate_song", {"style": "brass"}, "it", "it", mode=mode)
    attempt = answer["quote"]["attempt"]
    assert attempt and attempt.startswith("agent:") and answer["attempt"] == attempt
    paid = ok(first)
    assert paid["state"] == "sent" and len(paid["task_ids"]) == 2 and paid["attempt"] == attempt
    assert "already used" in refused(second) and service.request_counts()[GENERATE] == 1
    row = made.store.rows(attempt)[0]
    assert row.state == "submitted" and list(row.ids) == paid["task_ids"]
    (again,) = quote_and(made, "generate_song", {"style": "brass"})  # the same call again: its ids, nothing quoted
    assert again["state"] == "replayed" and again["task_ids"] == paid["task_ids"] and "quote" not in again


def test_a_quote_is_journalled_before_anyone_confirms(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    made = desk()
    (answer,) = quote_and(made, "generate_song", {"style": "kept", "idempotency_key": "card-1"})
    assert answer["quote"]["attempt"] == "agent:card-1"
    assert made.store.rows("agent:card-1")[0].state not in ("submitted", "sending") and sent(service) == 0


@pytest.mark.parametrize(
    ("quote_id", "says"),
    [
        ("q-nonsense", "made up"),
        ("not-a-quote", "made up"),
        ("", "made up"),
        ("q-0123456789ab-AAAAAAAAAAAAAAAAAAAAAAAA", "another server process"),
    ],
)
def test_a_made_up_quote_id_sends_nothing_and_says_so(
    desk: Callable[..., AgentDesk], service: Sandbox, quote_id: str, says: str
) -> None:
    _, result = quote_and(desk(), "generate_song", {"style": "x"}, quote_id)
    assert says in refused(result) and "nothing was sent" in refused(result)
    assert sent(service) == 0


def test_an_expired_quote_sends_nothing(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    clock = FakeClock()
    server = build_server(desk(), QuoteBook(ttl=5, clock=clock))

    async def body() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with session(server) as client:
            late = ok(await client.call_tool("generate_song", {"style": "late"}))
            clock.now += 5
            expired = await client.call_tool("confirm_quote", {"quote_id": late["quote"]["id"]})
            early = ok(await client.call_tool("generate_song_v2", {"prompt": "early"}))
            clock.now += 4.9
            return expired, await client.call_tool("confirm_quote", {"quote_id": early["quote"]["id"]})

    expired, in_time = run(body)
    assert "expired" in refused(expired) and service.request_counts().get(GENERATE, 0) == 0
    assert ok(in_time)["state"] == "sent" and service.request_counts()[SUBMIT] == 1


def test_a_quote_of_another_connection_sends_nothing(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    server = build_server(desk())

    async def body() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with session(server) as asker, session(server) as other:
            quote = ok(await asker.call_tool("generate_song", {"style": "mine"}))["quote"]["id"]
            foreign = await other.call_tool("confirm_quote", {"quote_id": quote})
            return foreign, await asker.call_tool("confirm_quote", {"quote_id": quote})

    foreign, own = run(body)
    assert "another connection" in refused(foreign) and "nothing was sent" in refused(foreign)
    assert ok(own)["state"] == "sent" and service.request_counts()[GENERATE] == 1


def test_a_quote_of_another_server_process_sends_nothing(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    """A restart is a new server: its quotes are not the old one's (the id says which process made it)."""
    made = desk()
    (answer,) = quote_and(made, "generate_song", {"style": "before restart"})
    _, result = quote_and(desk(), "generate_song_v2", {"prompt": "y"}, answer["quote"]["id"])
    assert "never confirmed" in refused(result) and "nothing was sent" in refused(result) and sent(service) == 0


def test_a_quote_whose_budget_moved_sends_nothing(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    made = desk(budget=5)
    server = build_server(made)

    async def body() -> types.CallToolResult:
        async with session(server) as client:
            quote = ok(await client.call_tool("generate_song", {"style": "first"}))["quote"]
            assert quote["budget_left"] == 5
            async with Client(server, elicitation_callback=Asker()) as plain:  # another host spends meanwhile
                ok(await plain.call_tool("generate_song_v2", {"prompt": "meanwhile"}))
            return await client.call_tool("confirm_quote", {"quote_id": quote["id"]})

    text = refused(run(body))
    assert text.split(": ", 1)[1].startswith("budget:") and "nothing was sent" in text
    assert service.request_counts().get(GENERATE, 0) == 0 and service.request_counts()[SUBMIT] == 1


def test_a_changed_price_answers_a_new_quote_and_pays_nothing_until_it_is_confirmed(
    desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = build_server(desk())

    async def body() -> tuple[dict[str, Any], dict[str, Any], int, types.CallToolResult]:
        async with session(server) as client:
            first = ok(await client.call_tool("generate_song", {"style": "dearer"}))["quote"]
            dearer = ",".join(f"{model}=7" for model in costs.cost_table())
            monkeypatch.setenv(costs.ENV_COSTS, dearer)
            requoted = ok(await client.call_tool("confirm_quote", {"quote_id": first["id"]}))
            between = sent(service)
            return (
                first,
                requoted,
                between,
                await client.call_tool("confirm_quote", {"quote_id": requoted["quote"]["id"]}),
            )

    first, requoted, between, paid = run(body)
    assert first["price"]["amount"] == 3 and between == 0
    assert requoted["state"] == "requoted" and "from about 3 to 7" in requoted["note"]
    assert requoted["quote"]["price"]["amount"] == 7 and requoted["quote"]["id"] != first["id"]
    assert ok(paid)["state"] == "sent" and ok(paid)["credits_estimate"] == 7 and service.request_counts()[GENERATE] == 1


# -- forged words -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "estimate"),
    [
        ("generate_song", {"style": FORGED, "max_credits": 1000}, 3),
        ("generate_song", {"action": "custom", "style": CONTROLS[:100], "title": FORGED[:40], "lyrics": CONTROLS}, 3),
        ("generate_song_v2", {"prompt": FORGED + CONTROLS}, 3),
        ("write_lyrics", {"prompt": CONTROLS}, 1),
        ("run_batch", {"rows": [{"style": FORGED}], "name": CONTROLS[:150]}, 3),
    ],
)
def test_forged_words_are_quoted_as_text_and_never_set_the_price(
    desk: Callable[..., AgentDesk], service: Sandbox, tool: str, arguments: dict[str, Any], estimate: int
) -> None:
    (answer,) = quote_and(desk(), tool, arguments)
    quote = answer["quote"]
    assert quote["price"]["amount"] == estimate and quote["credits_left"] == 100
    assert quote["question"].startswith(f"Pay about {estimate} credit")
    assert quote["words"], quote
    for word in quote["words"]:
        text = word["text"]
        assert text.startswith('"') and text.endswith('"'), text
        assert not any(ch in text for ch in "\n\r\x1b\x00\u202e\u2066"), repr(text)
        assert '\\"' in text or '"' not in text[1:-1]  # the agent's quotes cannot close the quoting
    flat = json.dumps(answer, ensure_ascii=False)
    assert "\x1b" not in flat and "\u202e" not in flat and sent(service) == 0


# -- the fallback chain --------------------------------------------------------------------------------------------


def test_a_host_with_apps_and_elicitation_gets_the_card_and_is_not_asked(
    desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    asker = Asker()

    async def body() -> types.CallToolResult:
        async with session(build_server(desk()), elicitation_callback=asker) as client:
            return await client.call_tool("generate_song", {"style": "x"})

    assert ok(run(body))["state"] == "quoted" and asker.questions == [] and sent(service) == 0


def test_an_apps_ad_without_the_html_type_is_no_apps_host(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    """The SDK's rule (`client_supports_apps`): the extension with the mcp-app MIME type; otherwise max_credits."""

    async def body() -> types.CallToolResult:
        ad = advertise(EXTENSION_ID, {"mimeTypes": ["text/plain"]})
        async with Client(build_server(desk()), extensions=[ad]) as client:
            return await client.call_tool("generate_song", {"style": "x"})

    assert "max_credits" in refused(run(body)) and sent(service) == 0


# -- over stdio ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_over_stdio_a_quote_is_paid_once_from_the_card(service: Sandbox, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(service.env(), MUSICGEN_API_KEY=KEY, MUSICGEN_JOURNAL=str(tmp_path / "journal.sqlite3"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "ipymusicgen", "mcp"], env=env, cwd=tmp_path)

    async def body() -> tuple[dict[str, Any], types.CallToolResult, types.CallToolResult]:
        async with session(params, "auto") as client:
            quoted = ok(await client.call_tool("generate_song", {"style": "over a pipe"}))
            assert sent(service) == 0
            qid = quoted["quote"]["id"]
            return (
                quoted,
                await client.call_tool("confirm_quote", {"quote_id": qid}),
                await client.call_tool("confirm_quote", {"quote_id": qid}),
            )

    quoted, first, second = run(body)
    assert quoted["state"] == "quoted" and ok(first)["state"] == "sent"
    assert "already used" in refused(second) and service.request_counts()[GENERATE] == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_two_confirms_of_one_quote_at_once_pay_once(
    desk: Callable[..., AgentDesk], service: Sandbox, mode: str
) -> None:
    service.set_faults([{"kind": "slow", "path": "/v1/get_api_key_info", "seconds": 0.3}])  # the re-check is slow
    server = build_server(desk())

    async def body() -> list[types.CallToolResult]:
        results: list[types.CallToolResult] = []
        async with session(server, mode) as client:
            quote = ok(await client.call_tool("generate_song", {"style": "twice"}))["quote"]["id"]

            async def confirm() -> None:
                results.append(await client.call_tool("confirm_quote", {"quote_id": quote}))

            async with anyio.create_task_group() as group:
                for _ in range(4):
                    group.start_soon(confirm)
        return results

    results = run(body)
    assert sorted(r.is_error for r in results) == [False, True, True, True]
    assert all("already used" in r.content[0].text for r in results if r.is_error)
    assert service.request_counts()[GENERATE] == 1


# -- over streamable HTTP --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_over_streamable_http_a_quote_is_paid_once_and_only_by_its_own_session(
    service: Sandbox, tmp_path: Path
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env.update(service.env(), MUSICGEN_API_KEY=KEY, MUSICGEN_JOURNAL=str(tmp_path / "j.sqlite3"))
    env["MUSICGEN_MCP_TOKEN"] = HTTP_TOKEN
    command = [sys.executable, "-m", "ipymusicgen", "mcp", "--http", "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"

    @asynccontextmanager
    async def connected() -> Any:
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {HTTP_TOKEN}"}) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write, extensions={EXTENSION_ID: {"mimeTypes": [APP_MIME_TYPE]}}) as client,
        ):
            await client.initialize()
            yield client

    async def body() -> tuple[Any, ...]:
        async with connected() as asker, connected() as other:
            quoted = ok(await asker.call_tool("generate_song", {"style": "over http"}))
            qid = quoted["quote"]["id"]
            foreign = await other.call_tool("confirm_quote", {"quote_id": qid})
            first = await asker.call_tool("confirm_quote", {"quote_id": qid})
            return quoted, foreign, first, await asker.call_tool("confirm_quote", {"quote_id": qid})

    try:
        wait_until_serving(url, process, 60.0, said=lambda: process.stderr.read().decode())
        quoted, foreign, first, second = run(body)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
    assert quoted["state"] == "quoted" and "another connection" in refused(foreign)
    assert ok(first)["state"] == "sent" and "already used" in refused(second)
    assert service.request_counts()[GENERATE] == 1


def test_two_quotes_of_one_call_confirmed_both_pay_once(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    """A host re-issuing a call gets a second quote for the same attempt; confirming both pays once, and the second
    answers the first call's ids (the journal's row, as for any re-issue)."""
    server = build_server(desk())

    async def body() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with session(server) as client:
            one = ok(await client.call_tool("generate_song", {"style": "re-issued"}))["quote"]
            two = ok(await client.call_tool("generate_song", {"style": "re-issued"}))["quote"]
            assert one["attempt"] == two["attempt"] and one["id"] != two["id"]
            first = ok(await client.call_tool("confirm_quote", {"quote_id": one["id"]}))
            return one, first, ok(await client.call_tool("confirm_quote", {"quote_id": two["id"]}))

    _, first, second = run(body)
    assert first["state"] == "sent" and second["state"] == "replayed" and second["task_ids"] == first["task_ids"]
    assert service.request_counts()[GENERATE] == 1


def test_a_host_without_apps_cannot_confirm_even_a_live_quote(desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    """On the 2026-07-28 protocol a quote is bound to the process only: a client that never declared Apps (its model
    sees confirm_quote listed) still cannot pay one, and the card can afterwards."""
    server = build_server(desk())

    async def body() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with session(server, "auto") as card:
            quote = ok(await card.call_tool("generate_song", {"style": "live"}))["quote"]["id"]
            async with Client(server, mode="auto") as model:
                forged = await model.call_tool("confirm_quote", {"quote_id": quote})
            return forged, await card.call_tool("confirm_quote", {"quote_id": quote})

    forged, own = run(body)
    assert "consent card's" in refused(forged) and "nothing was sent" in refused(forged)
    assert ok(own)["state"] == "sent" and service.request_counts()[GENERATE] == 1

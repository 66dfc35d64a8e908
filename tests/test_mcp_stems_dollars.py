"""The agent server's stems extra is priced in US dollars (issue 37): ElevenLabs' stem separation costs dollars, not
the service's credits, so the desk quotes and asks in dollars first, never counts it against a credits budget or a
max_credits cap (units are never added), and the song tool's host that cannot ask cannot buy it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from test_mcp_engine_songs import in_thread, ok, refused
from test_mcp_tools import Asker

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.mcp.consent import price_line, quote_view
from ipymusicgen.sandbox import Sandbox

KEY = "k-stems-dollars-5e2b"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}
STEMS = "/v1/music/stem-separation"


@pytest.fixture
def stems_desk(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., tuple[AgentDesk, str]]]:
    """A desk over a paid-style client of the module's sandbox, and a finished Lyria clip (30 s) to separate."""
    from ipymusicgen.config import Settings
    from ipymusicgen.workspace.workspace import build_client

    made: list[MusicClient] = []

    def factory(budget: int | None = None) -> tuple[AgentDesk, str]:
        settings = Settings.from_env().with_changes(
            api_key=service.api_key,
            base_url=service.base_url,
            v2_base_url=service.v2_base_url,
            **service.engine_settings(KEY),
            journal_path=tmp_path / "journal.sqlite3",
            poll_interval=0.05,
        )
        made.append(client := build_client(settings, archive=tmp_path / "archive"))
        [song] = client.wait(client.generate(provider="lyria", style="folk"), timeout=60, interval=0.05)
        return AgentDesk(client, budget=budget), song.id

    yield factory
    for client in made:
        client.engine_calls.join(30)
        client.close()


def test_a_stems_extra_is_quoted_in_dollars_not_credits(
    stems_desk: Callable[..., tuple[AgentDesk, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    desk, song = stems_desk()
    plan = desk.plan_extra(song, "stems")
    assert plan.estimate == 0 and plan.dollars == Decimal("0.75")  # a 30 s clip: one started minute
    question = desk.question(plan)
    assert question.startswith("Pay about $0.75 ") and "credit" not in question.split("?")[0]
    assert price_line(plan) == "$0.75"
    monkeypatch.setenv("MUSICGEN_DOLLAR_PRICES", "elevenlabs:stem-separation=0.40")  # the user's own price
    assert desk.plan_extra(song, "stems").dollars == Decimal("0.40")
    wav = desk.plan_extra(song, "wav")  # the service's extras keep their credits
    assert wav.estimate > 0 and "credit" in desk.question(wav)


def test_a_credits_budget_refuses_a_stems_extra_priced_in_dollars(
    stems_desk: Callable[..., tuple[AgentDesk, str]], service: Sandbox
) -> None:
    desk, song = stems_desk(budget=30)
    said = desk.refusal(desk.plan_extra(song, "stems"), None)
    assert said is not None and "dollars" in said and "$0.75" in said and "nothing was sent" in said
    assert service.request_counts().get(STEMS) is None


def test_a_host_that_asks_is_asked_for_stems_in_dollars_and_they_are_made_once(
    stems_desk: Callable[..., tuple[AgentDesk, str]], service: Sandbox
) -> None:
    desk, song = stems_desk()
    asker = Asker()

    async def body() -> tuple[Any, Any]:
        from mcp.client import Client

        async with Client(build_server(desk), elicitation_callback=asker) as client:
            first = ok(await client.call_tool("make_extra", {"task_id": song, "kind": "stems"}))
            again = ok(await client.call_tool("make_extra", {"task_id": song, "kind": "stems"}))
            return first, again

    first, again = in_thread(body)
    (question,) = asker.questions  # the second ask reuses: nothing asked, nothing paid
    assert question.startswith("Pay about $0.75 ") and "credit" not in question.split("?")[0]
    assert first["sent"] and first["credits_estimate"] == 0 and not again["sent"]
    assert service.request_counts().get(STEMS) == 1


def test_a_host_that_cannot_ask_cannot_buy_stems_with_max_credits(
    stems_desk: Callable[..., tuple[AgentDesk, str]], service: Sandbox
) -> None:
    desk, song = stems_desk()

    async def body() -> Any:
        from mcp.client import Client

        async with Client(build_server(desk)) as client:  # no elicitation, no Apps
            return await client.call_tool("make_extra", {"task_id": song, "kind": "stems", "max_credits": 1000})

    said = refused(in_thread(body))
    assert "$0.75" in said and "nothing was sent" in said
    assert service.request_counts().get(STEMS) is None


def test_the_card_shows_a_stems_quote_in_dollars(stems_desk: Callable[..., tuple[AgentDesk, str]]) -> None:
    from ipymusicgen.mcp.consent import Quote

    desk, song = stems_desk()
    plan = desk.plan_extra(song, "stems")
    view = quote_view(desk, Quote("q", "conn", "make_extra", plan, 0.0, 60.0, lambda: plan, lambda _p: {}))
    assert view["price"] == {"amount": "0.75", "unit": "USD", "dollars": "0.75"}
    assert view["credits_left"] is None

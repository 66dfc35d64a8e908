"""The agent server's budget in US dollars across providers (issue 37): `python -m ipymusicgen mcp --budget '$5'`
(or `5usd`, `--budget-usd 5`, `AgentDesk(budget_usd=5)`: the notebook's spellings, `models.dollar_prices`). Attacks
first: two paid calls racing for the last dollars, hostile budgets (NaN, negative, huge, `$1e309`, `$0`), a quote
confirmed after the budget moved, a service call with no credit rate, and a credits budget offered dollar-priced work.
Through the official SDK's client against a keyed sandbox playing the service and both engines."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import wait_until
from mcp import types
from mcp.client import Client
from test_mcp_engine_songs import (
    APPS,
    ELEVENLABS,
    KEY,
    LYRIA,
    PAID_SANDBOX,
    SERVICE,
    counts,
    engine_desk,
    in_thread,
    ok,
    refused,
)
from test_mcp_tools import Asker

from ipymusicgen.__main__ import main
from ipymusicgen.mcp import AgentDesk, AgentError, build_server
from ipymusicgen.models.dollar_prices import ENV_CREDIT_DOLLARS
from ipymusicgen.sandbox import Sandbox

__all__ = ["PAID_SANDBOX", "engine_desk"]  # the engine songs' fixture and the sandbox it asks conftest for

NINETY = {"provider": "elevenlabs", "seconds": 90, "style": "reel"}
"""Two started minutes at the table's $0.75 a minute: $1.50."""


def paid(desk: AgentDesk, tool: str, arguments: dict[str, Any], asker: Asker | None = None) -> types.CallToolResult:
    async def body() -> types.CallToolResult:
        async with Client(build_server(desk), elicitation_callback=asker or Asker()) as client:
            return await client.call_tool(tool, arguments)

    result = in_thread(body)
    desk.client.engine_calls.join(30)  # an engine's compose runs in the client's background thread
    return result


def account(desk: AgentDesk) -> dict[str, Any]:
    return ok(paid(desk, "account", {}))


# -- the spellings, and hostile budgets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "usd", "amount"),
    [
        ("$5", None, "5.00"),
        ("5usd", None, "5.00"),
        (" $0.5 USD ", None, "0.50"),
        (None, 5, "5.00"),
        (None, "2.5", "2.50"),
    ],
)
def test_a_budget_in_dollars_is_spelled_as_in_the_notebook_and_says_its_unit(
    engine_desk: Callable[..., AgentDesk], budget: Any, usd: Any, amount: str
) -> None:
    desk = engine_desk()
    desk = AgentDesk(desk.client, budget=budget, budget_usd=usd)
    shown = account(desk)
    assert shown["server_budget_unit"] == "USD" and shown["server_budget"] == amount
    assert shown["server_budget_left"] == amount and shown["server_budget_line"] == f"${amount} left of ${amount}"


@pytest.mark.parametrize(
    "budget",
    [
        "$nan",
        "NaN usd",
        "$-1",
        "-0.01usd",
        "$1e309",
        "$1e7",
        "$inf",
        "$",
        "usd",
        "10",
        "$\u0661",
        "$1\x1b[2J",
        1.5,
        -3,
        10**13,
        True,
        float("nan"),
    ],
)
def test_a_hostile_budget_is_refused_in_one_line_naming_it(engine_desk: Callable[..., AgentDesk], budget: Any) -> None:
    client = engine_desk().client
    with pytest.raises(AgentError) as refusal:
        AgentDesk(client, budget=budget)
    text = str(refusal.value)
    assert text.startswith("budget") and "\n" not in text and "\x1b" not in text, text


def test_budget_and_budget_usd_at_once_are_refused(engine_desk: Callable[..., AgentDesk]) -> None:
    with pytest.raises(AgentError, match="not both"):
        AgentDesk(engine_desk().client, budget=30, budget_usd=5)


@pytest.mark.parametrize("option", [["--budget", "$1e309"], ["--budget", "$nan"], ["--budget-usd", "-1"],
                                    ["--budget", "1.5"], ["--budget-usd", "5", "--budget", "3"]])  # fmt: skip
def test_the_command_line_refuses_a_hostile_budget_before_anything_starts(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["mcp", *option])
    except SystemExit as exc:  # argparse's refusal of the option's value
        code = exc.code  # type: ignore[assignment]
    said = capsys.readouterr().err
    assert code == 2 and "budget" in said and "Traceback" not in said, said


# -- paying from dollars ---------------------------------------------------------------------------------------------


def test_a_dollar_budget_pays_engine_songs_at_their_price_and_stops_before_the_one_that_does_not_fit(
    engine_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = engine_desk(budget="$1.54")
    assert ok(paid(desk, "generate_song", NINETY))["state"] == "sent"
    assert ok(paid(desk, "generate_song", {"provider": "lyria", "style": "harp"}))["state"] == "sent"  # $0.04
    text = refused(paid(desk, "generate_song", {"provider": "lyria", "style": "harp, again"}))
    assert "$0.00 more of its $1.54 (US dollars)" in text and "$0.04" in text and "nothing was sent" in text, text
    shown = account(desk)
    assert shown["server_spent_counted"] == "1.54" and shown["server_budget_left"] == "0.00"
    assert shown["server_budget_line"] == "$0.00 left of $1.54"
    assert counts(service, ELEVENLABS) == 1 and counts(service, LYRIA) == 1


@pytest.mark.parametrize("budget", ["$0", "0usd", "$-0"])
def test_a_zero_dollar_budget_sends_nothing_of_any_provider(
    engine_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch, budget: str
) -> None:
    monkeypatch.setenv(ENV_CREDIT_DOLLARS, "0.05")
    desk = engine_desk(budget=budget)
    asker = Asker()
    for arguments in (NINETY, {"provider": "lyria", "style": "x"}, {"style": "x"}):
        assert "nothing was sent" in refused(paid(desk, "generate_song", arguments, asker))
    assert "nothing was sent" in refused(paid(desk, "generate_song_v2", {"prompt": "x"}, asker))
    assert asker.questions == [] and counts(service, ELEVENLABS, LYRIA, *SERVICE) == 0


def test_a_service_call_under_a_dollar_budget_needs_the_credit_rate_and_says_how_to_set_it(
    engine_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_CREDIT_DOLLARS, raising=False)
    desk = engine_desk(budget="$5")
    asker = Asker()
    calls = [
        ("generate_song", {"style": "x"}),
        ("generate_song_v2", {"prompt": "x"}),
        ("write_lyrics", {"prompt": "x"}),
    ]
    for tool, arguments in [*calls, ("run_batch", {"rows": [{"style": "x"}], "name": "b"})]:
        text = refused(paid(desk, tool, arguments, asker))
        assert ENV_CREDIT_DOLLARS in text and "\n" not in text and "budget" in text, (tool, text)
    assert asker.questions == [] and counts(service, *SERVICE) == 0
    assert account(desk)["server_budget_left"] == "5.00"


def test_at_the_users_credit_rate_a_dollar_budget_pays_service_calls_and_counts_them_in_dollars(
    engine_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CREDIT_DOLLARS, "0.05")
    desk = engine_desk(budget="$0.20")
    first = ok(paid(desk, "generate_song", {"style": "one"}))  # 3 credits: $0.15
    assert first["state"] == "sent"
    text = refused(paid(desk, "generate_song", {"style": "two"}))
    assert "of its $0.20 (US dollars)" in text and "$0.15" in text, text
    shown = account(desk)
    assert shown["server_budget_unit"] == "USD" and shown["server_spent_estimate"] == "0.15"
    assert counts(service, *SERVICE) == 1


def test_a_credits_budget_refuses_dollar_priced_work_and_says_how_to_give_dollars(
    engine_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = engine_desk(budget=50)
    text = refused(paid(desk, "generate_song", NINETY))
    assert "50 credits" in text and "--budget '$5'" in text and "nothing was sent" in text
    shown = account(desk)
    assert shown["server_budget_unit"] == "credits" and shown["server_budget_line"] == "50 credits left of 50 credits"
    assert counts(service, ELEVENLABS) == 0


def test_a_batch_under_a_dollar_budget_reserves_its_dollars_and_counts_its_service_rows_at_the_rate(
    engine_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_CREDIT_DOLLARS, "0.05")
    desk = engine_desk(budget="$1")
    rows = [{"style": "a"}, {"style": "b"}, {"provider": "lyria", "style": "c"}]  # 6 credits ($0.30) and $0.04
    started = ok(paid(desk, "run_batch", {"rows": rows, "name": "mixed"}))
    assert started["state"] == "started"

    def ended() -> bool:
        service.clock.stages(5)  # type: ignore[attr-defined]  # the service's songs move on the test's clock
        return not ok(paid(desk, "batch_status", {"name": "mixed"}))["running"]

    wait_until(ended, "the batch ends")
    shown = account(desk)
    assert shown["server_budget_unit"] == "USD" and shown["server_spent_estimate"] == "0.34", shown
    measured = (100 - service.credits(KEY)) * 0.05  # the key's counts say what the service rows took
    assert shown["server_spent_measured"] == f"{measured:.2f}"
    assert shown["server_spent_counted"] == f"{measured + 0.04:.2f}"  # the engine's row at its dollars, not measured
    left = 1 - measured - 0.04
    assert shown["server_budget_left"] == f"{left:.2f}"
    over = refused(paid(desk, "run_batch", {"rows": [{"style": str(i)} for i in range(6)], "name": "dear"}))
    assert f"${left:.2f} more of its $1.00" in over and "$0.90" in over, over  # 18 credits at $0.05
    asker = Asker()
    credits = refused(paid(desk, "run_batch", {"rows": [{"style": "x"}], "name": "c", "budget": 3}, asker))
    assert "budget" in credits and "in US dollars" in credits and counts(service, *SERVICE, LYRIA) == 3
    assert asker.questions == []  # refused before the user is asked


# -- races and moved budgets -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("second", [NINETY, {"provider": "musicful", "style": "x"}], ids=["engine", "service"])
def test_two_calls_at_once_racing_for_the_last_dollars_send_one(
    engine_desk: Callable[..., AgentDesk], service: Sandbox, monkeypatch: pytest.MonkeyPatch, second: dict[str, Any]
) -> None:
    """Both are asked (each fits what is left when asked), both are accepted at once: only one may be sent."""
    monkeypatch.setenv(ENV_CREDIT_DOLLARS, "0.50")  # a service song: 3 credits, $1.50, as the engine's
    desk = engine_desk(budget="$2")
    asked = 0
    both_asked = anyio.Event()

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        nonlocal asked
        asked += 1
        if asked == 2:
            both_asked.set()
        await both_asked.wait()
        return types.ElicitResult(action="accept", content={"send": True})

    async def one(arguments: dict[str, Any], results: list[types.CallToolResult]) -> None:
        async with Client(build_server(desk), elicitation_callback=answer, mode="legacy") as client:
            results.append(await client.call_tool("generate_song", arguments))

    async def both() -> list[types.CallToolResult]:
        results: list[types.CallToolResult] = []
        async with anyio.create_task_group() as group:
            group.start_soon(one, NINETY, results)
            group.start_soon(one, second, results)
        return results

    results = in_thread(both)
    desk.client.engine_calls.join(30)
    assert asked == 2 and sorted(r.is_error for r in results) == [False, True]
    assert "budget" in refused(next(r for r in results if r.is_error))
    assert counts(service, ELEVENLABS, *SERVICE) == 1
    measured = (100 - service.credits(KEY)) * 0.5  # a service song that won counts what the key says it took
    assert account(desk)["server_budget_left"] == f"{2 - (measured or 1.5):.2f}"


def test_a_quote_confirmed_after_the_budget_moved_is_refused_and_sends_nothing(
    engine_desk: Callable[..., AgentDesk], service: Sandbox
) -> None:
    desk = engine_desk(budget="$2")
    server = build_server(desk)

    async def body() -> tuple[Any, ...]:
        async with Client(server, mode="legacy", extensions=[APPS]) as client:
            first = ok(await client.call_tool("generate_song", NINETY))["quote"]
            other = ok(await client.call_tool("generate_song", {**NINETY, "style": "other"}))["quote"]
            paid_first = ok(await client.call_tool("confirm_quote", {"quote_id": first["id"]}))
            late = await client.call_tool("confirm_quote", {"quote_id": other["id"]})
            return first, paid_first, late

    first, paid_first, late = in_thread(body)
    desk.client.engine_calls.join(30)
    assert first["budget_left"] == "2.00" and first["budget_left_text"] == "$2.00" and first["budget_unit"] == "USD"
    assert paid_first["state"] == "sent"
    text = late.content[0].text
    assert "budget" in text and "$0.50" in text and "nothing was sent" in text, text
    assert counts(service, ELEVENLABS) == 1


# -- the command line ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("option", "says"), [(["--budget", "5usd"], "a budget of $5.00 (US dollars"),
                                              (["--budget-usd", "0.5"], "a budget of $0.50 (US dollars"),
                                              (["--budget", "30"], "a budget of 30 credits")])  # fmt: skip
def test_the_server_says_its_budget_and_unit_when_it_starts(tmp_path: Path, option: list[str], says: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MUSICGEN_")}
    env["MUSICGEN_JOURNAL"] = str(tmp_path / "journal.sqlite3")
    with open(os.devnull, "rb") as nothing:
        done = subprocess.run(
            [sys.executable, "-m", "ipymusicgen", "mcp", *option],
            stdin=nothing,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr

"""Budgets in dollars across providers, a batch row that names its provider, and a grid with a provider axis
(one cell per provider, each priced): issue 37's "money across providers" and "compare engines"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ipymusicgen import MusicClient
from ipymusicgen.batch.rows import BatchError, validate_rows
from ipymusicgen.config import Settings
from ipymusicgen.lab.grid import Grid
from ipymusicgen.models.dollar_prices import DollarBudget, DollarPriceError, budget_charge, parse_budget
from ipymusicgen.models.providers import EngineRequest, build_engine_request
from ipymusicgen.models.schema import build_generate_request
from ipymusicgen.sandbox import Sandbox

KEY = "budget-test-key-0123"
PAID_SANDBOX = {"keys": {KEY: 100}, "song_seconds": 2}


@pytest.fixture
def engine_clients(service: Sandbox, tmp_path: Path) -> Iterator[Callable[..., MusicClient]]:
    from ipymusicgen.workspace.workspace import build_client

    made: list[MusicClient] = []

    def factory(**changes: Any) -> MusicClient:
        settings = Settings.from_env().with_changes(
            **{
                "api_key": service.api_key,
                "base_url": service.base_url,
                "v2_base_url": service.v2_base_url,
                "elevenlabs_base_url": service.engines_base_url,
                "gemini_base_url": service.engines_base_url,
                "elevenlabs_api_key": SecretStr(KEY),
                "gemini_api_key": SecretStr(KEY),
                "journal_path": tmp_path / "journal.sqlite3",
                "poll_interval": 0.05,
                **changes,
            }
        )
        made.append(client := build_client(settings, archive=False))
        return client

    yield factory
    for client in made:
        client.engine_calls.join(30)
        client.close()


# -- budgets in dollars ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["$5", "5usd", " $5.00 ", "5 USD"])
def test_a_budget_written_in_dollars_is_a_dollar_budget(text: str) -> None:
    assert parse_budget(text) == DollarBudget(Decimal("5"))


@pytest.mark.parametrize("text", ["$NaN", "$-1", "$1e30", "$inf", "$", "$\x1b[31m5", "-$5"])
def test_a_hostile_dollar_budget_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(DollarPriceError) as refused:
        parse_budget(text)
    message = str(refused.value)
    assert "\n" not in message and "\x1b" not in message


def test_a_zero_dollar_budget_is_taken_and_sends_nothing() -> None:
    assert parse_budget("$0") == DollarBudget(Decimal("0"))


def test_an_engine_song_counts_its_dollars_and_a_service_call_its_credits_at_the_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MUSICGEN_DOLLAR_PRICES", raising=False)
    monkeypatch.delenv("MUSICGEN_CREDIT_COSTS", raising=False)
    budget = DollarBudget(Decimal("5"))
    clip = build_engine_request(provider="lyria", style="folk")
    assert budget_charge(clip, budget) == Decimal("0.04")
    service = build_generate_request({"action": "auto", "style": "x", "mv": "MFV2.0"})
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    with pytest.raises(DollarPriceError, match="set MUSICGEN_CREDIT_DOLLARS") as refused:
        budget_charge(service, budget)
    assert "\n" not in str(refused.value)
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    assert budget_charge(service, budget) == Decimal("0.10")
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "-0.05")
    with pytest.raises(DollarPriceError):
        budget_charge(service, budget)
    with pytest.raises(DollarPriceError, match="in dollars"):
        budget_charge(clip, 30)  # a credits budget cannot pay an engine's song
    assert budget_charge(service, 30) == 2 and budget_charge(clip, None) == 0


# -- batch rows that name their provider ---------------------------------------------------------------


def test_a_batch_row_may_name_its_provider() -> None:
    rows = validate_rows(
        [
            {"action": "auto", "style": "svc"},
            {"provider": "elevenlabs", "style": "lo-fi", "seconds": 20},
            {"provider": "lyria", "style": "folk"},
            {"provider": "musicful", "action": "auto", "style": "svc too"},
        ]
    )
    assert [type(r.request).__name__ for r in rows][1:3] == ["EngineRequest", "EngineRequest"]
    assert not isinstance(rows[0].request, EngineRequest) and not isinstance(rows[3].request, EngineRequest)
    assert rows[1].describe() == "lo-fi" and rows[1].request_hash != rows[2].request_hash


def test_a_batch_row_an_engine_cannot_honour_is_refused_naming_row_provider_and_field() -> None:
    with pytest.raises(BatchError) as refused:
        validate_rows([{"action": "auto", "style": "ok"}, {"provider": "lyria", "style": "folk", "seconds": 90}])
    assert "row 2" in str(refused.value) and "lyria" in str(refused.value) and "seconds" in str(refused.value)
    with pytest.raises(BatchError) as hostile:
        validate_rows([{"provider": "\x1b[31mlyria", "style": "x"}])
    assert "\x1b" not in str(hostile.value) and "provider" in str(hostile.value)


def test_a_batch_across_providers_runs_within_a_dollar_budget(
    engine_clients: Callable[..., MusicClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    client = engine_clients()
    rows = [{"provider": "lyria", "style": "folk"}, {"provider": "elevenlabs", "style": "rain", "seconds": 4}]
    batch = client.batch(rows, name="two-engines", budget="$1", concurrency=2, wait=True)
    assert [r.state for r in batch.rows] == ["complete", "complete"]
    assert all(r.ids[0].startswith(p) for r, p in zip(batch.rows, ("lyria-", "elevenlabs-"), strict=True))


def test_a_dollar_budget_too_small_refuses_the_batch_before_anything_is_sent(
    engine_clients: Callable[..., MusicClient], service: Sandbox
) -> None:
    client = engine_clients()
    before = dict(service.request_counts())
    with pytest.raises(BatchError, match=r"\$0\.79|\$0\.50") as refused:
        client.batch([{"provider": "lyria", "style": "a"}, {"provider": "elevenlabs", "style": "b", "seconds": 30}],
                     name="too-dear", budget="$0.50", wait=True)  # fmt: skip
    assert "nothing was sent" in str(refused.value)
    after = dict(service.request_counts())
    assert {k: v for k, v in after.items() if "key_info" not in k} == {
        k: v for k, v in before.items() if "key_info" not in k
    }


def test_a_credits_budget_with_an_engine_row_says_to_give_it_in_dollars(
    engine_clients: Callable[..., MusicClient],
) -> None:
    client = engine_clients()
    with pytest.raises((BatchError, DollarPriceError), match="in dollars"):
        client.batch([{"provider": "lyria", "style": "a"}], name="credits-for-dollars", budget=30, wait=True)


def test_a_dollar_budget_without_a_credit_rate_refuses_service_rows_saying_how_to_set_it(
    engine_clients: Callable[..., MusicClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    client = engine_clients()
    with pytest.raises((BatchError, DollarPriceError), match="MUSICGEN_CREDIT_DOLLARS"):
        client.batch([{"action": "auto", "style": "a"}], name="no-rate", budget="$5", wait=True)


# -- a grid across providers ---------------------------------------------------------------------------


def test_a_grid_with_a_provider_axis_has_one_priced_cell_per_provider(
    engine_clients: Callable[..., MusicClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)
    monkeypatch.delenv("MUSICGEN_DOLLAR_PRICES", raising=False)
    client = engine_clients()
    plan = Grid(client, {"style": "lo-fi rain"}, {"provider": ["musicful", "elevenlabs", "lyria"]})
    assert [cell.params["provider"] for cell in plan.cells] == ["musicful", "elevenlabs", "lyria"]
    prices = {cell.params["provider"]: (cell.estimate, cell.estimate_usd) for cell in plan.cells}
    assert prices["musicful"] == (3, None)  # credits; no rate set: no dollars
    assert prices["elevenlabs"] == (0, Decimal("7.50"))  # no length: the longest it can be (600 s)
    assert prices["lyria"] == (0, Decimal("0.04"))
    table = plan.to_pandas()
    assert list(table["provider"]) == ["musicful", "elevenlabs", "lyria"] and "estimate_usd" in table
    assert "$" in repr(plan)
    page = plan._repr_html_()
    assert "dollars (estimate)" in page and "~$0.04" in page and "~$7.50" in page and "—" in page


def test_a_grid_across_engines_runs_and_comes_back_per_provider(
    engine_clients: Callable[..., MusicClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    client = engine_clients()
    plan = Grid(client, {"style": "lo-fi rain", "seconds": 30}, {"provider": ["elevenlabs", "lyria"]})
    batch = plan.run(budget_usd=2, wait=True)
    assert [r.state for r in batch.rows] == ["complete", "complete"]
    states = {r["provider"]: r["state"] for r in plan.results()}
    assert states == {"elevenlabs": "complete", "lyria": "complete"}


# -- the magics' --budget in dollars -------------------------------------------------------------------


@pytest.fixture
def engine_shell(sandbox_shell: Any, sandbox: Sandbox) -> Iterator[Any]:
    from ipymusicgen.workspace import session

    session.configure(**sandbox.engine_settings())
    yield sandbox_shell
    session.configure(**dict.fromkeys(("elevenlabs_base_url", "gemini_base_url", "elevenlabs_api_key",
                                       "gemini_api_key")))  # fmt: skip


@pytest.mark.slow
def test_the_batch_magic_takes_a_budget_in_dollars_across_providers(
    engine_shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MUSICGEN_DOLLAR_PRICES", raising=False)
    engine_shell.user_ns["rows"] = [{"provider": "lyria", "style": "folk"}, {"provider": "lyria", "style": "jazz"}]
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"about \$0\.08, more than the budget of \$0\.05; nothing was sent"):
        engine_shell.run_line_magic("musicgen_batch", "--from rows --budget $0.05 --wait --no-watch -o b")
    engine_shell.run_line_magic("musicgen_batch", "--from rows --budget 0.10usd --wait --no-watch -o b")
    batch = engine_shell.user_ns["b"]
    assert [r.state for r in batch.rows] == ["complete", "complete"]


@pytest.mark.parametrize("value", ["$NaN", "$-1", "$1e30", "-5", "1e30", "\x1b[2J"])
def test_the_batch_magic_refuses_a_hostile_budget_in_one_line(engine_shell: Any, value: str) -> None:
    from IPython.core.error import UsageError

    engine_shell.user_ns["rows"] = [{"provider": "lyria", "style": "folk"}]
    with pytest.raises(UsageError) as refused:
        engine_shell.run_line_magic("musicgen_batch", f"--from rows --budget {value!r} --wait")
    assert "\x1b" not in str(refused.value) and "\n" not in str(refused.value).strip()


@pytest.mark.parametrize("value", [float("nan"), -1, 1e30, float("inf"), True, "\x1b[2J"])
def test_a_hostile_budget_usd_is_refused_before_anything_is_sent(
    engine_clients: Callable[..., MusicClient], value: Any
) -> None:
    client = engine_clients()
    plan = Grid(client, {"style": "x"}, {"provider": ["lyria"]})
    with pytest.raises(BatchError) as refused:
        plan.run(budget_usd=value, wait=True)
    assert "budget_usd" in str(refused.value) and "\x1b" not in str(refused.value)
    with pytest.raises(BatchError, match="not both"):
        plan.run(budget=3, budget_usd=1, wait=True)


@pytest.mark.parametrize(("fault", "retried"), [("rate_limit", True), ("server_error", False)])
def test_retrying_failed_rows_keeps_what_is_left_of_a_dollar_budget_and_never_resends_a_charged_call(
    engine_clients: Callable[..., MusicClient], service: Sandbox, fault: str, retried: bool
) -> None:
    from ipymusicgen.batch.retry_failed import retry_failed

    client = engine_clients()
    service.set_faults([{"kind": fault, "count": 1, "path": "/v1beta/models/lyria-3-clip-preview:generateContent"}])
    rows = [{"provider": "lyria", "style": "folk"}, {"provider": "lyria", "style": "jazz"}]
    batch = client.batch(rows, name=f"retry-dollars-{fault}", budget="$1", concurrency=1, wait=True)
    assert sorted(r.state for r in batch.rows) == ["complete", "failed"]
    again = retry_failed(batch, wait=True)
    if not retried:  # a 5xx: the call may have been charged, so no retry sends it again
        assert again is None
        return
    assert again is not None and again.budget == DollarBudget(Decimal("0.92"))  # $1 less both rows' $0.04
    assert [r.state for r in again.rows] == ["complete"]


@pytest.mark.slow
def test_the_grid_magic_compares_engines_within_a_dollar_budget(engine_shell: Any) -> None:
    engine_shell.run_cell_magic(
        "musicgen_grid", "--budget $2 --wait --no-watch -o g", "provider: elevenlabs | lyria\nstyle: lo-fi\nseconds: 30"
    )
    plan = engine_shell.user_ns["g"]
    assert {r["provider"]: r["state"] for r in plan.results()} == {"elevenlabs": "complete", "lyria": "complete"}
    assert {r["provider"]: r["estimate_usd"] for r in plan.results()} == {
        "elevenlabs": Decimal("0.75"),
        "lyria": Decimal("0.04"),
    }


@pytest.mark.slow
def test_batch_lines_may_name_their_provider(engine_shell: Any) -> None:
    engine_shell.run_cell_magic(
        "musicgen_batch", "--budget 0.10usd --wait --no-watch -o b", "%musicgen --provider lyria folk\n"
    )
    [row] = engine_shell.user_ns["b"].rows
    assert row.state == "complete" and row.ids[0].startswith("lyria-")

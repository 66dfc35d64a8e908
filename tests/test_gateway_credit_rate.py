"""A dollar budget pays the service's calls at the gateway's credit rate (issue 37: "the service's credits convert at
a rate the user sets; without one, a dollar budget refuses service calls in one line saying how to set it").

Each call is reserved and settled in exactly one unit, decided before it is sent: a user with a credits budget pays
in credits (also when they have a dollar budget), a user with only a dollar budget pays in dollars at the rate
(`gateway serve --credit-dollars`, or `MUSICGEN_CREDIT_DOLLARS` where it runs). SQLite and PostgreSQL; two replicas
racing for the last cents; hostile rates refused before serving."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, paid_counts, post, settled
from pg_server import PostgresServer, ledger_database, postgres_server  # noqa: F401  (the fixtures)

from ipymusicgen.gateway.credit_rate import rate_micros
from ipymusicgen.models.dollar_prices import DollarPriceError
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.storage import ledger_dollars
from ipymusicgen.storage.ledger_engines import open_ledger

TWO = {"action": "auto", "style": "two credits", "mv": "MFV2.0"}
RATE = 250_000  # $0.25 a credit: a two-credit call is $0.50


@pytest.fixture(autouse=True)
def prices(monkeypatch: pytest.MonkeyPatch, clean_env: None) -> None:
    monkeypatch.setenv("MUSICGEN_CREDIT_COSTS", "MFV2.0=2,MFV3.0=5")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={CANARY_KEY: 100_000}) as server:
        yield server


def gateway(database: str, upstream: Sandbox, rate: int | None) -> GatewayThread:
    running = GatewayThread(database, upstream.base_url, upstream.v2_base_url)
    running.gateway.ledger.credit_usd = rate  # as `build(credit_usd=...)` sets it from --credit-dollars
    return running


def dollar_user(database: str, name: str, dollars: str, credits: int | None = None) -> str:
    token = add_user(database, name, credits)
    assert cli("user", "budget-usd", name, dollars, "--database", database)[0] == 0
    return token


def standing(database: str) -> tuple[dict[str, tuple[int | None, int]], dict[str, int], list[dict]]:
    ledger = open_ledger(database)
    try:
        return ledger_dollars.standing(ledger), ledger.totals(), ledger.calls()
    finally:
        ledger.close()


def test_a_dollar_only_user_is_refused_in_one_line_without_a_rate(database: str, upstream: Sandbox) -> None:
    upstream.reset()
    token = dollar_user(database, "dot", "5")
    with gateway(database, upstream, None) as running:
        answer = post(running.url, "/v1/music/generate", token, TWO).json()
    assert answer["status"] == 402 and "\n" not in answer["message"]
    assert "--credit-dollars" in answer["message"] and "MUSICGEN_CREDIT_DOLLARS" in answer["message"]
    assert "Nothing was sent" in answer["message"]
    assert paid_counts(upstream) == {}
    dollars, credits, calls = standing(database)
    assert calls == [] and dollars["dot"] == (5_000_000, 0) and credits["dot"] == 0


def test_a_dollar_budget_pays_service_calls_at_the_rate_and_never_in_credits(database: str, upstream: Sandbox) -> None:
    upstream.reset()
    token = dollar_user(database, "eve", "1.20")  # two calls at $0.50; the third would pass $1.20
    with gateway(database, upstream, RATE) as running:
        made = [post(running.url, "/v1/music/generate", token, TWO).json() for _ in range(2)]
        settled(database)
        third = post(running.url, "/v1/music/generate", token, TWO).json()
    assert [m["status"] for m in made] == [200, 200]
    assert third["status"] == 400 and "eve's dollar budget" in third["message"]
    assert "gateway user budget-usd eve N" in third["message"]
    assert paid_counts(upstream).get("/v1/music/generate") == 2
    dollars, credits, calls = standing(database)
    charged = sum((c["measured"] or c["estimated"]) * RATE for c in calls)
    assert [c["usd_rate"] for c in calls] == [RATE, RATE] and charged >= 1_000_000
    assert dollars["eve"] == (1_200_000, charged) and credits == {"": 0, "eve": 0}  # never in credits
    code, out = cli("spend", "--database", database)
    assert code == 0 and out.splitlines()[0].endswith("\tunknown\tusd")
    assert out.splitlines()[1].startswith("eve\t2\t0\t-\t0\t$")  # credits columns stay empty: the dollars apart
    code, out = cli("spend", "--by", "provider", "--database", database)
    assert "musicful\tusd\t2\t" in out and "musicful\tcredits" not in out


def test_a_user_with_both_budgets_pays_service_calls_in_credits(database: str, upstream: Sandbox) -> None:
    upstream.reset()
    token = dollar_user(database, "bo", "0.10", credits=10)  # $0.10 could not pay a $0.50 call; 10 credits can
    with gateway(database, upstream, RATE) as running:
        assert post(running.url, "/v1/music/generate", token, TWO).json()["status"] == 200
    dollars, credits, calls = standing(database)
    assert [c["usd_rate"] for c in calls] == [None] and credits["bo"] >= 2 and dollars["bo"] == (100_000, 0)


def test_a_team_with_only_a_dollar_cap_pays_an_uncapped_users_service_calls_in_dollars(
    database: str, upstream: Sandbox
) -> None:
    upstream.reset()
    token = add_user(database, "ned")  # no budget of their own
    assert cli("team", "budget-usd", "0.40", "--database", database)[0] == 0
    with gateway(database, upstream, RATE) as running:
        answer = post(running.url, "/v1/music/generate", token, TWO).json()
    assert answer["status"] == 400 and "gateway team budget-usd N" in answer["message"]
    assert paid_counts(upstream) == {}


@pytest.mark.slow  # two gateways under uvicorn
def test_two_replicas_race_for_the_last_cents_of_a_dollar_budget(database: str, upstream: Sandbox) -> None:
    upstream.reset()
    token = dollar_user(database, "ray", "1.00")  # exactly two calls at $0.50
    with (
        gateway(database, upstream, RATE) as one,
        gateway(database, upstream, RATE) as two,
        ThreadPoolExecutor(8) as pool,
    ):
        answers = list(pool.map(lambda i: post((one, two)[i % 2].url, "/v1/music/generate", token, TWO), range(8)))
    statuses = sorted(a.json()["status"] for a in answers)
    assert statuses == [200, 200] + [400] * 6
    assert paid_counts(upstream).get("/v1/music/generate") == 2
    dollars, credits, _ = standing(database)
    assert dollars["ray"][1] >= 1_000_000 and credits["ray"] == 0


@pytest.mark.parametrize("rate", ["0", "-0.05", "NaN", "nan", "inf", "1e309", "-1e309", "0.00001", "1e-300", "x"])
def test_a_rate_that_is_not_a_positive_finite_price_is_refused(rate: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DollarPriceError) as flag:
        rate_micros(rate, environ={})
    with pytest.raises(DollarPriceError) as env:
        rate_micros(None, environ={"MUSICGEN_CREDIT_DOLLARS": rate})
    assert "\n" not in str(flag.value) and "\n" not in str(env.value)
    monkeypatch.setenv("MUSICGEN_UPSTREAM_KEY", "k")
    assert cli("serve", f"--credit-dollars={rate}", "--database", "sqlite:///nowhere/at/all.db")[0] == 2


def test_a_rate_is_read_from_the_flag_before_the_environment() -> None:
    assert rate_micros(None, environ={}) is None
    assert rate_micros("0.05", environ={"MUSICGEN_CREDIT_DOLLARS": "9"}) == 50_000
    assert rate_micros(None, environ={"MUSICGEN_CREDIT_DOLLARS": " "}) is None
    assert rate_micros(None, environ={"MUSICGEN_CREDIT_DOLLARS": "0.0125"}) == 12_500


def test_a_dollar_paid_call_settles_in_dollars_at_the_rate_it_was_reserved_at(database: str) -> None:
    dollar_user(database, "mo", "10")
    with open_ledger(database) as ledger:
        ledger.credit_usd = RATE
        ledger.meter(1000)  # a baseline reading of the upstream's credits
        paid = ledger.reserve("mo", None, "/v1/music/generate", "MFV2.0", 2)
        refused = ledger.reserve("mo", None, "/v1/music/generate", "MFV2.0", 2)
        assert ledger_dollars.standing(ledger)["mo"][1] == 2 * 2 * RATE  # both held, in dollars
        ledger.credit_usd = 1_000_000  # the rate changes: calls already reserved keep theirs
        ledger.finish(refused.call_id, "refused", 422, b"{}")
        ledger.finish(paid.call_id, "done", 200, b"{}")
        assert ledger.meter(995, paid.call_id) == 5  # measured above its estimate of 2: settled at 5 credits
        assert ledger_dollars.standing(ledger)["mo"][1] == 5 * RATE
        assert ledger.totals() == {"": 0, "mo": 0} and ledger.users()[0].spent == 0  # never in credits
        [row] = [r for r in ledger.spend("user") if r.group == "mo"]
        assert (row.estimated, row.measured, row.usd) == (0, None, 5 * RATE)


@pytest.mark.parametrize("rate", [0, -5, 2.5, float("nan"), True, "250000"])
def test_a_rate_set_by_code_is_a_positive_whole_number_of_micros_or_refused(tmp_path: Path, rate: object) -> None:
    """`build(credit_usd=...)` and embedders set the ledger's rate without the CLI's check: at 0 five calls on a $1
    budget were all sent and spent $0, and a batch raised ZeroDivisionError; at -5 the budget grew with each call."""
    with open_ledger(str(tmp_path / "ledger.sqlite3")) as ledger:
        with pytest.raises(ValueError, match="positive whole number of millionths of a dollar"):
            ledger.credit_usd = rate  # type: ignore[assignment]
        assert ledger.credit_usd is None  # unchanged: a dollar budget's service call is refused (no rate)
        ledger.credit_usd = RATE
        ledger.credit_usd = None

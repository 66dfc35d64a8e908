"""Attacks on dollar budgets and the credit rate (issue 37, "Money across providers"): every form a person or a
script may type is either a budget that says what it is, or refused in one line; a rate so small that the
service's calls cost nothing under a dollar budget is refused (it would switch the budget off)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ipymusicgen.models import dollar_prices as dp


@pytest.mark.parametrize("rate", ["1e-300", "1e-400", "0.00000001", "0E-10", "-0", "0x1", "1e-5"])
def test_a_credit_rate_too_small_to_be_real_is_refused(monkeypatch: pytest.MonkeyPatch, rate: str) -> None:
    with pytest.raises(dp.DollarPriceError, match=dp.ENV_CREDIT_DOLLARS):
        dp.credit_rate(rate)
    monkeypatch.setenv(dp.ENV_CREDIT_DOLLARS, rate)
    with pytest.raises(dp.DollarPriceError, match=dp.ENV_CREDIT_DOLLARS):
        dp.service_dollars(3)  # a service call under a dollar budget: not free


@pytest.mark.parametrize("price", ["1e-300", "0.00001/min"])
def test_a_song_price_too_small_to_be_real_is_refused(monkeypatch: pytest.MonkeyPatch, price: str) -> None:
    monkeypatch.setenv(dp.ENV_DOLLAR_PRICES, f"lyria:lyria-3-clip-preview={price}")
    with pytest.raises(dp.DollarPriceError, match=dp.ENV_DOLLAR_PRICES):
        dp.price_table()


def test_the_smallest_real_rate_and_price_are_taken() -> None:
    assert dp.credit_rate("0.0001") == Decimal("0.0001") and dp.credit_rate(" 0.005 ") == Decimal("0.005")
    assert dp.parse_prices("lyria:lyria-3-clip-preview=0.0001")


@pytest.mark.parametrize(
    ("given", "amount", "shown"),
    [
        ("$-0", Decimal(0), "$0.00"),
        (-0.0, Decimal(0), "$0.00"),
        ("-0 usd", Decimal(0), "$0.00"),
        ("$0.001", Decimal("0.001"), "$0.001"),  # not shown as "$0.00": it is not nothing
        ("5 usd ", Decimal(5), "$5.00"),
        ("  $3.50  ", Decimal("3.50"), "$3.50"),
    ],
)
def test_a_dollar_budget_says_what_it_holds(given: object, amount: Decimal, shown: str) -> None:
    budget = dp.parse_budget(given) if isinstance(given, str) else dp.dollar_budget(given)
    assert isinstance(budget, dp.DollarBudget)
    assert budget.amount == amount and str(budget) == shown and not budget.amount.is_signed()


@pytest.mark.parametrize(
    "given",
    [
        "$NaN",
        "$inf",
        "$1e308",
        "$-1",
        "$",
        "usd",
        "$$5",
        "5 usd usd",
        "$5\x1b[0m",
        "$１",
        float("nan"),
        float("inf"),
        1e308,
        -0.01,
        True,
        Decimal("sNaN"),
    ],
)
def test_a_hostile_dollar_budget_is_refused_in_one_line(given: object) -> None:
    with pytest.raises(dp.DollarPriceError) as refused:
        dp.parse_budget(given) if isinstance(given, str) else dp.dollar_budget(given)
    said = str(refused.value)
    assert "\n" not in said and "\x1b" not in said and len(said) < 200

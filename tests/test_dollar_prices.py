"""Dollar prices per provider and model (models/dollar_prices.py): dated defaults, user overrides, every price
positive and finite, an engine's song priced before it is sent (the longest it can be when the engine picks
its length), and the service's credits in dollars only at a rate the user sets."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ipymusicgen.models.dollar_prices import (
    DEFAULT_PRICES,
    DollarPrice,
    DollarPriceError,
    credit_rate,
    estimate,
    parse_prices,
    price_table,
    service_dollars,
)
from ipymusicgen.models.providers import CAPABILITIES, build_engine_request


@pytest.fixture(autouse=True)
def _no_price_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSICGEN_DOLLAR_PRICES", raising=False)
    monkeypatch.delenv("MUSICGEN_CREDIT_DOLLARS", raising=False)


def test_every_model_of_the_capability_table_has_a_dated_positive_price() -> None:
    assert set(DEFAULT_PRICES) == set(CAPABILITIES)
    for price in DEFAULT_PRICES.values():
        assert price.amount > 0 and price.amount.is_finite() and "2026-11-29" in price.source


@pytest.mark.parametrize(
    ("fields", "dollars"),
    [
        ({"provider": "elevenlabs", "prompt": "x", "seconds": 3}, "0.75"),
        ({"provider": "elevenlabs", "prompt": "x", "seconds": 60}, "0.75"),
        ({"provider": "elevenlabs", "prompt": "x", "seconds": 60.5}, "1.50"),
        ({"provider": "elevenlabs", "prompt": "x", "seconds": 600}, "7.50"),
        ({"provider": "elevenlabs", "prompt": "x"}, "7.50"),  # the engine picks the length: priced at the longest
        ({"provider": "elevenlabs", "lyrics": "a\n\nb\n\nc"}, "1.50"),  # 30 s a stanza: 90 s
        ({"provider": "lyria", "prompt": "x"}, "0.04"),
        ({"provider": "lyria", "model": "lyria-3-pro-preview", "prompt": "x", "seconds": 170}, "0.08"),
    ],
)
def test_an_engine_song_is_priced_in_dollars_before_it_is_sent(fields: dict, dollars: str) -> None:
    assert estimate(build_engine_request(**fields)) == Decimal(dollars)


def test_the_user_overrides_a_price_per_song_or_per_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSICGEN_DOLLAR_PRICES", "elevenlabs:music_v1=0.80/min, lyria:lyria-3-clip-preview=0.05")
    table = price_table()
    assert table[("elevenlabs", "music_v1")] == DollarPrice(Decimal("0.80"), True, "MUSICGEN_DOLLAR_PRICES")
    assert estimate(build_engine_request(provider="elevenlabs", prompt="x", seconds=90)) == Decimal("1.60")
    assert estimate(build_engine_request(provider="lyria", prompt="x")) == Decimal("0.05")
    mine = {("lyria", "lyria-3-clip-preview"): DollarPrice(Decimal("0.07"))}
    assert estimate(build_engine_request(provider="lyria", prompt="x"), price_table(mine)) == Decimal("0.07")


@pytest.mark.parametrize(
    "text",
    ["lyria:lyria-3-clip-preview=0", "lyria:lyria-3-clip-preview=-1", "lyria:lyria-3-clip-preview=nan",
     "lyria:lyria-3-clip-preview=inf", "lyria:lyria-3-clip-preview=1e400", "lyria:lyria-3-clip-preview=free",
     "lyria=0.04", "lyria:lyria-3-clip-preview", "elevenlabs:music_v1=/min"],
)  # fmt: skip
def test_a_price_that_would_switch_a_budget_off_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(DollarPriceError) as refused:
        parse_prices(text)
    assert str(refused.value).startswith("MUSICGEN_DOLLAR_PRICES: ") and "\n" not in str(refused.value)


def test_a_bad_price_in_the_environment_refuses_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSICGEN_DOLLAR_PRICES", "lyria:lyria-3-clip-preview=0")
    with pytest.raises(DollarPriceError, match=r"dollars from 0\.0001 to"):
        estimate(build_engine_request(provider="lyria", prompt="x"))


def test_service_credits_become_dollars_only_at_a_rate_the_user_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DollarPriceError, match="set MUSICGEN_CREDIT_DOLLARS") as refused:
        service_dollars(3)
    assert "\n" not in str(refused.value)
    monkeypatch.setenv("MUSICGEN_CREDIT_DOLLARS", "0.05")
    assert service_dollars(3) == Decimal("0.15") and credit_rate() == Decimal("0.05")
    for bad in ("0", "-0.1", "nan", "x"):
        with pytest.raises(DollarPriceError):
            credit_rate(bad)


def test_a_generated_engine_song_carries_its_estimate_in_dollars() -> None:
    from ipymusicgen.sandbox import Sandbox

    with Sandbox(stage_seconds=0.05, song_seconds=2) as sandbox:
        client = sandbox.client()
        [song] = client.wait(client.generate(provider="elevenlabs", prompt="x", seconds=61), interval=0.05)
    assert song.estimate_usd == "1.50"

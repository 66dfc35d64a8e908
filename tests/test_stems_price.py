"""The stems price is an assumption, said so, and the user's own price is used (issue 37, stems)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from ipymusicgen.models import dollar_prices as dp

DOCS = Path(__file__).resolve().parents[1] / "docs" / "providers.md"


def test_the_default_stems_price_says_it_is_assumed_here_and_in_the_docs() -> None:
    assert "ASSUMED" in dp.STEMS_PRICE.source and "no stem-separation price" in dp.STEMS_PRICE.source
    text = DOCS.read_text(encoding="utf-8")
    assert "no figure published by ElevenLabs was found" in text
    assert "elevenlabs:stem-separation=" in text


@pytest.mark.parametrize(
    ("override", "seconds", "expected"),
    [
        ("elevenlabs:stem-separation=0.30/min", 61.0, Decimal("0.60")),  # two started minutes
        ("elevenlabs:stem-separation=0.40", 599.0, Decimal("0.40")),  # per song
        ("elevenlabs:stem-separation=0.10/min", None, Decimal("1.00")),  # length unknown: 10 minutes
        ("elevenlabs:stem-separation=0.10/min", float("nan"), Decimal("1.00")),
    ],
)
def test_the_users_stems_price_is_used_from_the_environment_or_a_table(
    monkeypatch: pytest.MonkeyPatch, override: str, seconds: float | None, expected: Decimal
) -> None:
    monkeypatch.setenv(dp.ENV_DOLLAR_PRICES, override)
    assert dp.stems_estimate(seconds) == expected
    monkeypatch.delenv(dp.ENV_DOLLAR_PRICES)
    table = dp.price_table(dp.parse_prices(override))
    assert dp.stems_estimate(seconds, table=table) == expected
    assert dp.stems_estimate(seconds) == dp.STEMS_PRICE.of(seconds if seconds == seconds and seconds else 600.0)


@pytest.mark.parametrize("price", ["0", "-0.5/min", "nan", "inf/min", "1e308", "\x1b[31m0.5"])
def test_a_hostile_stems_override_is_refused(monkeypatch: pytest.MonkeyPatch, price: str) -> None:
    monkeypatch.setenv(dp.ENV_DOLLAR_PRICES, f"elevenlabs:stem-separation={price}")
    with pytest.raises(dp.DollarPriceError, match=dp.ENV_DOLLAR_PRICES):
        dp.stems_estimate(90.0)


def test_a_song_longer_than_an_hour_is_priced_by_its_own_length_never_low(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(dp.ENV_DOLLAR_PRICES, raising=False)
    assert dp.stems_estimate(7200.0) == Decimal("90.00")  # 120 started minutes, not the 10 of an unknown length
    assert dp.stems_estimate(float("inf")) == dp.stems_estimate(None) == Decimal("7.50")

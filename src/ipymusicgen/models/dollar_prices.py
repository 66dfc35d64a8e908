"""US dollars per song, per provider and model: dated defaults from public prices, overridable by the user.

Every call of a synchronous engine is priced in dollars before it is sent (`estimate`). The service's own unit
is its credits (`costs.py`); they become dollars only at a rate the user sets (`MUSICGEN_CREDIT_DOLLARS`);
without one, a dollar price of a service call is refused in one line saying how to set it. Amounts are
`Decimal` (cents add up exactly); a price must be positive and finite (0 or a negative would switch a budget off).
A length the engine decides itself (an ElevenLabs prompt without `seconds`) is priced at the longest it can be,
so an estimate never comes out low. Sources and dates: docs/providers.md.

Override: `MUSICGEN_DOLLAR_PRICES="elevenlabs:music_v1=0.80/min,lyria:lyria-3-pro-preview=0.10"` (a price per
song, or per started minute with `/min`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import MappingProxyType

from ..errors import MusicGenError
from .providers import ELEVENLABS, LYRIA, MUSICFUL, EngineRequest

ENV_DOLLAR_PRICES = "MUSICGEN_DOLLAR_PRICES"
ENV_CREDIT_DOLLARS = "MUSICGEN_CREDIT_DOLLARS"
PRICES_AS_OF = "2026-11-29"
MAX_DOLLARS = Decimal(10_000)
"""The dearest price per song or minute taken: far above any real one."""
MIN_DOLLARS = Decimal("0.0001")
"""The cheapest price per song, minute or credit taken (a hundredth of a cent): below it a typo (1e-300) would
make calls all but free under a dollar budget, switching it off."""


class DollarPriceError(MusicGenError, ValueError):
    """A price that is not a positive, finite amount of dollars (or a service price with no credit rate)."""


@dataclass(frozen=True)
class DollarPrice:
    """A song's price: per song, or per started minute of music."""

    amount: Decimal
    per_minute: bool = False
    source: str = ""

    def of(self, seconds: float) -> Decimal:
        if not self.per_minute:
            return self.amount
        return self.amount * max(1, math.ceil(seconds / 60))


DEFAULT_PRICES: Mapping[tuple[str, str], DollarPrice] = MappingProxyType(
    {
        **{
            (ELEVENLABS, model): DollarPrice(Decimal("0.75"), per_minute=True, source="docs.venice.ai, read 2026-11-29")
            for model in ("music_v1", "music_v2", "music_v2_5")
        },
        (LYRIA, "lyria-3-clip-preview"): DollarPrice(Decimal("0.04"), source="getaibook.com, read 2026-11-29"),
        (LYRIA, "lyria-3-pro-preview"): DollarPrice(Decimal("0.08"), source="getaibook.com, read 2026-11-29"),
    }
)


def dollars(value: object, where: str, entry: str) -> Decimal:
    """A positive, finite amount of dollars at most `MAX_DOLLARS`; anything else one line naming where."""
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        amount = Decimal("NaN")
    if not amount.is_finite() or amount < MIN_DOLLARS or amount > MAX_DOLLARS:
        raise DollarPriceError(f"{where}: the price in {entry[:80]!r} must be a number of dollars from {MIN_DOLLARS} "
                               f"to {MAX_DOLLARS}")  # fmt: skip
    return amount


def parse_prices(text: str, where: str = ENV_DOLLAR_PRICES) -> dict[tuple[str, str], DollarPrice]:
    """`provider:model=0.75/min,provider:model=0.04` as a table (the user's overrides)."""
    table: dict[tuple[str, str], DollarPrice] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        provider, colon, model = name.strip().partition(":")
        if not sep or not colon or not model.strip():
            raise DollarPriceError(f"{where}: write each entry provider:model=DOLLARS[/min] (got {entry[:80]!r})")
        per_minute = value.strip().lower().endswith("/min")
        amount = dollars(value.strip()[:-4] if per_minute else value, where, entry)
        table[(provider.strip().lower(), model.strip())] = DollarPrice(amount, per_minute, source=where)
    return table


def price_table(overrides: Mapping[tuple[str, str], DollarPrice] | None = None) -> dict[tuple[str, str], DollarPrice]:
    """The defaults, then the environment's overrides, then the caller's."""
    table = dict(DEFAULT_PRICES)
    env = os.environ.get(ENV_DOLLAR_PRICES, "")
    if env.strip():
        table.update(parse_prices(env))
    table.update(overrides or {})
    return table


def estimate(request: EngineRequest, table: Mapping[tuple[str, str], DollarPrice] | None = None) -> Decimal:
    """What a synchronous engine's song costs in dollars, before it is sent (the longest it can be when the
    engine picks its length)."""
    prices = table if table is not None else price_table()
    price = prices.get((request.provider, request.model_name))
    if price is None:
        raise DollarPriceError(
            f"{request.provider} ({request.model_name}) has no dollar price: add it to {ENV_DOLLAR_PRICES}"
        )
    cap = request.capability
    seconds = request.length_seconds
    if seconds is None:
        seconds = cap.max_seconds or 0.0
    return price.of(seconds)


def credit_rate(value: str | None = None) -> Decimal:
    """Dollars per service credit, as the user set it (`MUSICGEN_CREDIT_DOLLARS`); none set is refused."""
    text = value if value is not None else os.environ.get(ENV_CREDIT_DOLLARS, "")
    if not text.strip():
        raise DollarPriceError(
            f"A dollar price of a {MUSICFUL} call needs the dollars one credit costs: set {ENV_CREDIT_DOLLARS} "
            "(for example 0.05), or give that budget in credits."
        )
    return dollars(text, ENV_CREDIT_DOLLARS, text)


def service_dollars(credits: int, rate: Decimal | None = None) -> Decimal:
    """A service call's price in dollars, beside its credits (never added to them)."""
    return (rate if rate is not None else credit_rate()) * credits


# -- budgets in dollars ------------------------------------------------------------------------------------

MAX_BUDGET_DOLLARS = Decimal(1_000_000)
"""The largest dollar budget taken: far above any real spend (1e30 is a typo, refused)."""


@dataclass(frozen=True)
class DollarBudget:
    """A budget in US dollars across providers (`--budget '$5'`, `budget_usd=5`): an engine's song counts at its
    dollar price, a service call at its credits times the user's rate (`MUSICGEN_CREDIT_DOLLARS`)."""

    amount: Decimal

    def __str__(self) -> str:
        cents = self.amount.quantize(Decimal("0.01"))
        return f"${cents}" if cents == self.amount else f"${self.amount.normalize():f}"


def dollar_budget(value: object, where: str = "budget") -> DollarBudget:
    """`5`, `"5"`, `"$5"`, `"5 usd"` as a `DollarBudget` from $0 (send nothing) to `MAX_BUDGET_DOLLARS`."""
    text = str(value).strip()
    text = text.removeprefix("$").strip()
    if text.lower().endswith("usd"):
        text = text[:-3].strip()
    try:
        amount = Decimal(text) if text.isascii() and not isinstance(value, bool) else Decimal("NaN")
    except (InvalidOperation, ValueError):
        amount = Decimal("NaN")
    if amount.is_finite() and amount == 0:
        amount = Decimal(0)  # "$-0" is $0, said as "$0.00"
    if not amount.is_finite() or amount < 0 or amount > MAX_BUDGET_DOLLARS:
        shown = str(value)[:40].encode("unicode_escape").decode()
        raise DollarPriceError(f"{where} must be dollars from $0 to ${MAX_BUDGET_DOLLARS} (got {shown!r})")
    return DollarBudget(amount)


def parse_budget(value: object, where: str = "budget") -> object:
    """A budget as given: a `DollarBudget` when it is written in dollars (`"$5"`, `"5usd"`); any other text is
    refused (`"10"` is no number of credits); a number is left as it is (credits, checked where credits are)."""
    if isinstance(value, DollarBudget):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text.startswith("$") or text.endswith("usd"):
            return dollar_budget(value, where)
        shown = value[:40].encode("unicode_escape").decode()
        raise DollarPriceError(f"{where} must be whole credits (30) or dollars ('$5') (got {shown!r})")
    return value


def budget_charge(request: object, budget: object, rate: Decimal | None = None) -> Decimal | int:
    """What one request counts against `budget`, in the budget's unit: dollars for a `DollarBudget` (a service
    call at its credits times the user's rate, refused in one line without one), else the service's credits (an
    engine's song cannot be paid from credits: refused in one line saying to give the budget in dollars)."""
    from .costs import estimate_credits

    engine_song = isinstance(request, EngineRequest)
    if isinstance(budget, DollarBudget):
        return estimate(request) if engine_song else service_dollars(estimate_credits(request), rate)  # type: ignore[arg-type]
    if engine_song:
        if budget is None:
            return 0  # no budget: an engine's song costs no credits (its dollars are in its price)
        raise DollarPriceError(
            f"A budget in credits cannot pay for a {request.provider} song (it is priced in dollars): give the "  # type: ignore[union-attr]
            "budget in dollars (--budget '$5', budget='$5' or budget_usd=5)."
        )
    return estimate_credits(request)


def usd_estimate(request: object) -> Decimal | None:
    """A request's price in dollars where one is known: an engine's song always; a service call only at the rate
    the user set (None without one; a bad rate is refused in one line)."""
    from .costs import estimate_credits

    if isinstance(request, EngineRequest):
        return estimate(request)
    if not os.environ.get(ENV_CREDIT_DOLLARS, "").strip():
        return None
    return service_dollars(estimate_credits(request))


MAX_BUDGET_CREDITS = 10**12
"""The largest credits budget a command line takes (as the gateway's and the agent server's)."""


def budget_option(text: str) -> int | DollarBudget:
    """`--budget 30` (whole credits, ASCII digits) or `--budget '$5'` / `5usd` (dollars across providers), as a
    magic's line gives it; anything else (NaN, a sign, 1e30, escape codes) is refused in one line."""
    import argparse

    clean = text.strip()
    if clean.isascii() and clean.isdigit() and int(clean) <= MAX_BUDGET_CREDITS:
        return int(clean)
    try:
        budget = parse_budget(clean, "--budget")
    except DollarPriceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not isinstance(budget, DollarBudget):  # pragma: no cover - parse_budget refuses every other text
        raise argparse.ArgumentTypeError("--budget must be whole credits or dollars ('$5')")
    return budget


def usd_option(text: str) -> DollarBudget:
    """`--budget-usd 5` (or `'$5'`): dollars across providers, refused in one line as `dollar_budget` refuses."""
    import argparse

    try:
        return dollar_budget(text, "--budget-usd")
    except DollarPriceError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


STEMS = "stem-separation"
"""The price table's model name for ElevenLabs stem separation (`elevenlabs:stem-separation=0.50/min`)."""
STEMS_PRICE = DollarPrice(
    Decimal("0.75"),
    per_minute=True,
    source="ASSUMED: ElevenLabs publishes no stem-separation price that could be found (searched 2026-11-29); "
    "the compose default, so an estimate is not low (docs/providers.md)",
)
"""Not a published price: the user sets theirs with `MUSICGEN_DOLLAR_PRICES="elevenlabs:stem-separation=0.30/min"`
(or `stems_estimate(seconds, table=...)`)."""


def stems_estimate(seconds: float | None, table: Mapping[tuple[str, str], DollarPrice] | None = None) -> Decimal:
    """What separating a song of `seconds` into stems costs in dollars, before it is sent (a length not known: the
    longest song, 600 s, so an estimate never comes out low). `table`: the user's prices (default: `price_table()`,
    the environment's overrides over the defaults)."""
    price = (table if table is not None else price_table()).get((ELEVENLABS, STEMS), STEMS_PRICE)
    known = seconds is not None and math.isfinite(seconds) and seconds > 0
    return price.of(seconds if known else 600.0)  # type: ignore[arg-type]  # a longer song: its own length

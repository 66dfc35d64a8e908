"""Credits per paid call, per model: the one table every estimate reads (batch budgets, the studio's cost line).

The service does not publish prices. Its sister service charges 2 credits per call for its older models
and 3 for its newest (observed-behaviour.md), so that is the default table; a model missing from it, or a
call that names no model, is charged the dearest known price, so an estimate never comes out low.
Override with the environment (`MUSICGEN_CREDIT_COSTS="MFV3.0=3,MFV2.0=2,lyrics=1,*=3"`), read at each estimate.

Every price is a whole number of credits from 1 to `MAX_COST`: a price of 0, a negative or a non-number would
switch off the budget and credits-left checks that stand between a user and a paid call, and one past `MAX_COST`
(1e30) could not be held by a ledger's or a journal's 64-bit sums, so it is refused with one line naming the
variable and the entry (`CostTableError`).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from ..errors import MusicGenError

ENV_COSTS = "MUSICGEN_CREDIT_COSTS"
LYRICS = "lyrics"
"""Key of the table for a lyrics call (POST /v1/lyrics)."""
FALLBACK = "*"
"""Key of the table for a model it does not name (and for a call that names no model)."""
MIN_COST = 1
MAX_COST = 1_000_000
"""The dearest price taken: far above any real one, and a million calls of it stay inside 64-bit integers."""

DEFAULT_COSTS: Mapping[str, int] = MappingProxyType(
    {
        # v1 models: newest 3, older 2
        "MFV3.0": 3,
        "MFV2.0": 2,
        "MFV1.5X": 2,
        "MFV1.5": 2,
        "MFV1.0": 2,
        # v2 models: newest 3, older 2
        "v4.5-plus": 3,
        "v4.5": 2,
        "v4.0": 2,
        "v3.5": 2,
        "v3.0": 2,
        LYRICS: 1,
        FALLBACK: 3,
    }
)


class CostTableError(MusicGenError, ValueError):
    """A price that is not a whole number of credits above 0 (or an entry that is not MODEL=CREDITS)."""


def price(value: Any, entry: str, where: str = ENV_COSTS) -> int:
    """A price as credits: a whole number above 0 and finite, else a one-line `CostTableError` naming the entry."""
    if isinstance(value, str):
        text = value.strip()
        try:
            number: Any = float(text) if text else math.nan
        except ValueError:
            number = math.nan
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
    else:
        number = math.nan
    if not math.isfinite(number) or number <= 0 or number != int(number) or number > MAX_COST:
        raise CostTableError(
            f"{where}: the price in {entry[:80]!r} must be a whole number of credits above 0, at most {MAX_COST}"
        )
    return int(number)


def parse_costs(text: str) -> dict[str, int]:
    """`"MFV3.0=3, *=4"` → `{"MFV3.0": 3, "*": 4}`; a malformed entry raises `CostTableError` naming it."""
    table: dict[str, int] = {}
    for part in text.replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        model, sep, value = part.partition("=")
        if not sep or not model.strip():
            raise CostTableError(f"{ENV_COSTS}: expected MODEL=CREDITS, got {part[:80]!r}")
        table[model.strip()] = price(value, part)
    return table


def cost_table() -> dict[str, int]:
    """The table in force: the defaults, then the environment's overrides (`MUSICGEN_CREDIT_COSTS="MFV3.0=4, *=5"`, read
    each time: there is no table of overrides kept in the module)."""
    table = dict(DEFAULT_COSTS)
    env = os.environ.get(ENV_COSTS)
    if env:
        table.update(parse_costs(env))
    table[FALLBACK] = max(table.get(FALLBACK, MIN_COST), MIN_COST)
    return table


MODEL_FIELDS = ("mv", "model_version", "model")
"""Where a request names its model: `mv` in v1, `model_version` in v2, `model` in payloads journalled before."""


def model_of(request: Any) -> str | None:
    """The model a request asks for, or None when it names none: the one rule, for prices, the library and
    spend (SQL calls it as `request_model`)."""
    if isinstance(request, BaseModel):
        name = next((v for v in (getattr(request, f, None) for f in MODEL_FIELDS) if v), None)
    elif isinstance(request, Mapping):
        name = next((v for v in (request.get(f) for f in MODEL_FIELDS) if v), None)
    else:
        name = None
    return str(name) if name else None


def _is_lyrics(request: Any) -> bool:
    if type(request).__name__ == "LyricsRequest":
        return True
    if isinstance(request, Mapping):
        keys = set(request) - {"v2"}
        return keys == {"prompt"}
    return False


def credits_for_model(model: str | None, table: Mapping[str, int] | None = None) -> int:
    """Credits one call on `model` costs; the fallback (the dearest by default) when unknown or None."""
    table = table if table is not None else cost_table()
    if model is not None and model in table:
        return int(table[model])
    return max(int(table.get(FALLBACK, MIN_COST)), MIN_COST)


def estimate_credits(request: Any, table: Mapping[str, int] | None = None) -> int:
    """Credits one request (a v1/v2/lyrics model or mapping) will cost, never less than the real price known."""
    table = table if table is not None else cost_table()
    if _is_lyrics(request):
        return int(table.get(LYRICS, MIN_COST))
    return credits_for_model(model_of(request), table)


def estimate_total(requests: Iterable[Any], table: Mapping[str, int] | None = None) -> int:
    """Sum of `estimate_credits` over many requests (one table read for all)."""
    table = table if table is not None else cost_table()
    return sum(estimate_credits(r, table) for r in requests)

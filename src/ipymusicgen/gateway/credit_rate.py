"""The gateway's credit rate: the US dollars one service credit costs, so a dollar budget can pay service calls.

The notebook's rate and parser (`MUSICGEN_CREDIT_DOLLARS`, `models.dollar_prices.credit_rate`: a positive, finite
amount from $0.0001 to $10,000; 0, NaN, a sign or 1e309 refused in one line), given to `gateway serve` as
`--credit-dollars RATE` or in its environment. A service call paid from a dollar budget
(`storage.ledger_units.pays_in_dollars`) is reserved at its credits times this rate, in millionths of a dollar,
and settled in dollars at the same rate (never in credits: units are never added). Without a rate such a call is
refused in one line saying how to set it (`no_rate_answer`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from starlette.responses import JSONResponse

from ..models.dollar_prices import ENV_CREDIT_DOLLARS, credit_rate
from ..storage.ledger_dollars import to_micros

NO_RATE = (
    "Insufficient credits: {user}'s service calls are paid from a dollar budget, and this gateway has no credit "
    "rate (the dollars one credit costs), so this call cannot be priced. Nothing was sent. Only the gateway's admin "
    f"can set one: gateway serve --credit-dollars 0.05 (or {ENV_CREDIT_DOLLARS}=0.05 where it runs)."
)


def rate_micros(given: str | None = None, environ: Mapping[str, str] | None = None) -> int | None:
    """Millionths of a dollar per credit from `--credit-dollars` (else the environment's `MUSICGEN_CREDIT_DOLLARS`);
    None when neither is set. A rate that is not a positive, finite amount raises `DollarPriceError` (one line)."""
    env = os.environ if environ is None else environ
    text = given if given is not None else env.get(ENV_CREDIT_DOLLARS, "")
    if not text.strip():
        return None
    return to_micros(credit_rate(text))


def no_rate_answer(user: str) -> JSONResponse:
    """The service's own refusal shape (an error inside an HTTP 200, as a budget's), naming how to set the rate."""
    message = NO_RATE.format(user=user)
    return JSONResponse({"status": 402, "message": message, "data": None})

"""The agent server's budget in one unit: the service's credits (as before) or US dollars across providers.

The spellings are the notebook's (`models.dollar_prices`: `'$5'`, `'5usd'`, `budget_usd=5`, `batch.prepare`'s
`either_budget`), so a budget means the same in a cell, a batch and here. Units are never added together: a dollar
budget pays an engine's song at its price-table dollars and a service call at its credits times the rate the user
set (`MUSICGEN_CREDIT_DOLLARS`; without one, such a call is refused in one line saying how to set it); a credits
budget refuses dollar-priced work (`desk.in_dollars`).
"""

from __future__ import annotations

import numbers
import os
from decimal import Decimal
from typing import Any

from ..batch.prepare import either_budget
from ..batch.rows import BatchError
from ..models import dollar_prices
from ..models.dollar_prices import MAX_BUDGET_CREDITS, DollarBudget, DollarPriceError, parse_budget
from .agent_budget import Amount, shown


def server_budget(budget: Any, budget_usd: Any = None) -> int | DollarBudget | None:
    """`budget` (whole credits, or dollars written `'$5'` / `'5usd'` / a `DollarBudget`) or `budget_usd` (dollars),
    as the server counts it; anything else (NaN, a sign, a fraction of a credit, 1e309, both at once) is refused in
    one line naming the option (a `DollarPriceError`)."""
    try:
        value = parse_budget(either_budget(budget, budget_usd))
    except (BatchError, DollarPriceError) as exc:
        raise DollarPriceError(f"budget: {str(exc).removeprefix('budget: ')}") from None
    if value is None or isinstance(value, DollarBudget):
        return value
    whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not whole or not 0 <= int(value) <= MAX_BUDGET_CREDITS:
        shown = str(value)[:40]
        raise DollarPriceError(
            f"budget: must be whole credits from 0 to {MAX_BUDGET_CREDITS} or dollars ('$5') (got {shown!r})"
        )
    return int(value)


def amount_of(budget: int | DollarBudget | None) -> Amount | None:
    """The budget's number in its own unit: credits (int) or dollars (Decimal)."""
    return budget.amount if isinstance(budget, DollarBudget) else budget


def described(budget: int | DollarBudget | None) -> str:
    """`a budget of 30 credits`, `a budget of $5.00 (US dollars, across providers)`, `no budget`."""
    if budget is None:
        return "no budget"
    if isinstance(budget, DollarBudget):
        return f"a budget of {budget} (US dollars, across providers)"
    return f"a budget of {budget} credits"


def service_charge(credits: int) -> tuple[Decimal, Decimal]:
    """A service call's dollars under a dollar budget and the rate it was priced at; without a rate set, one line
    saying how to set it (`DollarPriceError`)."""
    rate = dollar_prices.credit_rate()
    return rate * credits, rate


def credit_rate_set() -> Decimal | None:
    """The dollars one credit costs as the user set it, None when not set (a bad rate: `DollarPriceError`)."""
    if not os.environ.get(dollar_prices.ENV_CREDIT_DOLLARS, "").strip():
        return None
    return dollar_prices.credit_rate()


def dollar_charge(plan: Any, priced_in_dollars: bool) -> tuple[Decimal, Decimal | None]:
    """What a plan counts against a dollar budget and the credit rate a service call was priced at: an engine's song
    at the price table's dollars (unrounded: never less than its price), stems or a batch at their dollars, a service
    call at its credits times the user's rate (none set: `DollarPriceError` saying how to set it)."""
    if plan.kind == "engine":
        return dollar_prices.estimate(plan.request.engine), None
    if priced_in_dollars or (plan.kind == "batch" and plan.dollars is not None):
        return Decimal(plan.dollars or 0), None
    return service_charge(plan.estimate)


def over_budget(left: Amount, budget: int | DollarBudget, charge: Amount) -> str:
    """The refusal of a call the budget's rest does not cover, in the budget's unit."""
    if isinstance(budget, DollarBudget):
        return (
            f"budget: this server may spend {shown(left, True)} more of its {budget} (US dollars), and this call "
            f"costs about {shown(charge, True)}; nothing was sent"
        )
    return (
        f"budget: this server may spend {left} more credit(s) of its {budget}, and this call costs about {charge}; "
        "nothing was sent"
    )


def dollars_refusal(what: str, dollars: object, budget: int) -> str:
    """Why a credits budget does not pay a dollar-priced call (units are never added)."""
    return (
        f"budget: this server's budget is {budget} credits and {what} is priced in dollars (about ${dollars}); "
        "start the server with a budget in dollars (--budget '$5' or --budget-usd 5) or without --budget to make "
        "one; nothing was sent"
    )

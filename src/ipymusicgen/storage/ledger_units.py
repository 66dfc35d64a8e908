"""Which unit pays a call at the gateway, and the dollar totals' reads and moves (below `ledger` and
`ledger_dollars`, which both use them: the ledger's service calls paid from a dollar budget, the engines' calls).

A service call is paid in exactly one unit, decided in its reservation's transaction (`pays_in_dollars`): credits
when a credits budget applies, dollars at the gateway's credit rate when only a dollar budget does. Amounts in
dollars are whole millionths (`micros`).
"""

from __future__ import annotations

from typing import Any


def _left(cur: Any, user: str) -> tuple[int | None, str | None, bool]:
    """(micros left, whose budget is smallest, whether the user has a dollar budget) from the running totals."""
    team = cur.one("SELECT budget_usd, COALESCE(spent_usd, 0) FROM team WHERE id = 1")
    mine = cur.one("SELECT budget_usd, COALESCE(spent_usd, 0) FROM users WHERE name = ?", (user,))
    left: list[tuple[int, str]] = []
    if team and team[0] is not None:
        left.append((int(team[0]) - int(team[1]), "the team's dollar budget"))
    has_budget = bool(mine and mine[0] is not None)
    if has_budget:
        left.append((int(mine[0]) - int(mine[1]), f"{user}'s dollar budget"))
    if not left:
        return None, None, has_budget
    amount, whose = min(left)
    return max(amount, 0), whose, has_budget


def pays_in_dollars(cur: Any, user: str) -> bool:
    """Whether a service (credits) call of `user` is paid from a dollar budget: the user has a dollar budget and no
    credits budget, or neither and the team has only a dollar budget. A credits budget, where one applies, pays as
    before (a user with both pays service calls in credits, engine songs in dollars): one unit per call."""
    mine = cur.one("SELECT budget, budget_usd FROM users WHERE name = ?", (user,))
    if mine and mine[0] is not None:
        return False
    if mine and mine[1] is not None:
        return True
    team = cur.one("SELECT budget, budget_usd FROM team WHERE id = 1")
    return bool(team and team[0] is None and team[1] is not None)


def dollars_left(cur: Any, user: str) -> tuple[int | None, str | None]:
    """(micros left, whose dollar budget is smallest) for a service call paid in dollars."""
    left, whose, _ = _left(cur, user)
    return left, whose


def move_usd(cur: Any, user: str, micros: int) -> None:
    """Move the user's and the team's dollar totals (a service call paid in dollars: `GatewayLedger._move`)."""
    _move(cur, user, micros)


def _move(cur: Any, user: str, micros: int) -> None:
    if micros:
        cur.run("UPDATE team SET spent_usd = COALESCE(spent_usd, 0) + ? WHERE id = 1", (micros,))
        cur.run("UPDATE users SET spent_usd = COALESCE(spent_usd, 0) + ? WHERE name = ?", (micros, user))


def checked_rate_micros(rate: int | None) -> int | None:
    """A gateway's credit rate in millionths of a dollar as set by code (`build(credit_usd=...)`), checked as the
    CLI's `--credit-dollars` text is (`dollar_prices.credit_rate`): a price is positive and finite. At 0 a dollar
    budget paid nothing for any call; below it, it grew with each."""
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0):
        raise ValueError(f"a credit rate is a positive whole number of millionths of a dollar, not {rate!r}")
    return rate

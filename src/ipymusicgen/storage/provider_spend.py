"""Spend per provider, from the journal's attempts (each records its provider: migration 14).

The service's calls are counted in its credits (estimated from the price table, measured where batch runs read
the key's counts); the engines' in the US dollars each attempt was priced at before it was sent. The two units
stay in their own columns and are never added together; the service's credits are shown in dollars only at the
rate the user set (`MUSICGEN_CREDIT_DOLLARS`), beside them. A price in the file that is not a positive, finite
amount (a tampered or damaged row) is counted as unpriced, never summed.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from ..models.costs import credits_for_model
from ..models.dollar_prices import ENV_CREDIT_DOLLARS, MAX_DOLLARS, credit_rate
from ..models.providers import MUSICFUL, PROVIDERS

Rows = Callable[[str, Iterable[Any]], list[dict[str, Any]]]

PAID = ("submitted", "unknown", "pending")
"""Outcomes that may have cost money (a rejected call did not). A pending call is being sent, or its sender died
before it could say: either way it may have been charged, and it is listed with the unknowns."""
OTHER = "other"
"""The row of attempts whose provider column holds a name the project never writes (a damaged or tampered
journal): listed with its calls and unknowns, its money unpriced, never counted as the service's credits, and
its name never shown (it could hold escape codes)."""
SPEND_SQL = (
    "SELECT COALESCE(a.provider, 'musicful') AS p, request_model(a.payload) AS m, a.outcome AS o,"
    " CASE WHEN json_valid(a.payload) THEN json_extract(a.payload, '$.estimate_usd') END AS usd,"
    " COUNT(*) AS calls, SUM((SELECT COUNT(*) FROM tasks t WHERE t.attempt_id = a.id AND t.state = 'complete'))"
    " AS songs, MIN(a.created_at) AS first FROM attempts a"
    f" WHERE a.outcome IN {PAID} AND a.endpoint NOT LIKE '%lyric%' GROUP BY p, m, o, usd"
)
COLUMNS = ("calls", "songs", "unknown", "credits_estimated", "credits_measured", "usd_estimated", "usd_measured",
           "unpriced")  # fmt: skip


def usd_of(value: Any) -> Decimal | None:
    """A journalled dollar price, or None when it is not a positive, finite amount of at most `MAX_DOLLARS`."""
    try:
        amount = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return amount if amount.is_finite() and 0 < amount <= MAX_DOLLARS else None


def spend_rows(rows: Rows, measured_credits: int | None = None) -> list[dict[str, Any]]:
    """One row per provider that made a paid call, in the order of its first call."""
    table: dict[str, dict[str, Any]] = {}
    firsts: dict[str, float] = {}
    for r in rows(SPEND_SQL, ()):
        provider = r["p"] if r["p"] in PROVIDERS else OTHER
        group = table.setdefault(provider, {"provider": provider, **dict.fromkeys(COLUMNS, 0)})
        firsts[provider] = min(firsts.get(provider, r["first"]), r["first"])
        calls = int(r["calls"])
        group["calls"] += calls
        group["songs"] += int(r["songs"] or 0)
        group["unknown"] += calls if r["o"] in ("unknown", "pending") else 0
        if provider == MUSICFUL:
            group["credits_estimated"] += calls * credits_for_model(r["m"])
            continue
        price = usd_of(r["usd"]) if provider != OTHER else None
        if price is None:
            group["unpriced"] += calls
        else:
            group["usd_estimated"] += price * calls
    rate = credit_rate() if _rate_set() else None  # a bad rate is refused in one line, not shown as dollars
    for provider, group in table.items():
        if provider == MUSICFUL:
            group["credits_measured"] = measured_credits
            group["usd_estimated"] = rate * group["credits_estimated"] if rate is not None else None
            group["usd_measured"] = None
        else:  # an engine's price is not in credits, and no engine tells what a call cost afterwards
            group["credits_estimated"] = group["credits_measured"] = group["usd_measured"] = None
            group["usd_estimated"] = Decimal(group["usd_estimated"]) if provider != OTHER else None
    return sorted(table.values(), key=lambda g: firsts[g["provider"]])


def _rate_set() -> bool:
    import os

    return bool(os.environ.get(ENV_CREDIT_DOLLARS, "").strip())


def _total(rows: list[dict[str, Any]], column: str) -> Any:
    values = [r[column] for r in rows if r[column] is not None]
    return sum(values) if values else None


@dataclass(frozen=True)
class ProviderSpend:
    """`library().spend(by="provider")`: calls, songs, unknowns and money per provider; `.to_pandas()`."""

    rows: list[dict[str, Any]]
    by: str = "provider"
    COLUMNS = COLUMNS

    @property
    def total(self) -> dict[str, Any]:
        """Sums per column: credits with credits, dollars with dollars (a converted figure only where shown)."""
        counts = {c: sum(r[c] for r in self.rows) for c in ("calls", "songs", "unknown", "unpriced")}
        return {**counts, **{c: _total(self.rows, c) for c in COLUMNS[3:7]}}

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=["provider", *COLUMNS])

    def _cells(self, r: dict[str, Any]) -> list[str]:
        credits = "" if r["credits_estimated"] is None else f"{r['credits_estimated']} credits"
        measured = "" if r["credits_measured"] is None else f"{r['credits_measured']} credits"
        usd = "" if r["usd_estimated"] is None else f"${r['usd_estimated']:.2f}"
        return [r["provider"], str(r["calls"]), str(r["songs"]), str(r["unknown"]), credits, measured, usd,
                str(r["unpriced"] or "")]  # fmt: skip

    HEADS = ("provider", "calls", "songs", "unknown", "estimated", "measured", "dollars~", "unpriced")

    def __repr__(self) -> str:
        lines = ["  ".join(f"{h:>12}" for h in self.HEADS)]
        lines += ["  ".join(f"{c[:12]:>12}" for c in self._cells(r)) for r in self.rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.HEADS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>" for r in self.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# -- the gateway's ledger ---------------------------------------------------------------------------------


def provider_of_path(path: str) -> str:
    """The provider a gateway call's upstream path belongs to, by the engines' own paths (`engines`)."""
    from ..engines import elevenlabs, lyria

    clean = str(path or "").split("?")[0]
    if clean in {e.path for e in elevenlabs.RULES.endpoints}:
        return elevenlabs.RULES.provider
    if lyria.model_of_path(clean) is not None:
        return lyria.RULES.provider
    return MUSICFUL


LEDGER_UNITS = MappingProxyType({MUSICFUL: "credits"})
"""What a ledger call's `estimated`/`measured` count, per provider: the ledger prices the service's calls only, so
an engine call it holds is listed with its calls and unknowns, its money unpriced (never added as credits)."""


@dataclass(frozen=True)
class LedgerProviderRow:
    group: str
    unit: str
    calls: int
    estimated: int | None
    measured: int | None
    unknown: int


def ledger_spend(calls: Iterable[dict[str, Any]], charged: Iterable[str]) -> list[LedgerProviderRow]:
    """`gateway spend --by provider` from the ledger's call rows (`GatewayLedger.calls()`), as `GatewayLedger.spend`
    counts: estimates of calls in a charged state, measured wherever measured, unknown = pending or unknown."""
    charging = set(charged)
    found: dict[str, dict[str, Any]] = {}
    for call in calls:
        provider = provider_of_path(call.get("endpoint") or "")
        group = found.setdefault(provider, {"calls": 0, "estimated": 0, "measured": None, "unknown": 0})
        group["calls"] += 1
        if call.get("state") in charging:
            group["estimated"] += int(call.get("estimated") or 0)
        if call.get("measured") is not None:
            group["measured"] = (group["measured"] or 0) + int(call["measured"])
        group["unknown"] += 1 if call.get("state") in ("pending", "unknown") else 0
    rows = []
    for provider in sorted(found):
        group, unit = found[provider], LEDGER_UNITS.get(provider)
        priced = unit is not None
        rows.append(LedgerProviderRow(provider, unit or "unpriced", group["calls"],
                                      group["estimated"] if priced else None, group["measured"] if priced else None,
                                      group["unknown"]))  # fmt: skip
    return rows

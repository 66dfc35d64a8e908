"""Consent a model cannot forge: a paid call is quoted, and only the user's press in the card (an app-only tool,
MCP Apps' `_meta.ui.visibility: ["app"]`) pays it.

A host that declares the Apps extension gets a quote instead of a paid call: the price is the server's own (the
cost table over the request as validated), and the quote is single-use, bound to this server process and to the
connection that asked, and short-lived (`QUOTE_TTL_S`). The quote names the journal attempt its call is recorded
under (the batch tables' row the elicitation flow uses), so a call paid from the card is as durable and idempotent
as any other. The extension itself (`mcp.server.apps`) is the official SDK's: this module only keeps the quotes.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..models import costs
from .agent_budget import shown
from .desk import SHOWN, AgentDesk, AgentError, Plan, in_dollars
from .engine_songs import dollars_of, price_view
from .text import quoted

CARD_URI = "ui://ipymusicgen/consent"
QUOTE_TTL_S = 300.0
ENV_TTL = "MUSICGEN_QUOTE_TTL_S"
"""A quote not confirmed within five minutes is refused (the user is asked again, at the price of then)."""
PROVIDER = "musicful"
"""The service the paid tools call unless a song names an engine (`provider`: priced in dollars)."""
PROCESS = secrets.token_hex(6)
"""This server process's mark in its quote ids: an id of another process (or of before a restart) says so."""
KEEP_S = 3600.0
"""How long a used or expired quote is remembered (to say which it was)."""
SHAPE = re.compile(r"q-[0-9a-f]{12}-[A-Za-z0-9_-]{24}")
"""Every quote id: `q-<process mark>-<18 random bytes>`; anything else was made up."""
_CONNECTION = "ipymusicgen.consent.connection"
"""The key of this connection's random mark in the SDK's per-connection state."""
WAITING = "waiting for the user to confirm in the card: nothing was sent. Do not call this tool again for it."


class QuoteRefused(AgentError):
    """A quote id that pays nothing: made up, used, expired, of another process or connection. `unheld`: shaped
    like a quote but not held by this server (made before a restart: the journal may know it)."""

    def __init__(self, message: str, *, unheld: bool = False) -> None:
        super().__init__(message)
        self.unheld = unheld


@dataclass
class Quote:
    """A priced paid call waiting for the user's press. `plan` is what the user is shown and what is sent."""

    id: str
    connection: str
    tool: str
    plan: Plan
    created: float
    expires: float
    replan: Callable[[], Plan]
    """The same call priced again now (the cost table, the budget, the credits left, the journal)."""
    execute: Callable[[Plan], dict[str, Any]]
    """Sends it (blocking): what the tool would have answered after an elicited yes."""
    used: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def connection_mark(ctx: Any) -> str:
    """A random mark of the connection a request came on, kept in the SDK's per-connection state.

    On a handshake-era connection (stdio, a streamable HTTP session) the mark lives as long as the connection. The
    2026-07-28 protocol has no connection (each request stands alone): there a quote is bound to this process only."""
    session = ctx.request_context.session
    connection = getattr(session, "_connection", None)  # the SDK keeps its Connection private on the session
    if connection is None or connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return "stateless"
    mark = connection.state.get(_CONNECTION)
    if mark is None:
        mark = connection.state.setdefault(_CONNECTION, secrets.token_hex(16))
    return str(mark)


class QuoteBook:
    """The quotes of this server process; every check and the single use happen under one lock."""

    def __init__(self, *, ttl: float | None = None, clock: Callable[[], float] = time.time) -> None:
        given = ttl if ttl is not None else os.environ.get(ENV_TTL, QUOTE_TTL_S)
        try:
            self.ttl = float(given)
        except (TypeError, ValueError):
            self.ttl = float("nan")
        if not 0 < self.ttl <= 3600:  # a NaN fails this too
            raise AgentError(f"{ENV_TTL}: a number of seconds above 0 and at most 3600, not {str(given)[:40]!r}")
        self.clock = clock
        self._quotes: dict[str, Quote] = {}
        self._lock = threading.Lock()

    def issue(
        self,
        connection: str,
        tool: str,
        plan: Plan,
        replan: Callable[[], Plan],
        execute: Callable[[Plan], dict[str, Any]],
        **extra: Any,
    ) -> Quote:
        now = self.clock()
        quote = Quote(
            f"q-{PROCESS}-{secrets.token_urlsafe(18)}",
            connection, tool, plan, now, now + self.ttl, replan, execute, extra=extra,
        )  # fmt: skip
        with self._lock:
            self._forget(now)
            self._quotes[quote.id] = quote
        return quote

    def take(self, quote_id: object, connection: str) -> Quote:
        """The quote, marked used; or `QuoteRefused` saying which kind of id it is (nothing is sent either way)."""
        if not isinstance(quote_id, str) or not SHAPE.fullmatch(quote_id):
            raise QuoteRefused("quote_id: not a quote of this server (made up): nothing was sent")
        now = self.clock()
        with self._lock:
            quote = self._quotes.get(quote_id)
            if quote is None:
                if not quote_id.startswith(f"q-{PROCESS}-"):
                    raise QuoteRefused(
                        "quote_id: made by another server process (or before this server restarted): nothing was sent",
                        unheld=True,
                    )
                raise QuoteRefused(
                    "quote_id: no such quote (made up, or long forgotten): nothing was sent", unheld=True
                )
            if quote.connection != connection:
                raise QuoteRefused("quote_id: made on another connection: nothing was sent")
            if quote.used:
                raise QuoteRefused("quote_id: already used: nothing was sent again")
            if now >= quote.expires:
                quote.used = True
                raise QuoteRefused(
                    f"quote_id: expired {now - quote.expires:.0f} s ago (a quote lasts {self.ttl:g} s): nothing was "
                    "sent; ask again for a new quote"
                )
            quote.used = True
            return quote

    def _forget(self, now: float) -> None:
        old = [k for k, q in self._quotes.items() if now - q.expires > KEEP_S]
        for key in old:
            del self._quotes[key]


def quote_view(desk: AgentDesk, quote: Quote) -> dict[str, Any]:
    """The quote as the card shows it: the price and the balance first, in the server's own numbers; then what the
    agent wrote, each field quoted (`text.quoted`) and to be shown as text only."""
    plan = quote.plan
    payload = plan.request.to_payload()
    words = [{"field": f, "text": quoted(payload[f])} for f in SHOWN if payload.get(f)]
    engine = plan.kind == "engine"
    dollar_kind = "engine" if in_dollars(plan) else plan.kind  # an engine's song or stems: dollars alone
    price = price_view(dollar_kind, plan.estimate, plan_dollars(plan))  # dollars first, then the provider's own unit
    model = costs.model_of(plan.request) if plan.kind in ("v1", "v2") else None
    return {
        "id": quote.id,
        "tool": quote.tool,
        "kind": plan.kind,
        "what": _what(plan),
        "provider": plan.request.provider if engine else PROVIDER,
        "model": plan.request.engine.model_name if engine else model,
        "price": price,
        "credits_left": plan.credits_left,
        "budget_left": _plain(desk.budget_left()),
        "budget_left_text": None if (left := desk.budget_left()) is None else shown(left, desk.in_usd),  # "$4.25"
        "budget_unit": "USD" if desk.in_usd else "credits",
        "attempt": plan.name,
        "expires_at": dt.datetime.fromtimestamp(quote.expires, dt.timezone.utc).isoformat(timespec="seconds"),
        "expires_in_s": round(quote.expires - quote.created),
        "words": words,
        "question": desk.client.redact(desk.question(plan)),
    }


def _plain(amount: object) -> object:
    """Credits as a number; dollars as text in cents (a JSON number would round them)."""
    return f"{amount:.2f}" if isinstance(amount, Decimal) else amount


def plan_dollars(plan: Plan) -> Decimal | None:
    """A plan's price in dollars: an engine's as planned; a service call's at the user's credit rate of now."""
    return plan.dollars if in_dollars(plan) else dollars_of(plan.kind, plan.request, plan.estimate)


def price_line(plan: Plan) -> str:
    """`$1.50`, `$0.15 (3 credits)` or `3 credits`: dollars first."""
    dollars = plan_dollars(plan)
    credits = f"{plan.estimate} credit{'' if plan.estimate == 1 else 's'}"
    if dollars is None:
        return credits
    return f"${dollars}" if in_dollars(plan) else f"${dollars} ({credits})"


def _what(plan: Plan) -> str:
    if plan.kind == "engine":
        return str(plan.request.describe())
    if plan.kind == "batch":
        return f"a batch of {plan.request.rows} row(s)"
    if plan.kind == "extra":
        return f"the {plan.request.to_payload()['kind']} of one song"
    if plan.kind == "lyrics":
        return "one set of lyrics"
    return "songs (one paid call)"

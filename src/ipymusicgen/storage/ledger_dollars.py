"""The gateway ledger's dollar side: the synchronous engines' calls (ElevenLabs, Lyria) and the budgets that pay
for them, in US dollars, never in credits.

An engine's song is priced in dollars before it is sent (`models.dollar_prices`), so it is reserved from a dollar
budget: the user's (`users.budget_usd`) and, when set, the team's (`team.budget_usd`), in the same transaction that
claims its idempotency key and under the same lock as every credit reservation
(`GatewayLedger._lock_for_reserve`). A user with no dollar budget is refused: a credits budget never pays a dollar
call (units are never added). Amounts are whole millionths of a dollar (`micros`), so sums stay exact on both
engines. The calls live in `engine_calls` (ledger
migration 6), apart from the service's `calls`, so the credit meter and `gateway reconcile` never take one for a
service call; an answer (the audio itself) is kept for a repeat of the same Idempotency-Key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from ..models.providers import MUSICFUL
from .ledger import DONE, PENDING, REFUSED, UNKNOWN, GatewayLedger, _alive
from .ledger_units import _left, _move

MICROS = Decimal(1_000_000)
CHARGED_STATES = (PENDING, DONE, UNKNOWN)
"""States whose dollars count against a budget: a reservation is kept until the call is known refused."""


def to_micros(dollars: Decimal) -> int:
    """Dollars as whole millionths, rounded up (an estimate never comes out low)."""
    return int((dollars * MICROS).to_integral_value(rounding=ROUND_CEILING))


def shown(micros: int | None) -> str:
    """`$1.50`, `$0.0001`: dollars as a person reads them (at least cents)."""
    if micros is None:
        return "none"
    amount = Decimal(micros) / MICROS
    cents = amount.quantize(Decimal("0.01"))
    return f"${cents}" if cents == amount else f"${amount.normalize():f}"


@dataclass(frozen=True)
class EngineReservation:
    """What `reserve` decided: `new` (call_id to send), `over` (whose dollar budget), `no_budget` (the user has no
    dollar budget), `repeat` (the first call: its state and kept answer) or `conflict` (the key was used for another
    request: nothing reserved)."""

    kind: str
    call_id: int | None = None
    over: str | None = None
    state: str | None = None
    status_code: int | None = None
    media_type: str | None = None
    body: bytes | None = None
    left: int | None = None


def reserve(
    ledger: GatewayLedger,
    user: str,
    idem_key: str | None,
    provider: str,
    endpoint: str,
    model: str | None,
    micros: int,
    fingerprint: str | None,
    repeat_only: bool = False,
) -> EngineReservation:
    """Claim the idempotency key and reserve `micros` from the user's (and the team's) dollar budget, in one
    transaction under the reservation lock; or say why not. A repeat of a claimed key is answered from its call;
    `repeat_only` (a notebook's `resume()` asking again) never makes a new call: a key never seen is `unseen`."""
    if micros <= 0:
        raise ValueError("an engine call's price must be positive")
    with ledger._cursor() as cur:
        ledger._lock_for_reserve(cur, user)
        if idem_key:
            row = cur.one(
                "SELECT id, state, status_code, media_type, body, fingerprint FROM engine_calls "
                "WHERE user_name = ? AND idem_key = ?",
                (user, idem_key),
            )
            if row:
                if row[5] is not None and fingerprint is not None and row[5] != fingerprint:
                    return EngineReservation("conflict")
                body = bytes(row[4]) if row[4] is not None else None
                return EngineReservation("repeat", int(row[0]), None, row[1], row[2], row[3], body)
        if repeat_only:
            return EngineReservation("unseen")
        left, whose, has_budget = _left(cur, user)
        if not has_budget:
            return EngineReservation("no_budget")
        if left is not None and left < micros:
            return EngineReservation("over", over=whose, left=left)
        row = cur.one(
            "INSERT INTO engine_calls (user_name, idem_key, provider, endpoint, model, estimated_usd, state, "
            f"fingerprint, owner, created_at, day) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, {ledger.now_sql}, ?) "
            "RETURNING id",
            (
                user,
                idem_key,
                provider,
                endpoint,
                model,
                micros,
                PENDING,
                fingerprint,
                ledger.owner,
                time.strftime("%Y-%m-%d", time.gmtime()),
            ),
        )
        _move(cur, user, micros)
        return EngineReservation("new", call_id=int(row[0]))


def finish(
    ledger: GatewayLedger,
    call_id: int,
    state: str,
    status_code: int | None,
    media_type: str | None,
    body: bytes | None,
    note: str | None = None,
) -> bool:
    """Record how an engine call ended: `done` (charged at its estimate: no engine says afterwards what a song
    cost), `refused` (released), `unknown` (kept: it may have been charged). A call already done or refused is left
    as it is (False)."""
    with ledger._cursor() as cur:
        ledger._lock_for_reserve(cur, "")
        row = cur.one("SELECT user_name, state, estimated_usd FROM engine_calls WHERE id = ?", (call_id,))
        if row is None or row[1] in (DONE, REFUSED):
            return False
        cur.run(
            "UPDATE engine_calls SET state = ?, status_code = ?, media_type = ?, body = ?, note = ?, "
            f"ended_at = {ledger.now_sql} WHERE id = ?",
            (state, status_code, media_type, body, note, call_id),
        )
        if state == REFUSED:
            _move(cur, row[0], -int(row[2]))
        return True


def left_over(ledger: GatewayLedger, dead_after: float) -> int:
    """Engine calls a gateway left pending (killed mid-call, its process gone, or older than `dead_after` s) become
    unknown: they may have been charged, are never sent again, and keep their reservation. How many."""
    with ledger._cursor() as cur:
        ledger._lock_for_reserve(cur, "")
        now = float(cur.one(f"SELECT {ledger.now_sql}")[0])
        rows = cur.all("SELECT id, created_at, owner FROM engine_calls WHERE state = ?", (PENDING,))
        dead = [r[0] for r in rows if now - float(r[1]) > dead_after or not _alive(r[2])]
        for call_id in dead:
            note = "left pending by a gateway that stopped: it may have been charged"
            cur.run("UPDATE engine_calls SET state = ?, note = ? WHERE id = ?", (UNKNOWN, note, call_id))
    return len(dead)


# -- budgets --------------------------------------------------------------------------------------------------


def set_user_budget(ledger: GatewayLedger, name: str, micros: int | None) -> None:
    from .ledger import LedgerError

    with ledger._cursor() as cur:
        if not cur.one("SELECT 1 FROM users WHERE name = ?", (name,)):
            raise LedgerError(f"no user named {name!r}")
        cur.run("UPDATE users SET budget_usd = ? WHERE name = ?", (micros, name))


def set_team_budget(ledger: GatewayLedger, micros: int | None) -> None:
    with ledger._cursor() as cur:
        cur.run("UPDATE team SET budget_usd = ? WHERE id = 1", (micros,))


def standing(ledger: GatewayLedger) -> dict[str, tuple[int | None, int]]:
    """(dollar budget, dollars charged) in micros: the team's under "", each user's under their name."""
    with ledger._cursor(write=False) as cur:
        team = cur.one("SELECT budget_usd, COALESCE(spent_usd, 0) FROM team WHERE id = 1")
        rows = cur.all("SELECT name, budget_usd, COALESCE(spent_usd, 0) FROM users ORDER BY name")
    found = {"": (team[0], int(team[1]))} if team else {}
    return found | {r[0]: (r[1], int(r[2])) for r in rows}


# -- spend ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpendRow:
    """One provider's engine calls: calls, dollars estimated (micros, charged states only), unknown calls."""

    provider: str
    calls: int
    estimated_usd: int
    unknown: int


def spend(ledger: GatewayLedger) -> list[EngineSpendRow]:
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT provider, COUNT(*), COALESCE(SUM(CASE WHEN state IN ('pending', 'done', 'unknown') "
            "THEN estimated_usd ELSE 0 END), 0), SUM(CASE WHEN state IN ('pending', 'unknown') THEN 1 ELSE 0 END) "
            "FROM engine_calls GROUP BY provider ORDER BY provider"
        )
        service = cur.one(  # the service's calls paid from dollar budgets (their credits times the rate reserved at)
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN state IN ('pending', 'done', 'unknown', 'queued') "
            "THEN COALESCE(measured, estimated) * usd_rate ELSE 0 END), 0), "
            "SUM(CASE WHEN state IN ('pending', 'unknown') THEN 1 ELSE 0 END) FROM calls WHERE usd_rate IS NOT NULL"
        )
    found = [EngineSpendRow(str(r[0]), int(r[1]), int(r[2]), int(r[3] or 0)) for r in rows]
    if service and int(service[0]):
        found.append(EngineSpendRow(MUSICFUL, int(service[0]), int(service[1]), int(service[2] or 0)))
    return found


def calls(ledger: GatewayLedger) -> list[dict[str, Any]]:
    """Every engine call row, without its kept answer (for tests and audits)."""
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT id, user_name, idem_key, provider, endpoint, model, estimated_usd, state, status_code, note "
            "FROM engine_calls ORDER BY id"
        )
    names = ("id", "user", "idem_key", "provider", "endpoint", "model", "estimated_usd", "state", "status_code", "note")
    return [dict(zip(names, r, strict=True)) for r in rows]

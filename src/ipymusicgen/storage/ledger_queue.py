"""The gateway's fair queue in the ledger: paid creates waiting for one of the upstream key's seats, shared by replicas.

`gateway serve --max-in-flight N` gives the upstream key N seats (rows of `queue_seats`). A paid create reserves its
price and either takes a free seat at once (nothing waiting) or waits in `queue` under ids of the gateway's own
making (`queue_ids`), its call `queued` (charged, never sent). Any replica claims the next row when a seat frees:
on PostgreSQL the seat and the row with `FOR UPDATE SKIP LOCKED` (replicas never wait on each other, and a seat or
a row is never taken twice); on SQLite inside its one write transaction. The next row is the oldest of the user
served longest ago (`queue_turns`): seats go round-robin across users with work waiting, so one user's thousands of
rows never starve a colleague. A claimed row is never sent again: its claimer sends it once, or, killed, leaves it
to the other replicas, which mark its call unknown (`reap`) for `gateway reconcile`, as any call whose gateway died.
A 429 from the upstream shrinks the seats for a while, for every replica (`queue_limit`); `gateway/queue_seats.py`
says by how much and how they grow back.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engines.musicful import created_ids as created_ids  # the one rule, re-exported for the queue's readers
from .ledger import PENDING, QUEUED, REFUSED, UNKNOWN, GatewayLedger, Reservation, _alive

WAITING, CLAIMED, CANCELLED = "queued", "claimed", "cancelled"
"""A queue row's states: waiting for a seat, taken by a replica (sent, or being sent), cancelled before a seat."""
CANCELLED_BODY = json.dumps(
    {"status": 400, "message": "Cancelled while queued: it was never sent, and nothing was charged.", "data": None}
).encode()


@dataclass(frozen=True)
class Placed:
    """What `enqueue` decided: the reservation (as `GatewayLedger.reserve`'s), and for a call in the queue its ids,
    whether the caller was (or is now) answered with them (`shown`), its place in line and the seat it holds
    (direct)."""

    reservation: Reservation
    ids: tuple[str, ...] = ()
    shown: bool = False
    position: int = 0
    slot: int | None = None
    waiting: bool = True
    """Whether it still waits (a repeat of one sent since answers its ids as sent)."""


@dataclass(frozen=True)
class Claimed:
    call_id: int
    user: str
    endpoint: str
    request: bytes | None
    slot: int


@dataclass(frozen=True)
class Held:
    """A seat in use: its call's state, endpoint and answer (its task ids), who holds it and since when."""

    slot: int
    call_id: int
    holder: str | None
    held_at: float
    checked_at: float | None
    state: str
    endpoint: str
    body: bytes | None


@dataclass(frozen=True)
class Looked:
    """One of the gateway's ids as its user polls it: its row's state, its call's, the call's answer, its place."""

    task_id: str
    index: int
    call_id: int
    row_state: str
    call_state: str
    body: bytes | None
    position: int
    endpoint: str = ""
    swap: tuple[str, str] | None = None
    """(the stand-in sent, the id the caller asked for) of a create naming a song or singer not theirs."""


def _lock(ledger: GatewayLedger) -> str:
    return getattr(ledger, "claim_lock", "")


def ensure_seats(ledger: GatewayLedger, most: int) -> None:
    """Seat rows 1..`most` (more from another replica's larger cap stay: each replica claims only up to its own)."""
    with ledger._cursor() as cur:
        for slot in range(1, most + 1):
            cur.run("INSERT INTO queue_seats (slot) VALUES (?) ON CONFLICT (slot) DO NOTHING", (slot,))


def _free_seat(ledger: GatewayLedger, cur: Any, cap: int) -> int | None:
    """A free seat at or under `cap`, locked for this transaction; none while a seat above `cap` is in use (after a
    shrink: the seats above it drain first, and are never taken again while it holds)."""
    if cur.one("SELECT 1 FROM queue_seats WHERE call_id IS NOT NULL AND slot > ? LIMIT 1", (cap,)):
        return None
    row = cur.one(
        "SELECT slot FROM queue_seats WHERE call_id IS NULL AND slot <= ? ORDER BY slot LIMIT 1" + _lock(ledger), (cap,)
    )
    return int(row[0]) if row else None


def _hold(cur: Any, slot: int, call_id: int, user: str, me: str, now: float) -> None:
    cur.run(
        "UPDATE queue_seats SET call_id = ?, holder = ?, held_at = ?, checked_at = NULL WHERE slot = ?",
        (call_id, me, now, slot),
    )
    cur.run(
        "INSERT INTO queue_turns (user_name, turn) VALUES (?, (SELECT COALESCE(MAX(turn), 0) + 1 FROM queue_turns)) "
        "ON CONFLICT (user_name) DO UPDATE SET turn = excluded.turn",
        (user,),
    )


def enqueue(
    ledger: GatewayLedger,
    user: str,
    idem_key: str | None,
    endpoint: str,
    model: str | None,
    estimated: int,
    fingerprint: str | None,
    request: bytes | None,
    cap: int,
    now: float,
    new_id: Callable[[], str],
    ids_per_call: int = 2,
    swap: tuple[str, str] | None = None,
) -> Placed:
    """Reserve a paid create and seat it at once (nothing waiting, a seat free) or queue it; in one transaction
    with the reservation, so its price is held from the moment it is queued. A repeat of an Idempotency-Key
    answers as its first call did (its queue ids, when the caller got those)."""
    with ledger._cursor() as cur:
        ledger._lock_for_reserve(cur, user)
        slot = None
        if not cur.one("SELECT 1 FROM queue WHERE state = 'queued' LIMIT 1"):
            slot = _free_seat(ledger, cur, cap)
        state = PENDING if slot is not None else QUEUED
        found = ledger.reserve_in(cur, user, idem_key, endpoint, model, estimated, fingerprint, request, state)
        if found.kind == "repeat" and found.call_id is not None:
            row = cur.one("SELECT ids, shown, state FROM queue WHERE call_id = ?", (found.call_id,))
            if row and row[1] and row[2] != CANCELLED:  # a cancelled one answers as its refused call
                ids, waiting = tuple(json.loads(row[0])), row[2] == WAITING
                place = _positions(cur, user, [found.call_id])[0] if waiting else 0
                return Placed(found, ids, True, place, waiting=waiting)
            return Placed(found)
        if found.kind != "new" or found.call_id is None:
            return Placed(found)
        ids = tuple(new_id() for _ in range(ids_per_call))
        seated = slot is not None
        cur.run(
            "INSERT INTO queue (call_id, user_name, endpoint, ids, state, shown, claimed_by, claimed_at, queued_at, "
            "swap) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                found.call_id,
                user,
                endpoint,
                json.dumps(ids),
                CLAIMED if seated else WAITING,
                0 if seated else 1,
                ledger.owner if seated else None,
                now if seated else None,
                now,
                json.dumps(list(swap)) if swap is not None else None,
            ),
        )
        for index, task_id in enumerate(ids):
            cur.run("INSERT INTO queue_ids (task_id, call_id, idx) VALUES (?, ?, ?)", (task_id, found.call_id, index))
        if slot is not None:
            _hold(cur, slot, found.call_id, user, ledger.owner, now)
            return Placed(found, ids, False, 0, slot)
        return Placed(found, ids, True, _positions(cur, user, [found.call_id])[0])


def claim(ledger: GatewayLedger, cap: int, now: float) -> Claimed | None:
    """Take a free seat and the next row for it (round-robin across users), or None: no seat, or nothing waiting.
    The call's window opens now (it is being sent) and this replica is recorded as its sender."""
    lock = _lock(ledger)
    with ledger._cursor() as cur:
        users = cur.all(
            "SELECT q.user_name, COALESCE(t.turn, 0) FROM queue q LEFT JOIN queue_turns t ON t.user_name = q.user_name "
            "JOIN users u ON u.name = q.user_name AND u.revoked = 0 "
            "WHERE q.state = 'queued' GROUP BY q.user_name, t.turn ORDER BY COALESCE(t.turn, 0), MIN(q.call_id) "
            "LIMIT 16"
        )
        row = None
        for user, turn in users:
            # a user whose next row another replica is taking just now, or took since the list was read (its turn
            # moved on): the next user's turn, never the same user twice in a row
            row = cur.one(
                "SELECT call_id FROM queue WHERE state = 'queued' AND call_id = (SELECT MIN(call_id) FROM queue "
                "WHERE state = 'queued' AND user_name = ?) "
                "AND COALESCE((SELECT turn FROM queue_turns WHERE user_name = ?), 0) = ?" + lock,
                (user, user, turn),
            )
            if row:
                break
        if row is None:
            return None
        slot = _free_seat(ledger, cur, cap)  # after the row: a seat is locked only when there is a row to seat
        if slot is None:
            return None
        call_id = int(row[0])
        cur.run(
            "UPDATE queue SET state = 'claimed', claimed_by = ?, claimed_at = ? WHERE call_id = ?",
            (ledger.owner, now, call_id),
        )
        cur.run(
            f"UPDATE calls SET state = 'pending', created_at = {ledger.now_sql}, owner = ? WHERE id = ? "
            "AND state = 'queued'",
            (ledger.owner, call_id),
        )
        user, endpoint, request = cur.one("SELECT user_name, endpoint, request FROM calls WHERE id = ?", (call_id,))
        _hold(cur, slot, call_id, user, ledger.owner, now)
    return Claimed(call_id, user, endpoint, bytes(request) if request is not None else None, slot)


def requeue(ledger: GatewayLedger, call_id: int) -> None:
    """A claimed call the upstream refused with 429 (not made, not charged): back in line, its seat freed; its user
    holds its queue ids from now on (a direct send that met a 429 answers with them)."""
    with ledger._cursor() as cur:
        cur.run(
            "UPDATE queue SET state = 'queued', claimed_by = NULL, claimed_at = NULL, shown = 1 "
            "WHERE call_id = ? AND state = 'claimed'",
            (call_id,),
        )
        cur.run("UPDATE calls SET state = 'queued' WHERE id = ? AND state = 'pending'", (call_id,))
        _free(cur, call_id)


def _free(cur: Any, call_id: int) -> None:
    cur.run(
        "UPDATE queue_seats SET call_id = NULL, holder = NULL, held_at = NULL, checked_at = NULL WHERE call_id = ?",
        (call_id,),
    )


def release(ledger: GatewayLedger, call_id: int) -> None:
    """Free the seat a call holds (its songs are finished, it was refused, or it has held it too long)."""
    with ledger._cursor() as cur:
        _free(cur, call_id)


def after_send(ledger: GatewayLedger, call_id: int) -> None:
    """Free the seat of a call the upstream refused (it makes nothing); a call answered holds it until its songs are
    finished (`held`, `release`)."""
    with ledger._cursor() as cur:
        if cur.one("SELECT 1 FROM calls WHERE id = ? AND state = 'refused'", (call_id,)):
            _free(cur, call_id)


def checked(ledger: GatewayLedger, slot: int, now: float) -> None:
    with ledger._cursor() as cur:
        cur.run("UPDATE queue_seats SET checked_at = ? WHERE slot = ?", (now, slot))


def held(ledger: GatewayLedger) -> list[Held]:
    """Every seat in use, with its call."""
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT s.slot, s.call_id, s.holder, s.held_at, s.checked_at, c.state, c.endpoint, c.body "
            "FROM queue_seats s JOIN calls c ON c.id = s.call_id WHERE s.call_id IS NOT NULL ORDER BY s.slot"
        )
    return [
        Held(int(r[0]), int(r[1]), r[2], float(r[3] or 0), r[4], r[5], r[6], bytes(r[7]) if r[7] is not None else None)
        for r in rows
    ]


def reap(ledger: GatewayLedger, now: float, dead_after: float) -> list[int]:
    """Rows another replica claimed and never finished sending, whose replica is gone (on this machine: its process;
    elsewhere: a claim older than `dead_after`): their calls become unknown (never sent again; `gateway reconcile`
    settles them as any unknown call) and their seats are freed, so the others go on. The calls marked."""
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT q.call_id, q.claimed_by, q.claimed_at FROM queue q JOIN calls c ON c.id = q.call_id "
            "WHERE q.state = 'claimed' AND c.state = 'pending' AND q.claimed_by <> ?",
            (ledger.owner,),
        )
    dead = [int(r[0]) for r in rows if not _alive(r[1]) or now - float(r[2] or 0) > dead_after]
    note = "its gateway stopped while sending it from the queue: it may have been made (gateway reconcile)"
    for call_id in dead:
        ledger.finish(call_id, UNKNOWN, None, None, note=note)
        release(ledger, call_id)
    return dead


def cancel_revoked(ledger: GatewayLedger) -> int:
    """Cancel every row still waiting of a user whose token was revoked (`gateway user revoke`): nothing is sent
    for them on the team's key any more, and each row's price is given back once (`cancel`). How many."""
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT MIN(i.task_id) FROM queue q JOIN users u ON u.name = q.user_name AND u.revoked = 1 "
            "JOIN queue_ids i ON i.call_id = q.call_id WHERE q.state = 'queued' GROUP BY q.call_id"
        )
    return sum(1 for (task_id,) in rows if cancel(ledger, task_id))


def cancel(ledger: GatewayLedger, task_id: str, user: str | None = None) -> bool:
    """Cancel a row still waiting (named by one of its ids; `user`: only theirs): its reservation is released at
    once. False when there is no such row waiting (sent, being sent, or not theirs)."""
    with ledger._cursor() as cur:
        ledger._lock_for_reserve(cur, "")
        row = cur.one(
            "SELECT q.call_id, q.user_name FROM queue q WHERE q.state = 'queued' AND q.call_id = "
            "(SELECT call_id FROM queue_ids WHERE task_id = ?)" + _lock(ledger),
            (task_id,),
        )
        if row is None or (user is not None and row[1] != user):
            return False
        call_id, owner = int(row[0]), row[1]
        estimated = cur.one("SELECT estimated, usd_rate FROM calls WHERE id = ? AND state = 'queued'", (call_id,))
        cur.run("UPDATE queue SET state = 'cancelled' WHERE call_id = ?", (call_id,))
        if estimated is None:
            return True
        cur.run(
            f"UPDATE calls SET state = ?, status_code = 200, body = ?, note = ?, ended_at = {ledger.now_sql} "
            "WHERE id = ?",
            (REFUSED, CANCELLED_BODY, "cancelled while queued", call_id),
        )
        ledger._move(cur, owner, -int(estimated[0]), estimated[1])  # in the unit it was reserved in
        return True


def look_up(ledger: GatewayLedger, user: str, ids: list[str] | None) -> dict[str, Looked]:
    """The caller's own queue ids among `ids` (another user's read as absent), each with its row and call; `ids`
    None: every one of the caller's queue ids that they were answered with."""
    if ids is not None and not ids:
        return {}
    marks = ", ".join("?" for _ in ids or ())
    which = f"i.task_id IN ({marks})" if ids is not None else "q.shown = 1"
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT i.task_id, i.idx, q.call_id, q.state, c.state, c.body, q.endpoint, q.swap FROM queue_ids i "
            "JOIN queue q ON q.call_id = i.call_id JOIN calls c ON c.id = q.call_id "
            f"WHERE q.user_name = ? AND {which} ORDER BY q.call_id, i.idx",
            (user, *(ids or ())),
        )
        waiting = sorted({int(r[2]) for r in rows if r[3] == WAITING})
        places = dict(zip(waiting, _positions(cur, user, waiting), strict=True))
    return {
        r[0]: Looked(
            r[0],
            int(r[1]),
            int(r[2]),
            r[3],
            r[4],
            bytes(r[5]) if r[5] is not None else None,
            places.get(int(r[2]), 0),
            r[6],
            tuple(json.loads(r[7])) if r[7] else None,  # type: ignore[arg-type]
        )
        for r in rows
    }


def _positions(cur: Any, user: str, call_ids: list[int]) -> list[int]:
    """Each waiting call's place in line (1: next), as round-robin will serve it: ahead of a user's k-th row are
    every other user's first k rows, and the k+1-th of those served longer ago."""
    if not call_ids:
        return []
    users = cur.all(
        "SELECT q.user_name, COUNT(*), MIN(q.call_id), COALESCE(t.turn, 0) FROM queue q LEFT JOIN queue_turns t "
        "ON t.user_name = q.user_name WHERE q.state = 'queued' GROUP BY q.user_name, t.turn"
    )
    mine = next(((int(r[3]), int(r[2])) for r in users if r[0] == user), (0, 0))
    waiting: list[int] = []
    if len(call_ids) > 1:  # the user's whole line once (a listing of thousands), not a count per row
        rows = cur.all("SELECT call_id FROM queue WHERE state = 'queued' AND user_name = ? ORDER BY call_id", (user,))
        waiting = [int(r[0]) for r in rows]
    places = []
    for call_id in call_ids:
        if len(call_ids) > 1:
            k = bisect.bisect_left(waiting, call_id)
        else:
            ahead = cur.one(
                "SELECT COUNT(*) FROM queue WHERE state = 'queued' AND user_name = ? AND call_id < ?", (user, call_id)
            )
            k = int(ahead[0])
        before = 0
        for name, count, first, turn in users:
            if name == user:
                continue
            before += min(int(count), k) + (1 if int(count) > k and (int(turn), int(first)) < mine else 0)
        places.append(before + k + 1)
    return places


def load(ledger: GatewayLedger) -> list[tuple[str, int, int]]:
    """Per user with rows in the queue: (user, rows waiting, seats held), for `gateway queue`."""
    with ledger._cursor(write=False) as cur:
        rows = cur.all(
            "SELECT q.user_name, SUM(CASE WHEN q.state = 'queued' THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN s.slot IS NOT NULL THEN 1 ELSE 0 END) FROM queue q "
            "LEFT JOIN queue_seats s ON s.call_id = q.call_id GROUP BY q.user_name ORDER BY q.user_name"
        )
    return [(r[0], int(r[1] or 0), int(r[2] or 0)) for r in rows if int(r[1] or 0) or int(r[2] or 0)]


def limit(ledger: GatewayLedger) -> tuple[int, float, float] | None:
    """The seats a 429 shrank the key to: (seats, when, for how long), or None."""
    with ledger._cursor(write=False) as cur:
        row = cur.one("SELECT low, shrunk_at, hold FROM queue_limit WHERE id = 1")
    return (int(row[0]), float(row[1]), float(row[2])) if row and row[0] is not None else None


def shrink(ledger: GatewayLedger, low: int, now: float, hold: float) -> None:
    with ledger._cursor() as cur:
        cur.run(
            "INSERT INTO queue_limit (id, low, shrunk_at, hold) VALUES (1, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
            "low = excluded.low, shrunk_at = excluded.shrunk_at, hold = excluded.hold",
            (low, now, hold),
        )
